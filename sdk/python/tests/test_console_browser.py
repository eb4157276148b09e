"""The web console in a real browser: Debian's headless Chromium, driven by Selenium through
Debian's chromedriver (nothing downloaded), against the session's real ``sandlot serve`` with
real sandboxes.

Signs in, creates a sandbox from the page, sees the list update live when another client
creates one, runs a cell that plots and sees the figure appear, sees sandbox output that looks
like HTML stay text (and HTML output render in a script-less frame), checks that page script
cannot read the session cookie, that the browser console has no error, and signs out. A
screenshot of each page goes to ``target/console-screenshots/`` (kept as CI artifacts).

Needs ``chromium`` and ``chromium-driver`` (Debian packages; ``scripts/test`` installs them)
and ``selenium`` (in the SDK's test environment).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, List

import pytest

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[3]
SHOTS = REPO / "target" / "console-screenshots"
CHROMIUM = os.environ.get("SANDLOT_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SANDLOT_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT = 120.0

PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('console')\nplt.show()"
HOSTILE = (
    "print('<img src=x id=pwned onerror=\"document.title=1\">')\n"
    "from IPython.display import HTML, display\n"
    "display(HTML('<b id=framed>bold</b><script>parent.document.title=\"pwned\"</script>'))"
)


def _need(path: str, package: str) -> None:
    if not (os.path.exists(path) or shutil.which(path)):
        pytest.skip(f"the browser tests need {path} (apt-get install {package})")


@pytest.fixture(scope="module")
def browser():
    _need(CHROMIUM, "chromium")
    _need(CHROMEDRIVER, "chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(what: str, cond: Callable[[], object], timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - the page is still changing
            last_error = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_error})")


def _shot(driver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _errors(driver) -> List[dict]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def _api(url: str, method: str, path: str, body=None) -> dict:
    req = urllib.request.Request(
        url + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}",
                 "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read() or b"null")


AXE = os.environ.get("SANDLOT_TEST_AXE", str(REPO / "target" / "axe" / "node_modules" / "axe-core" / "axe.min.js"))


def _axe(driver, page: str) -> None:
    """Runs axe-core (``scripts/test`` installs the pinned npm package) in the page and fails on
    any serious or critical violation. The script is injected through WebDriver, which the
    page's CSP does not govern; the page itself still loads only its own files."""
    if not os.path.exists(AXE):
        if os.environ.get("CI"):
            raise AssertionError(f"axe-core is missing at {AXE} (scripts/test installs it)")
        pytest.skip(f"axe-core is missing at {AXE} (npm install axe-core into target/axe)")
    with open(AXE, encoding="utf-8") as f:
        driver.execute_script(f.read())
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then((r) => done(r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' '))}))))"
        ".catch((e) => done([{id: 'axe-error', impact: 'critical', help: String(e), nodes: []}]));")
    bad = [v for v in result if v.get("impact") in ("serious", "critical")]
    assert bad == [], f"axe-core on the {page} page: {json.dumps(bad, indent=1)}"


def _row_ids(driver) -> List[str]:
    return [tr.get_attribute("data-id") for tr in driver.find_elements("css selector", "#sandboxes tbody tr")]


