"""The console's KPI page in a real browser (Debian's headless Chromium through Selenium,
the fixtures of ``test_console_browser.py``), against the session's real ``sandlot serve``.

Signs in as the operator, opens KPIs, runs a burst of creations and cells (and a denied
request) from another client, and sees the numbers move without a reload — the page is live
from ``/v1/events``, with no timer polling. Switches to the day's window. A key of another
tenant is told the KPIs are the operator's. A screenshot goes to
``target/console-screenshots/kpis.png``; the browser console shows no error.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pytest

from .test_console_browser import _api, _errors, _shot, _wait, browser  # noqa: F401 - fixture

pytestmark = pytest.mark.live


def _text(d, id: str) -> str:
    from selenium.webdriver.common.by import By

    return d.find_element(By.ID, id).text


def _count(d) -> int:
    return int(_text(d, "kpi-executions"))


def _sign_in(d, url: str, key: str) -> None:
    from selenium.webdriver.common.by import By

    d.get(f"{url}/console")
    out = [b for b in d.find_elements(By.ID, "sign-out") if b.is_displayed()]
    if out:
        out[0].click()
    _wait("the sign-in page", lambda: d.find_element(By.ID, "key"))
    d.find_element(By.ID, "key").send_keys(key)
    d.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]").click()
    _wait("signed in", lambda: d.find_element(By.ID, "sign-out").is_displayed())


def test_the_kpi_page_moves_live(sandlot_url: str, browser) -> None:  # noqa: F811 - fixture
    from selenium.webdriver.common.by import By

    d = browser
    created = []
    try:
        _sign_in(d, sandlot_url, os.environ["SANDLOT_API_KEY"])
        d.find_element(By.LINK_TEXT, "KPIs").click()
        _wait("the KPI page", lambda: d.find_element(By.ID, "kpi-executions"))
        _wait("the live stream", lambda: _text(d, "live-state") == "live")
        assert d.find_elements(By.CSS_SELECTOR, "#kpis svg.spark"), "no sparklines"
        before = _count(d)
        loads = int(d.find_element(By.ID, "kpis").get_attribute("data-loads"))
        marker = d.execute_script("window.__same_page = 1; return window.__same_page")

        # A burst from another client: creations, cells, one that fails.
        for _ in range(3):
            created.append(_api(sandlot_url, "POST", "/v1/sandboxes", {})["id"])
        for i in range(6):
            _api(sandlot_url, "POST", f"/v1/sandboxes/{created[i % 3]}/execute", {"code": f"{i} + 1"})
        _api(sandlot_url, "POST", f"/v1/sandboxes/{created[0]}/execute", {"code": "1 / 0"})

        _wait("the executions to move", lambda: _count(d) >= before + 7)
        assert d.execute_script("return window.__same_page") == marker, "the page reloaded"
        assert int(d.find_element(By.ID, "kpis").get_attribute("data-loads")) > loads
        assert "p99" in _text(d, "kpi-execute") and "—" not in _text(d, "kpi-execute")
        assert "%" in _text(d, "kpi-error-rate"), _text(d, "kpi-error-rate")
        assert "failed" in _text(d, "kpi-create-detail")
        # Sparklines drew something for the burst.
        assert d.find_elements(By.CSS_SELECTOR, "#kpis polyline.spark-line")
        errors = _errors(d)
        assert errors == [], errors
        _shot(d, "kpis")

        # The day's window, the same counts at least.
        d.find_element(By.ID, "window-1d").click()
        _wait("the day's window", lambda: d.find_element(By.ID, "window-1d").get_attribute("aria-pressed") == "true")
        _wait("the day's numbers", lambda: _count(d) >= before + 7)

        # No timer polls the API: the page's scripts set no interval.
        src = urllib.request.urlopen(f"{sandlot_url}/console/assets/kpis.js", timeout=30).read().decode()
        assert "setInterval" not in src

        # Another tenant's admin is told the KPIs are the operator's.
        tenant = f"kpi{os.getpid()}"
        _api(sandlot_url, "POST", "/v1/tenants", {"name": tenant})
        key = _api(sandlot_url, "POST", "/v1/keys", {"tenant": tenant, "role": "admin"})["key"]
        _sign_in(d, sandlot_url, key)
        d.get(f"{sandlot_url}/console/kpis")
        note = _wait("the operator-only note", lambda: d.find_element(By.ID, "kpi-note").is_displayed()
                     and d.find_element(By.ID, "kpi-note"))
        assert "operator" in note.text
        _shot(d, "kpis-tenant")
        # The refused /v1/kpis is the one failed load the browser logs.
        unexpected = [e for e in _errors(d) if "/v1/kpis" not in e.get("message", "")]
        assert unexpected == [], unexpected
        d.find_element(By.ID, "sign-out").click()
        _wait("the sign-in page", lambda: d.find_element(By.ID, "key"))
    finally:
        for sid in created:
            try:
                _api(sandlot_url, "DELETE", f"/v1/sandboxes/{sid}")
            except (urllib.error.URLError, json.JSONDecodeError):
                pass
