"""Round trips of sandlot's own REST execute from Python, the peer of the E2B and MCP clients.

Creates one sandbox with ``POST /v1/sandboxes``, then times ``N`` ``POST
/v1/sandboxes/{id}/execute`` calls of ``1+1`` (JSON in, JSON out) with ``httpx`` over one
kept-alive connection, after a warm-up; then deletes the sandbox. It is what the E2B SDK's
``run_code`` and MCP's ``run_python`` would cost without their protocol layers, from the same
language and HTTP library, so the difference is what those layers add. Prints one JSON object
on stdout: ``{"p50_ms", "p99_ms", "mean_ms", "min_ms", "n", "client"}`` (plus ``samples_ms``
with ``--samples``).

Usage::

    python bench/rest_rtt.py [--url http://127.0.0.1:7878] [--iterations 2000] [--warmup 50]
                             [--time-limit 60] [--code 1+1] [--samples]

The API key sent is ``$SANDLOT_API_KEY``, else (for a server on this machine) the one the
server keeps in its data dir.
"""

import argparse
import ipaddress
import json
import os
import platform
import statistics
import sys
import time
import urllib.parse
from importlib import metadata


def api_key(url):
    """``$SANDLOT_API_KEY``; else, for a server on this machine, the key it keeps in its data
    dir (``$SANDLOT_DATA_DIR/api-key``, else ``~/.local/share/sandlot/api-key``)."""
    key = os.environ.get("SANDLOT_API_KEY", "").strip()
    if key:
        return key
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if not local:
        return None
    data = os.environ.get("SANDLOT_DATA_DIR") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "sandlot"
    )
    try:
        with open(os.path.join(data, "api-key")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def percentile(sorted_ms, q):
    if not sorted_ms:
        return None
    i = min(len(sorted_ms) - 1, max(0, round(q / 100 * (len(sorted_ms) - 1))))
    return sorted_ms[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("SANDLOT_URL", "http://127.0.0.1:7878"))
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=60.0, help="stop timing after this many seconds")
    ap.add_argument("--code", default="1+1")
    ap.add_argument("--samples", action="store_true", help="also print every sample (samples_ms)")
    args = ap.parse_args()

    import httpx

    headers = {}
    key = api_key(args.url)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    # One connection, kept alive: what an SDK holding a client does.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(base_url=args.url.rstrip("/"), headers=headers, limits=limits, timeout=60) as http:
        r = http.post("/v1/sandboxes", json={"idle_timeout": max(300, int(args.time_limit * 2) + 60)})
        if r.status_code != 201:
            sys.exit(f"create answered {r.status_code}: {r.text[:300]}")
        sid = r.json()["id"]
        path = f"/v1/sandboxes/{sid}/execute"
        body = {"code": args.code, "language": "python"}

        def run():
            r = http.post(path, json=body)
            if r.status_code != 200:
                sys.exit(f"execute answered {r.status_code}: {r.text[:300]}")
            v = r.json()
            if v.get("end_state") != "ok":
                sys.exit(f"execute ended {v.get('end_state')!r}: {r.text[:300]}")
            return (v.get("result") or {}).get("text/plain")

        try:
            expected = run()
            for _ in range(args.warmup):
                run()
            samples = []
            deadline = time.perf_counter() + args.time_limit
            for _ in range(args.iterations):
                t0 = time.perf_counter()
                got = run()
                samples.append((time.perf_counter() - t0) * 1000.0)
                if got != expected:
                    sys.exit(f"unexpected result {got!r} (expected {expected!r})")
                if time.perf_counter() > deadline:
                    break
        finally:
            http.delete(f"/v1/sandboxes/{sid}")
    ordered = sorted(samples)
    out = {
        "p50_ms": round(percentile(ordered, 50), 3),
        "p99_ms": round(percentile(ordered, 99), 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "min_ms": round(ordered[0], 3),
        "n": len(ordered),
        "code": args.code,
        "result": expected,
        "client": f"httpx {metadata.version('httpx')}",
        "python": platform.python_version(),
    }
    if args.samples:
        out["samples_ms"] = [round(s, 4) for s in samples]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
