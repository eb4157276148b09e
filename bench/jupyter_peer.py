"""Jupyter peer for sandlot's hot-execution benchmark.

Starts a local ipykernel with the interpreter running this script (no isolation), imports the
same data stack as sandlot's default template into it, then times round trips of a cell with a
blocking jupyter_client: send ``execute_request``, wait for the ``execute_result`` on IOPub and
the ``execute_reply`` on the shell channel (``done_ms``), and separately for the kernel's
``status: idle`` that ends the request (``idle_ms``). Prints one JSON object on stdout.

Run by ``sandlot-bench hot`` with a venv that has the env's pinned numpy/pandas/matplotlib/
ipython plus ipykernel and jupyter_client. Usage::

    python jupyter_peer.py [--iterations 2000] [--warmup 50] [--time-limit 60] [--code 1+1]
"""

import argparse
import json
import sys
import time
from importlib import metadata

from jupyter_client.manager import start_new_kernel

SETUP = "import numpy, pandas, matplotlib, matplotlib.pyplot, IPython"
MSG_TIMEOUT = 30.0


def _wait_iopub(kc, msg_id, want):
    """Reads IOPub until a message of type `want` (or status idle when want is 'idle') that
    belongs to `msg_id` arrives; returns it."""
    while True:
        msg = kc.get_iopub_msg(timeout=MSG_TIMEOUT)
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if want == "idle":
            if kind == "status" and msg["content"].get("execution_state") == "idle":
                return msg
        elif kind == want:
            return msg
        elif kind == "error":
            raise RuntimeError("the cell raised: " + json.dumps(msg["content"])[:500])


def _wait_reply(kc, msg_id):
    while True:
        msg = kc.get_shell_msg(timeout=MSG_TIMEOUT)
        if msg.get("parent_header", {}).get("msg_id") == msg_id:
            if msg["content"].get("status") != "ok":
                raise RuntimeError("execute_reply not ok: " + json.dumps(msg["content"])[:500])
            return msg


def round_trip(kc, code):
    """One timed round trip: (ms to result and reply, ms to idle, the text/plain result)."""
    t0 = time.perf_counter()
    msg_id = kc.execute(code, store_history=True)
    result = _wait_iopub(kc, msg_id, "execute_result")
    _wait_reply(kc, msg_id)
    t_done = time.perf_counter()
    _wait_iopub(kc, msg_id, "idle")
    t_idle = time.perf_counter()
    text = result["content"]["data"].get("text/plain")
    return (t_done - t0) * 1000.0, (t_idle - t0) * 1000.0, text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--code", default="1+1")
    args = ap.parse_args()

    t = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    kernel_start_ms = (time.perf_counter() - t) * 1000.0
    try:
        # Same interpreter, same data stack loaded as in sandlot's default template.
        setup_id = kc.execute(SETUP + "\nimport sys\nsys.executable", store_history=False)
        res = _wait_iopub(kc, setup_id, "execute_result")
        _wait_reply(kc, setup_id)
        _wait_iopub(kc, setup_id, "idle")
        kernel_python = res["content"]["data"].get("text/plain", "").strip("'\"")

        for _ in range(args.warmup):
            round_trip(kc, args.code)
        done, idle, wrong = [], [], 0
        deadline = time.monotonic() + args.time_limit
        expected = None
        for _ in range(args.iterations):
            if time.monotonic() > deadline:
                break
            d, i, text = round_trip(kc, args.code)
            if expected is None:
                expected = text
            if text != expected:
                wrong += 1
            done.append(d)
            idle.append(i)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)

    versions = {}
    for dist in ("ipykernel", "jupyter_client", "pyzmq", "ipython", "numpy", "pandas", "matplotlib"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    json.dump(
        {
            "python": sys.version.split()[0],
            "client_python": sys.executable,
            "kernel_python": kernel_python,
            "versions": versions,
            "code": args.code,
            "result": expected,
            "wrong_results": wrong,
            "kernel_start_ms": kernel_start_ms,
            "done_ms": done,
            "idle_ms": idle,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
