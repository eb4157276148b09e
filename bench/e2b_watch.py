"""Latency of E2B's ``watch_dir`` through sandlot: from a write made inside the sandbox to the
event at the client.

Creates one sandbox with the unmodified ``e2b`` SDK (async, so the watch is envd's streamed
``WatchDir``), watches a directory, then runs one command in the sandbox that writes ``N``
files, each after reading the clock (``date +%s%N``; the sandbox shares the host's clock),
``--gap`` seconds apart. Each sample is the time the client received the file's create event
minus the clock read just before its write (so the ``date`` process's own start counts
against us). Prints one JSON object on stdout: ``{"p50_ms", "p99_ms", "mean_ms", "max_ms",
"n", "missed", "sdk"}``.

Configuration is E2B's own::

    export E2B_API_URL=http://127.0.0.1:8080 E2B_SANDBOX_URL=http://127.0.0.1:8080 \\
        E2B_API_KEY=$(sudo cat <data_dir>/e2b-api-key)
    python bench/e2b_watch.py [--writes 50] [--gap 0.05] [--warmup 5] [--time-limit 60] \\
        [--samples]

``--iterations`` is another name for ``--writes`` (what sandlot-bench passes); the first
``--warmup`` writes are not counted; the writes are capped to fit ``--time-limit``.
"""

import argparse
import asyncio
import json
import statistics
import time
from importlib import metadata


def percentile(sorted_ms, q):
    if not sorted_ms:
        return None
    i = min(len(sorted_ms) - 1, max(0, round(q / 100 * (len(sorted_ms) - 1))))
    return sorted_ms[i]


async def main(writes: int, gap: float, warmup: int, samples_out: bool) -> dict:
    import e2b

    sbx = await e2b.AsyncSandbox.create(timeout=300)
    try:
        await sbx.files.make_dir("/home/user/watched")
        seen = {}

        def on_event(ev):
            if ev.type == e2b.FilesystemEventType.CREATE and ev.name not in seen:
                seen[ev.name] = time.time_ns()

        handle = await sbx.files.watch_dir("/home/user/watched", on_event)
        script = (
            f"for i in $(seq 1 {writes}); do t=$(date +%s%N); echo x > f$i; echo \"f$i $t\"; "
            f"sleep {gap}; done"
        )
        r = await sbx.commands.run(script, cwd="/home/user/watched", timeout=0)
        await asyncio.sleep(0.5)
        await handle.stop()
        written = [line.split() for line in r.stdout.splitlines() if line.strip()]
        in_order = [
            (seen[name] - int(t)) / 1e6 for name, t in written[warmup:] if name in seen
        ]
        samples = sorted(in_order)
        out = {
            "p50_ms": percentile(samples, 50),
            "p99_ms": percentile(samples, 99),
            "mean_ms": statistics.fmean(samples) if samples else None,
            "max_ms": samples[-1] if samples else None,
            "n": len(samples),
            "missed": len(written[warmup:]) - len(samples),
            "sdk": f"e2b {metadata.version('e2b')}",
        }
        if samples_out:
            out["samples_ms"] = [round(s, 4) for s in in_order]
        return out
    finally:
        await sbx.kill()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", "--iterations", type=int, default=50)
    ap.add_argument("--gap", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--samples", action="store_true", help="also print every sample (samples_ms)")
    a = ap.parse_args()
    warmup = min(a.warmup, 20)
    writes = warmup + max(1, min(a.writes, int(a.time_limit / (a.gap + 0.01))))
    print(json.dumps(asyncio.run(main(writes, a.gap, warmup, a.samples))))