def test_the_console_in_a_browser(sandlot_url: str, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    d = browser
    created: List[str] = []
    try:
        # Sign in.
        d.get(f"{sandlot_url}/console")
        _wait("the sign-in page", lambda: d.find_element(By.ID, "key"))
        _shot(d, "1-sign-in")
        _axe(d, "sign-in")
        d.find_element(By.ID, "key").send_keys(os.environ["SANDLOT_API_KEY"])
        d.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
        _wait("the sandboxes page", lambda: d.find_element(By.ID, "sandboxes"))
        _wait("the live stream", lambda: d.find_element(By.ID, "live-state").text == "live")
        paint = d.execute_script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0];"
            "return p ? p.startTime : null")
        print(f"console: the sandboxes page's first contentful paint after {paint} ms")

        # The session cookie is HttpOnly: page script does not see it.
        assert "sandlot_session" not in d.execute_script("return document.cookie")
        # Nor is the key anywhere in the page.
        assert os.environ["SANDLOT_API_KEY"] not in d.page_source

        # Create a sandbox from the page.
        before = set(_row_ids(d))
        d.find_element(By.CSS_SELECTOR, "#create button[type=submit]").click()
        mine = _wait("the new row", lambda: next(iter(set(_row_ids(d)) - before), None))
        created.append(mine)

        # Another client creates one: the list shows it without a reload.
        marker = d.execute_script("window.__same_page = 1; return window.__same_page")
        result = {}
        thread = threading.Thread(target=lambda: result.update(_api(sandlot_url, "POST", "/v1/sandboxes", {})))
        thread.start()
        thread.join(120)
        other = result["id"]
        created.append(other)
        _wait("the live row of a sandbox created elsewhere", lambda: other in _row_ids(d))
        assert d.execute_script("return window.__same_page") == marker, "the page did not reload"
        _shot(d, "2-sandboxes")
        _axe(d, "sandboxes")

        # Deleted elsewhere: the row goes, live.
        _api(sandlot_url, "DELETE", f"/v1/sandboxes/{other}")
        created.remove(other)
        _wait("the row of a deleted sandbox to go", lambda: other not in _row_ids(d))
        errors = _errors(d)
        assert errors == [], errors

        # The sandbox's page: run a cell that plots, see the figure appear.
        d.find_element(By.LINK_TEXT, mine).click()
        _wait("the sandbox page", lambda: d.find_element(By.ID, "code"))
        _wait("its facts", lambda: d.find_elements(By.CSS_SELECTOR, "#facts dd"))
        box = d.find_element(By.ID, "code")
        box.send_keys(PLOT)
        box.send_keys(Keys.CONTROL, Keys.ENTER)
        img = _wait("the figure", lambda: d.find_element(By.CSS_SELECTOR, ".cell .outputs img"))
        assert img.get_attribute("src").startswith("data:image/png;base64,")
        _wait("the figure to load", lambda: d.execute_script(
            "const i = document.querySelector('.cell .outputs img'); return i.complete && i.naturalWidth > 0"))
        _wait("the cell to finish", lambda: "ok" in d.find_element(By.CSS_SELECTOR, ".cell .cell-head").text)
        errors = _errors(d)
        assert errors == [], errors
        _shot(d, "3-sandbox")
        _axe(d, "sandbox")

        # Output that looks like HTML stays text; HTML output renders in a frame without script.
        box = d.find_element(By.ID, "code")
        box.clear()
        box.send_keys(HOSTILE)
        box.send_keys(Keys.CONTROL, Keys.ENTER)
        _wait("the hostile cell's stdout", lambda: any(
            "<img src=x" in p.text for p in d.find_elements(By.CSS_SELECTOR, ".cell pre.stdout")))
        frame = _wait("the HTML output's frame", lambda: d.find_element(By.CSS_SELECTOR, ".cell iframe"))
        assert frame.get_attribute("sandbox") == ""
        assert d.find_elements(By.ID, "pwned") == [], "sandbox output became markup"
        time.sleep(0.5)
        assert d.title != "pwned" and d.title != "1", d.title
        # The frame's blocked script is the one message the browser logs about it.
        unexpected = [e for e in _errors(d) if "sandboxed" not in e.get("message", "")]
        assert unexpected == [], unexpected

        # The files the cells wrote are listed.
        d.find_element(By.ID, "refresh").click()
        _wait("the file list", lambda: d.find_elements(By.CSS_SELECTOR, "#files tbody tr") is not None)
        _shot(d, "4-sandbox-files")

        # Another tenant's sandbox (or none) is a 404 page.
        d.get(f"{sandlot_url}/console/sandboxes/sb_not_there")
        _wait("the 404 page", lambda: "Not found" in d.find_element(By.TAG_NAME, "h1").text)
        _shot(d, "5-not-found")
        _axe(d, "not-found")
        d.get_log("browser")  # the 404 itself is logged as a failed load: expected here

        # Sign out.
        d.get(f"{sandlot_url}/console")
        _wait("the live stream", lambda: d.find_element(By.ID, "live-state").text == "live")
        d.find_element(By.ID, "sign-out").click()
        _wait("the sign-in page", lambda: d.find_element(By.ID, "key"))
        errors = _errors(d)
        assert errors == [], errors
    finally:
        for sid in created:
            try:
                _api(sandlot_url, "DELETE", f"/v1/sandboxes/{sid}")
            except Exception:  # noqa: BLE001 - cleanup only
                pass


REVIEW_MARK = "console-review-marker"


