"""Round trips of MCP `run_python` over streamable HTTP through sandlot's `/mcp`.

Opens one MCP session with the official MCP Python SDK (`mcp`) against ``<url>/mcp``, then
times ``N`` ``call_tool("run_python", {"code": "1+1"})`` calls (each one POST answered with a
short SSE stream), after a warm-up. With ``--raw`` it also times the same call as raw JSON-RPC
POSTs over one kept-alive HTTP/1.1 connection (``http.client``), in a session of its own,
which separates the server's time from the client library's. Prints one JSON object on
stdout::

    {"p50_ms", "p99_ms", "mean_ms", "min_ms", "n", "client", "protocol_version",
     "raw": {"p50_ms", "p99_ms", "mean_ms", "min_ms", "n"}}   # raw only with --raw

With ``--samples`` each summary also holds ``samples_ms``, every sample in order.

Usage::

    python bench/mcp_rtt.py [--url http://127.0.0.1:7878] [--iterations 2000] [--warmup 50]
                            [--time-limit 60] [--code 1+1] [--raw] [--samples]

Both send the API key in an ``Authorization`` header: ``$SANDLOT_API_KEY``, else (for a server
on this machine) the one the server keeps in its data dir. The SDK's session gets it through
its own HTTP client (``httpx2``, with the SDK's default timeouts), as the SDK documents.
"""

import argparse
import ipaddress
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse
from importlib import metadata

PROTOCOL = "2025-11-25"


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


def summary(samples, with_samples=False):
    ordered = sorted(samples)
    out = {
        "p50_ms": round(percentile(ordered, 50), 3),
        "p99_ms": round(percentile(ordered, 99), 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "min_ms": round(ordered[0], 3),
        "n": len(ordered),
    }
    if with_samples:
        out["samples_ms"] = [round(s, 4) for s in samples]
    return out


def time_client(url, args):
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    key = api_key(url)
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def run():
        # The timeouts the SDK gives the client it makes when given none (30 s, 300 s read).
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
        async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http), read_timeout_seconds=60) as client:
            first = await client.call_tool("run_python", {"code": args.code})
            if first.is_error:
                sys.exit(f"the cell raised: {first.content}")
            # The value is the last block (IPython may warn on stderr now and then, e.g. when
            # its output cache fills).
            expected = [c.text for c in first.content if c.type == "text"][-1:]
            for _ in range(args.warmup):
                await client.call_tool("run_python", {"code": args.code})
            samples = []
            deadline = time.perf_counter() + args.time_limit
            for _ in range(args.iterations):
                t0 = time.perf_counter()
                r = await client.call_tool("run_python", {"code": args.code})
                samples.append((time.perf_counter() - t0) * 1000.0)
                got = [c.text for c in r.content if c.type == "text"][-1:]
                if got != expected:
                    sys.exit(f"unexpected result {got!r} (expected {expected!r})")
                if time.perf_counter() > deadline:
                    break
            return samples, client.protocol_version

    return anyio.run(run)


class Raw:
    """JSON-RPC over one kept-alive HTTP/1.1 connection, reading the SSE answer."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
        self.path = (u.path.rstrip("/") or "") + "/mcp"
        self.session = None
        self.next_id = 0
        key = api_key(url)
        self.auth = {"Authorization": f"Bearer {key}"} if key else {}

    def post(self, message):
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL,
            **self.auth,
        }
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        self.conn.request("POST", self.path, body=json.dumps(message), headers=headers)
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status >= 300:
            sys.exit(f"/mcp answered {resp.status}: {body[:300]!r}")
        self.session = resp.getheader("Mcp-Session-Id") or self.session
        if "id" not in message:
            return None
        for line in body.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():
                msg = json.loads(line[5:])
                if msg.get("id") == message["id"]:
                    return msg
        if body.strip().startswith(b"{"):
            return json.loads(body)
        sys.exit(f"no answer to {message['method']}: {body[:300]!r}")

    def request(self, method, params):
        self.next_id += 1
        return self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})

    def close(self):
        if self.session:
            self.conn.request("DELETE", self.path, headers={"Mcp-Session-Id": self.session, **self.auth})
            self.conn.getresponse().read()
        self.conn.close()


def time_raw(url, args):
    raw = Raw(url)
    try:
        raw.request(
            "initialize",
            {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "mcp_rtt", "version": "0"}},
        )
        raw.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "run_python", "arguments": {"code": args.code}}
        expected = raw.request("tools/call", call)["result"]["content"][-1:]
        for _ in range(args.warmup):
            raw.request("tools/call", call)
        samples = []
        deadline = time.perf_counter() + args.time_limit
        for _ in range(args.iterations):
            t0 = time.perf_counter()
            r = raw.request("tools/call", call)
            samples.append((time.perf_counter() - t0) * 1000.0)
            if r["result"]["content"][-1:] != expected:
                sys.exit(f"unexpected result {r!r}")
            if time.perf_counter() > deadline:
                break
        return samples
    finally:
        raw.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("SANDLOT_URL", "http://127.0.0.1:7878"))
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=60.0, help="stop timing after this many seconds")
    ap.add_argument("--code", default="1+1")
    ap.add_argument("--raw", action="store_true", help="also time raw JSON-RPC POSTs")
    ap.add_argument("--samples", action="store_true", help="also print every sample (samples_ms)")
    args = ap.parse_args()
    url = args.url.rstrip("/")

    samples, version = time_client(url, args)
    out = summary(samples, args.samples)
    out["client"] = f"mcp {metadata.version('mcp')}"
    out["protocol_version"] = version
    if args.raw:
        out["raw"] = summary(time_raw(url, args), args.samples)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
