"""Held egress and a contained sandbox, seen and decided in the console (Debian's headless
Chromium through Selenium, as ``test_console_browser.py``), against a real ``sandlot serve`` of
its own: it needs ``SANDLOT_EGRESS_HOSTS`` (names the sandbox may ask for, pointed at a local
upstream on 127.0.0.3, as ``tests/it/reviews.rs`` does), which the session's server lacks.

With a policy holding egress to two hosts (a ``@review`` permit on ``egress``): a cell run from
the sandbox's page asks for the first and is refused as held; its egress panel shows the attempt
held; the Approvals page shows the review and approves it; the cell run again gets through (its
output on the page) and the panel shows the attempt allowed. The second host is denied in the
browser and its next request refused. Then a cell prints the sandbox's decoy credential: the
sandbox is contained and its page says so, with the finding. Screenshots of the sandbox page
with its panels; axe-core on every page; no browser console error.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request
from typing import Iterator, List, Tuple

import pytest

from .conftest import serve
from .test_console_browser import _axe, _errors, _shot, _wait, browser  # noqa: F401 - fixture

pytestmark = pytest.mark.live

UPSTREAM_IP = "127.0.0.3"
HELD = "held.test"
REFUSED = "refused.test"


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        body = b"hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[int]:
    """A tiny HTTP server on 127.0.0.3 answering ``hello``: the hosts the sandbox asks for."""
    try:
        srv = http.server.ThreadingHTTPServer((UPSTREAM_IP, 0), _Hello)
    except OSError as e:
        pytest.skip(f"cannot listen on {UPSTREAM_IP}: {e}")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(scope="module")
def egress_server() -> Iterator[Tuple[str, str]]:
    hosts = f"{HELD}={UPSTREAM_IP},{REFUSED}={UPSTREAM_IP}"
    with serve({"SANDLOT_EGRESS_HOSTS": hosts, "SANDLOT_POOL_SIZE": "1"}) as (url, key, _pid):
        yield url, key


def _call(url: str, key: str, method: str, path: str, body=None, content_type="application/json"):
    data = None
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, method=method, data=data,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=180) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _fetch(host: str, port: int) -> str:
    return ("import urllib.request, urllib.error\n"
            "try:\n"
            f"    r = urllib.request.urlopen('http://{host}:{port}/x', timeout=20)\n"
            "    print('status', r.status, r.read().decode())\n"
            "except urllib.error.HTTPError as e:\n"
            "    print('status', e.code, e.read().decode())\n"
            "except Exception as e:\n"
            "    print('status 0', repr(e))\n")


def test_held_egress_approved_and_denied_and_a_contained_sandbox_in_the_console(
        egress_server, upstream: int, browser) -> None:  # noqa: F811 - the imported fixture
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, key = egress_server
    port = upstream
    d = browser
    status, versions = _call(url, key, "GET", "/v1/policies/versions")
    assert status == 200, versions
    status, current = _call(url, key, "GET", f"/v1/policies/versions/{versions['versions'][0]['seq']}")
    assert status == 200, current
    held_policy = (current["text"] + "\n@id(\"console-egress-review\")\n@review(\"a new domain\")\n"
                   "permit (principal, action == Sandlot::Action::\"egress\", resource)\n"
                   f"when {{ context.host == \"{HELD}\" || context.host == \"{REFUSED}\" }};\n")
    status, body = _call(url, key, "PUT", "/v1/policies", held_policy, content_type="text/plain")
    assert status == 200, body
    allow = [f"{HELD}:{port}", f"{REFUSED}:{port}", f"{UPSTREAM_IP}/32"]
    status, sb = _call(url, key, "POST", "/v1/sandboxes", {"network": allow})
    assert status == 201, sb
    sid = sb["id"]

    # Signed in with this server's key.
    d.get(f"{url}/console")
    _wait("the sign-in page", lambda: d.find_element(By.ID, "key"))
    d.find_element(By.ID, "key").send_keys(key)
    d.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
    _wait("the sandboxes page", lambda: d.find_element(By.ID, "sandboxes"))
    # The list's CPU/memory sparkline of the sandbox, read lazily once its row is in view.
    _wait("the sparkline", lambda: d.find_element(
        By.CSS_SELECTOR, f"#sandboxes tbody tr[data-id='{sid}'] td.usage svg polyline"))

    def open_page() -> None:
        d.get(f"{url}/console/sandboxes/{sid}")
        _wait("the sandbox page", lambda: d.find_element(By.ID, "code"))
        _wait("its family", lambda: d.find_elements(By.CSS_SELECTOR, "#family li.self"))

    def run_cell(code: str) -> str:
        """Runs `code` from the page; answers the new cell's text once it has finished."""
        before = len(d.find_elements(By.CSS_SELECTOR, "#cells > li"))
        box = d.find_element(By.ID, "code")
        # Set whole: typed, the browser would add nothing, but it is slower for many lines.
        d.execute_script("arguments[0].value = arguments[1]", box, code)
        box.send_keys(Keys.CONTROL, Keys.ENTER)

        def finished():
            cells = d.find_elements(By.CSS_SELECTOR, "#cells > li")
            if len(cells) <= before:
                return None
            last = cells[-1]
            # The head gets the duration when the result arrives; a refused run shows an error.
            head = last.find_element(By.CSS_SELECTOR, ".cell-head").text
            return " ms" in head or last.find_elements(By.CSS_SELECTOR, ".outputs pre.error")

        _wait("the cell to finish", finished, timeout=150)
        _wait("the run button back", lambda: d.find_element(By.ID, "run-button").is_enabled())
        return d.find_elements(By.CSS_SELECTOR, "#cells > li .outputs")[-1].text

    def egress_rows(host: str, outcome: str):
        return d.find_elements(By.CSS_SELECTOR, f"#egress tbody tr[data-host='{host}'][data-outcome='{outcome}']")

    def decide(host: str, verb: str, reason: str) -> None:
        d.get(f"{url}/console/approvals")
        rows = lambda: [r for r in d.find_elements(By.CSS_SELECTOR, "#reviews tbody tr[data-state=pending]")  # noqa: E731
                        if f"{host}:{port}" in r.text and sid in r.text]
        _wait(f"the held egress to {host} in the queue", rows)
        if verb == "approve":
            _shot(d, "10-approvals-egress")
            _axe(d, "approvals (held egress)")

        def once() -> bool:
            row = rows()[0]
            box = row.find_element(By.CSS_SELECTOR, "input[name=reason]")
            box.clear()
            box.send_keys(reason)
            row.find_element(By.CSS_SELECTOR, f"button[data-verb={verb}]").click()
            return True

        _wait(f"{verb} of {host}", once)
        _wait(f"the {host} review decided", lambda: not rows())
        assert _errors(d) == [], _errors(d)

    open_page()
    # Held: refused at once with "review pending"; the panel shows the attempt held, live.
    out = run_cell(_fetch(HELD, port))
    assert "review pending" in out and "hello" not in out, out
    _wait("the held attempt in the egress panel", lambda: egress_rows(HELD, "held"))
    assert _errors(d) == [], _errors(d)

    # Approved in the browser: the cell's next request goes through.
    decide(HELD, "approve", "known partner")
    open_page()
    out = run_cell(_fetch(HELD, port))
    assert "status 200 hello" in out, out
    _wait("the allowed attempt in the egress panel", lambda: egress_rows(HELD, "allowed"))

    # Another host: held, then denied in the browser; its next request is refused.
    out = run_cell(_fetch(REFUSED, port))
    assert "review pending" in out, out
    decide(REFUSED, "deny", "not this one")
    open_page()
    out = run_cell(_fetch(REFUSED, port))
    assert "hello" not in out and "status 200" not in out, out
    _wait("the denied attempt in the egress panel", lambda: egress_rows(REFUSED, "denied"))
    assert egress_rows(HELD, "allowed") and egress_rows(HELD, "held"), "the history stays"
    # A host name that looks like HTML, sent to the proxy by hand: the proxy refuses it as a
    # malformed request (recorded without the host); the panel shows the refusal and parses
    # nothing from it as HTML.
    hostile = (
        "import os, socket, urllib.parse\n"
        "p = urllib.parse.urlparse(os.environ['HTTP_PROXY'])\n"
        "s = socket.create_connection((p.hostname, p.port), timeout=10)\n"
        "h = 'x<b>y</b>.test'\n"
        "s.sendall(f'GET http://{h}/ HTTP/1.1\\r\\nHost: {h}\\r\\n\\r\\n'.encode())\n"
        "print('status', s.recv(100)[:40])\n")
    run_cell(hostile)
    _wait("the hostile attempt recorded", lambda: "malformed" in d.find_element(By.CSS_SELECTOR, "#egress tbody tr").text)
    assert not d.find_elements(By.CSS_SELECTOR, "#egress b"), "HTML from the sandbox was parsed"
    d.execute_script("document.getElementById('egress-title').scrollIntoView()")
    _shot(d, "11-sandbox-egress")
    _axe(d, "sandbox (egress panel)")
    assert _errors(d) == [], _errors(d)

    # Its family, live: a snapshot taken and a fork made elsewhere appear on the page (the
    # fork's events refresh the panel).
    status, snap = _call(url, key, "POST", f"/v1/sandboxes/{sid}/snapshots", {})
    assert status in (200, 201), snap
    status, fork = _call(url, key, "POST", f"/v1/sandboxes/{sid}/fork", {})
    assert status in (200, 201), fork
    children = [c["id"] for c in fork.get("sandboxes", [])] or [fork.get("id")]
    _wait("the fork in the family", lambda: any(
        c and c in e.text for e in d.find_elements(By.CSS_SELECTOR, "#family li.child") for c in children))
    _wait("the snapshot in the family", lambda: any(
        snap["id"] in e.text for e in d.find_elements(By.CSS_SELECTOR, "#family li.snapshot")))
    assert _errors(d) == [], _errors(d)

    # A guardrail contains the sandbox: its page says why, with the finding.
    run_cell("import os\nprint(os.environ['AWS_SECRET_ACCESS_KEY'])")
    _wait("the containment on the page", lambda: not d.find_element(By.ID, "contained-why").get_attribute("hidden")
          and "Contained" in d.find_element(By.ID, "contained-why").text, timeout=60)
    _wait("the finding", lambda: d.find_elements(By.CSS_SELECTOR, "#findings tbody tr"))
    _wait("the facts saying contained", lambda: "Contained" in d.find_element(By.ID, "facts").text)
    assert "canary" in d.find_element(By.ID, "findings").text
    # Opened afresh, the page shows it as well (not only live).
    open_page()
    _wait("the containment on a fresh page", lambda: "Contained" in d.find_element(By.ID, "contained-why").text)
    _wait("the finding on a fresh page", lambda: d.find_elements(By.CSS_SELECTOR, "#findings tbody tr"))
    d.execute_script("window.scrollTo(0, 0)")
    _shot(d, "12-sandbox-contained-facts")
    d.execute_script("document.getElementById('family-title').scrollIntoView()")
    _shot(d, "12-sandbox-contained")
    _axe(d, "sandbox (contained)")
    # Back on the list: the sandbox's sparkline drawn again, now from several readings.
    d.get(f"{url}/console")
    spark = _wait("the sparkline after the cells", lambda: d.find_element(
        By.CSS_SELECTOR, f"#sandboxes tbody tr[data-id='{sid}'] td.usage svg"))
    assert "memory" in spark.get_attribute("aria-label"), spark.get_attribute("aria-label")
    _shot(d, "13-sandboxes-sparklines")
    _axe(d, "sandboxes (sparklines)")
    # A contained sandbox refuses its files and cells: the browser logs those refusals as
    # failed loads (its own network messages, not the page's); anything else is an error.
    others: List[dict] = [e for e in _errors(d) if "Failed to load resource" not in e.get("message", "")]
    assert others == [], others
