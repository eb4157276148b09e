"""Live tests of exposed ports against a real `sandlot serve` (see conftest.py): an app started
inside a sandbox answers at ``sb.get_url(port)`` over HTTP (httpx) and WebSocket (the
``websockets`` client); ports not exposed, nothing listening and bad port lists fail clearly.
Like test_live.py, skipped only when the sandlot binary does not exist."""

from __future__ import annotations

import os

import httpx
import pytest

import sandlot
from sandlot import AsyncSandbox, Sandbox

pytestmark = pytest.mark.live

# A WebSocket echo server with the standard library only (the sandbox has no websocket package).
WS_ECHO = r'''
import base64, hashlib, socket, struct, sys, threading

def recv_exact(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b

def send(c, op, payload):
    n = len(payload)
    head = struct.pack(">BB", 128 | op, n) if n < 126 else struct.pack(">BBH", 128 | op, 126, n)
    c.sendall(head + payload)

def serve(c):
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            data += c.recv(4096) or b"\r\n\r\n"
        headers = dict((k.strip().lower(), v.strip()) for k, _, v in
                       (l.partition(":") for l in data.decode().split("\r\n")[1:] if l))
        key = headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % accept).encode())
        while True:
            b0, b1 = recv_exact(c, 2)
            op, n = b0 & 15, b1 & 127
            if n == 126:
                n = struct.unpack(">H", recv_exact(c, 2))[0]
            mask = recv_exact(c, 4)
            payload = bytes(x ^ mask[i % 4] for i, x in enumerate(recv_exact(c, n)))
            if op == 8:
                send(c, 8, payload[:2])
                return
            send(c, 10 if op == 9 else op, payload)
    except (EOFError, OSError, KeyError):
        pass
    finally:
        c.close()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
'''

START = """
import socket, subprocess, sys, time
subprocess.Popen([sys.executable] + {args!r}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 start_new_session=True, cwd='/workspace')
for _ in range(400):
    try:
        socket.create_connection(('127.0.0.1', {port}), timeout=1).close()
        break
    except OSError:
        time.sleep(0.05)
else:
    raise RuntimeError('the app did not start')
"""


def _start(sb, args, port):
    ex = sb.run_code(START.format(args=args, port=port))
    assert ex.end_state == "ok", ex.raw


def test_http_and_websocket_apps_answer_at_get_url(sandlot_url):
    with Sandbox(url=sandlot_url, ports=[8000, 8765, 8002]) as sb:
        assert sb.info().raw["ports"] == [8000, 8002, 8765]
        sb.files.write("site/index.html", "<a href='page.html'>page</a>")
        sb.files.write("site/page.html", "hello from the sandbox")
        sb.files.write("ws_echo.py", WS_ECHO)
        _start(sb, ["-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "site"], 8000)
        _start(sb, ["ws_echo.py", "8765"], 8765)

        url = sb.get_url(8000)
        token = sb.info().port_token
        assert token and token.startswith(sb.id + ".")
        # A capability URL: a browser opens it without the API key.
        assert url == f"{sandlot_url.rstrip('/')}/v1/ports/{token}/8000/"
        assert sb.port_url(8000, "page.html") == url + "page.html"
        keyed = f"{sandlot_url.rstrip('/')}/v1/sandboxes/{sb.id}/ports/8000/"
        with httpx.Client(timeout=30) as client:
            assert client.get(keyed).status_code == 401
            auth = {"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}"}
            assert client.get(keyed, headers=auth).status_code == 200
            forged = url.replace(token, token[:-1] + ("0" if token[-1] != "0" else "1"))
            assert client.get(forged).json()["error"]["code"] == "sandbox_not_found"
            index = client.get(url)
            assert index.status_code == 200 and "page.html" in index.text
            # the page's relative link resolves under the port's URL
            page = client.get(str(httpx.URL(url).join("page.html")))
            assert (page.status_code, page.text) == (200, "hello from the sandbox")

            refused = client.get(sb.get_url(9000))
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "port_not_exposed"
            silent = client.get(sb.get_url(8002))
            assert silent.status_code == 502
            assert silent.json()["error"]["code"] == "port_unreachable"

        from websockets.sync.client import connect

        with connect(sb.get_url(8765, "chat").replace("http://", "ws://", 1), open_timeout=30) as ws:
            ws.send("hello")
            assert ws.recv(timeout=30) == "hello"
            ws.send(b"\x00\x01\x02")
            assert ws.recv(timeout=30) == b"\x00\x01\x02"


def test_bad_port_lists_are_refused(sandlot_url):
    for ports in ([0], [70000], [True], list(range(1, 34))):
        with pytest.raises(sandlot.InvalidRequest):
            Sandbox(url=sandlot_url, ports=ports)
    with pytest.raises(TypeError):
        Sandbox(url=sandlot_url, ports=8000)
    with Sandbox(url=sandlot_url) as sb:
        with pytest.raises(sandlot.InvalidRequest):
            sb.get_url(0)
        # not exposed: the server says so
        resp = httpx.get(sb.get_url(8000), timeout=30, headers={"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}"})
        assert (resp.status_code, resp.json()["error"]["code"]) == (403, "port_not_exposed")


async def test_async_sandbox_exposes_all_ports(sandlot_url):
    async with AsyncSandbox.create(url=sandlot_url, all_ports=True) as sb:
        url = sb.get_url(8080)
        token = (await sb.info()).port_token
        assert token and url.endswith(f"/v1/ports/{token}/8080/")
        async with httpx.AsyncClient(timeout=30) as client:
            nothing = await client.get(url)
            assert (nothing.status_code, nothing.json()["error"]["code"]) == (502, "port_unreachable")
            low = await client.get(sb.get_url(80))
            assert (low.status_code, low.json()["error"]["code"]) == (403, "port_not_exposed")
