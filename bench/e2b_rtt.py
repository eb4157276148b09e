"""Round trips of E2B's code interpreter SDK through sandlot.

Creates one sandbox with the unmodified ``e2b_code_interpreter`` SDK, then times ``N``
``sbx.run_code("1+1")`` calls (each one HTTP request to ``/execute`` answered with
newline-delimited JSON events), after a warm-up. Prints one JSON object on stdout:
``{"p50_ms", "p99_ms", "mean_ms", "min_ms", "n", "sdk"}`` (plus ``samples_ms``, every sample in
order, with ``--samples``).

Configuration is E2B's own, nothing sandlot-specific::

    export E2B_API_URL=http://127.0.0.1:8080 E2B_SANDBOX_URL=http://127.0.0.1:8080 \\
        E2B_API_KEY=$(sudo cat <data_dir>/e2b-api-key)
    python bench/e2b_rtt.py [--iterations 2000] [--warmup 50] [--time-limit 60] [--code 1+1] \\
        [--samples]
"""

import argparse
import json
import statistics
import sys
import time
from importlib import metadata


def percentile(sorted_ms, q):
    if not sorted_ms:
        return None
    i = min(len(sorted_ms) - 1, max(0, round(q / 100 * (len(sorted_ms) - 1))))
    return sorted_ms[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=60.0, help="stop timing after this many seconds")
    ap.add_argument("--code", default="1+1")
    ap.add_argument("--samples", action="store_true", help="also print every sample (samples_ms)")
    args = ap.parse_args()

    from e2b_code_interpreter import Sandbox

    sbx = Sandbox.create(timeout=max(300, int(args.time_limit * 2) + 60))
    try:
        expected = sbx.run_code(args.code)
        if expected.error is not None:
            sys.exit(f"the cell raised: {expected.error.name}: {expected.error.value}")
        for _ in range(args.warmup):
            sbx.run_code(args.code)
        samples = []
        deadline = time.perf_counter() + args.time_limit
        for _ in range(args.iterations):
            t0 = time.perf_counter()
            ex = sbx.run_code(args.code)
            samples.append((time.perf_counter() - t0) * 1000.0)
            if ex.text != expected.text:
                sys.exit(f"unexpected result {ex.text!r} (expected {expected.text!r})")
            if time.perf_counter() > deadline:
                break
    finally:
        sbx.kill()
    ordered = sorted(samples)
    out = {
        "p50_ms": round(percentile(ordered, 50), 3),
        "p99_ms": round(percentile(ordered, 99), 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "min_ms": round(ordered[0], 3),
        "n": len(ordered),
        "code": args.code,
        "sdk": {
            "e2b": metadata.version("e2b"),
            "e2b-code-interpreter": metadata.version("e2b-code-interpreter"),
        },
    }
    if args.samples:
        out["samples_ms"] = [round(s, 4) for s in samples]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