def _key_api(url: str, key: str, method: str, path: str, body=None):
    """A call with `key`; answers (status, body) for errors too."""
    req = urllib.request.Request(
        url + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=180) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _put_policies(url: str, text: str) -> None:
    req = urllib.request.Request(
        url + "/v1/policies", method="PUT", data=text.encode(),
        headers={"Authorization": f"Bearer {os.environ['SANDLOT_API_KEY']}", "Content-Type": "text/plain"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200


def _sign_in(d, url: str) -> None:
    from selenium.webdriver.common.by import By

    d.get(f"{url}/console")
    if d.find_elements(By.ID, "key"):
        d.find_element(By.ID, "key").send_keys(os.environ["SANDLOT_API_KEY"])
        d.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
    _wait("the sandboxes page", lambda: d.find_element(By.ID, "sandboxes"))


def test_the_policy_approvals_and_record_pages(sandlot_url: str, browser) -> None:
    """The Policy page shows the set in force and answers a what-if; the Approvals page
    approves a held execution (which then runs) and denies another (refused); the Record page
    shows the chain verified and draws an execution's lineage; an artifact downloads from its
    sandbox's page; axe-core finds nothing serious on any of them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = browser
    url = sandlot_url
    before = _api(url, "GET", "/v1/policies/versions")
    original = _api(url, "GET", f"/v1/policies/versions/{before['versions'][0]['seq']}")["text"]
    held = (original + "\n@id(\"console-review\")\n@review(\"the console test holds this cell\")\n"
            "permit (principal, action == Sandlot::Action::\"execute\", resource)\n"
            f"when {{ context.code like \"*{REVIEW_MARK}*\" }};\n")
    asker = _api(url, "POST", "/v1/keys", {"tenant": "default", "role": "member", "name": "console-asker"})
    created: List[str] = []
    try:
        _put_policies(url, held)
        _sign_in(d, url)

        # The operator sees every tenant's sandboxes, with their tenant, and filters by tenant.
        tenant = "console" + str(int(time.time() * 1000))[-8:]
        _api(url, "POST", "/v1/tenants", {"name": tenant})
        tkey = _api(url, "POST", "/v1/keys", {"tenant": tenant, "role": "member"})
        status, theirs = _key_api(url, tkey["key"], "POST", "/v1/sandboxes", {})
        assert status == 201, theirs
        d.get(f"{url}/console")
        _wait("the other tenant's row", lambda: theirs["id"] in _row_ids(d))
        row = d.find_element(By.CSS_SELECTOR, f"#sandboxes tbody tr[data-id='{theirs['id']}']")
        assert tenant in row.text and not row.find_elements(By.TAG_NAME, "button"), row.text
        d.find_element(By.ID, "tenant").send_keys(tenant)
        d.find_element(By.CSS_SELECTOR, "#tenant-filter button[type=submit]").click()
        _wait("only that tenant's rows", lambda: _row_ids(d) == [theirs["id"]])
        _axe(d, "sandboxes (every tenant)")
        _key_api(url, tkey["key"], "DELETE", f"/v1/sandboxes/{theirs['id']}")
        _api(url, "DELETE", f"/v1/keys/{tkey['id']}")

        # Policy: the set in force, its history (this test's set on top), and a what-if.
        d.get(f"{url}/console/policy")
        _wait("the policy text", lambda: "console-review" in d.find_element(By.ID, "current-text").text)
        _wait("the history", lambda: len(d.find_elements(By.CSS_SELECTOR, "#versions tbody tr")) >= 2)
        d.find_element(By.CSS_SELECTOR, "#versions tbody tr button").click()
        _wait("the diff", lambda: any("console-review" in e.text for e in d.find_elements(By.CSS_SELECTOR, "#diff-text .add")))
        Select(d.find_element(By.ID, "wi-gate")).select_by_value("execute")
        fields = d.find_element(By.ID, "wi-fields")
        fields.clear()
        fields.send_keys(json.dumps({"code": f"print('{REVIEW_MARK}')"}))
        d.find_element(By.CSS_SELECTOR, "#whatif button[type=submit]").click()
        _wait("the what-if answer", lambda: d.find_element(By.ID, "wi-decision").text == "review")
        assert "console-review" in d.find_element(By.ID, "wi-policies").text
        _wait("the decisions", lambda: d.find_elements(By.CSS_SELECTOR, "#decisions tbody tr") or
              not d.find_element(By.ID, "decisions-empty").get_attribute("hidden"))
        d.execute_script("window.scrollTo(0, 0)")
        _shot(d, "6-policy")
        _axe(d, "policy")
        assert _errors(d) == [], _errors(d)

        # Approvals: two held executions, from another key (the asker cannot decide its own).
        sid = _api(url, "POST", "/v1/sandboxes", {})["id"]
        created.append(sid)
        answers: dict = {}

        def ask(name: str, code: str) -> None:
            answers[name] = _key_api(url, asker["key"], "POST",
                                     f"/v1/sandboxes/{sid}/execute?review_wait=120",
                                     {"code": code, "timeout": 60})

        approve_code = f"open('approved.txt', 'w').write('ran')\nprint('{REVIEW_MARK}-approved')"
        deny_code = f"print('{REVIEW_MARK}-denied')"
        threads = [threading.Thread(target=ask, args=("approve", approve_code)),
                   threading.Thread(target=ask, args=("deny", deny_code))]
        threads[0].start()
        d.get(f"{url}/console/approvals")
        _wait("the live stream", lambda: d.find_element(By.ID, "live-state").text == "live")
        rows = lambda: d.find_elements(By.CSS_SELECTOR, "#reviews tbody tr[data-state=pending]")  # noqa: E731
        _wait("the first held action, live", lambda: any(f"{REVIEW_MARK}-approved" in r.text for r in rows()))
        threads[1].start()

        def second_held() -> bool:
            # Live when the server sends review events (review.created); without them the
            # page's Refresh button is how a person sees a new hold, and what this presses.
            if any(f"{REVIEW_MARK}-denied" in r.text for r in rows()):
                return True
            d.find_element(By.ID, "refresh").click()
            time.sleep(0.5)
            return False

        _wait("the second held action", second_held)
        _shot(d, "7-approvals")
        _axe(d, "approvals")

        def decide(marker: str, verb: str, reason: str) -> None:
            def once() -> bool:
                # A reload may replace the row under the pointer: found again each try.
                row = next(r for r in rows() if marker in r.text)
                box = row.find_element(By.CSS_SELECTOR, "input[name=reason]")
                box.clear()
                box.send_keys(reason)
                row.find_element(By.CSS_SELECTOR, f"button[data-verb={verb}]").click()
                return True

            _wait(f"{verb} of {marker}", once)

        decide(f"{REVIEW_MARK}-approved", "approve", "looked at it")
        _wait("the approved action to run", lambda: "approve" in answers, timeout=150)
        status, body = answers["approve"]
        assert status == 200, body
        assert f"{REVIEW_MARK}-approved" in body["stdout"], body
        decide(f"{REVIEW_MARK}-denied", "deny", "not today")
        _wait("the denied action to be refused", lambda: "deny" in answers, timeout=150)
        status, body = answers["deny"]
        assert (status, body["error"]["code"]) == (403, "review_denied"), body
        for t in threads:
            t.join(30)
        _wait("both decided in the queue", lambda: not rows())
        assert _errors(d) == [], _errors(d)

        # The approved cell's file downloads from the sandbox's page.
        d.get(f"{url}/console/sandboxes/{sid}")
        _wait("the sandbox page", lambda: d.find_element(By.ID, "code"))
        d.find_element(By.ID, "refresh").click()
        downloads = Path(tempfile.mkdtemp(prefix="sandlot-console-downloads-"))
        d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})

        def click_download() -> bool:
            # The list is drawn again when it loads: the button is found again each try.
            button = next(b for b in d.find_elements(By.CSS_SELECTOR, "#files tbody button")
                          if b.text == "Download approved.txt")
            button.click()
            return True

        _wait("the file's download button", click_download)
        got = _wait("the downloaded file", lambda: (downloads / "approved.txt").exists() and
                    (downloads / "approved.txt").read_text() == "ran")
        assert got
        shutil.rmtree(downloads, ignore_errors=True)
        _axe(d, "sandbox files")

        # Record: the chain verified, and the approved execution's lineage drawn.
        execution_id = answers["approve"][1]["id"]
        d.get(f"{url}/console/record?execution={execution_id}")
        _wait("the chain's status", lambda: "verified up to record" in d.find_element(By.ID, "chain-verified").text)
        _wait("the lineage graph", lambda: len(d.find_elements(By.CSS_SELECTOR, "#lineage-graph svg g.node")) >= 3)
        assert d.find_elements(By.CSS_SELECTOR, f"#lineage-graph svg a[href='/console/sandboxes/{sid}']")
        _shot(d, "8-record")
        _axe(d, "record")
        assert _errors(d) == [], _errors(d)

        # KPIs, when this build has the page.
        d.get(f"{url}/console/kpis")
        if d.find_elements(By.CSS_SELECTOR, "main h1") and "Not found" not in d.find_element(By.TAG_NAME, "h1").text:
            _shot(d, "9-kpis")
            _axe(d, "kpis")
        d.get_log("browser")
    finally:
        _put_policies(url, original)
        _api(url, "DELETE", f"/v1/keys/{asker['id']}")
        for sid in created:
            try:
                _api(url, "DELETE", f"/v1/sandboxes/{sid}")
            except Exception:  # noqa: BLE001 - cleanup only
                pass
