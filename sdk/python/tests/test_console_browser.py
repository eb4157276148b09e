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
import threading
import time
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
