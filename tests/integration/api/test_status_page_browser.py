"""The status page in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium): it loads, shows a table just created, and
logs no console errors."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.api.sets import sets_of_every_kind
from tests.integration.api.support import READER, ApiServer

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# As the machine's notes prescribe: no background traffic (the network is closed), a
# fresh profile per run.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
]


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for program in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(program) is None:
            pytest.fail(
                f"{program} is missing: apt-get install chromium chromium-driver "
                "(deploy/local/test.sh installs them)"
            )
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must not try to download
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=os.devnull)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def test_status_page_shows_a_new_table_without_console_errors(
    browser, api: ApiServer, new_table, api_catalog, tmp_path: Path
):
    from selenium.webdriver.common.by import By

    name = new_table()
    api_catalog.mark_set_done(name, {"datestamp": "20110228"})
    token = base64.b64encode(":".join(READER).encode()).decode()
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd(
        "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}}
    )
    browser.get(f"{api.url}/")
    assert browser.title == "hcat-notify"
    cells = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "td")]
    assert name in cells
    assert "datestamp=20110228" in cells
    assert "not yet published" in browser.find_element(By.ID, "backlog").text
    browser.save_screenshot(str(tmp_path / "status.png"))
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


def test_status_page_shows_a_completeness_grid(
    browser, api: ApiServer, new_table, api_catalog, tmp_path: Path
):
    from selenium.webdriver.common.by import By

    name = new_table()
    sets_of_every_kind(api_catalog, name)
    token = base64.b64encode(":".join(READER).encode()).decode()
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd(
        "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}}
    )
    browser.get(f"{api.url}/")
    grid = browser.find_element(By.CSS_SELECTOR, f'table.grid[data-table="{name}"]')
    parts = [th.text for th in grid.find_elements(By.CSS_SELECTOR, "th.part")]
    assert parts == ["region=us", "region=eu", "region=apac"]
    rows = {}
    for row in grid.find_elements(By.CSS_SELECTOR, "tbody tr"):
        spec = row.find_element(By.CSS_SELECTOR, "th.set").text
        state = row.find_element(By.CSS_SELECTOR, "td.state").text
        cells = [
            cell.get_attribute("class").split()[-1]
            for cell in row.find_elements(By.CSS_SELECTOR, "td.cell")
        ]
        rows[spec] = (state, cells)
    assert rows == {  # newest first
        "datestamp=20260104": ("open", ["present", "present", "missing"]),
        "datestamp=20260103": ("late", ["present", "late", "late"]),
        "datestamp=20260102": ("done g2", ["done", "done", "done"]),
        "datestamp=20260101": ("done", ["done", "done", "done"]),
    }
    specs = [th.text for th in grid.find_elements(By.CSS_SELECTOR, "th.set")]
    assert specs == sorted(specs, reverse=True)
    browser.save_screenshot(str(tmp_path / "grid.png"))
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


def test_status_page_without_credentials_is_refused(browser, api: ApiServer):
    browser.get(f"{api.url}/")
    errors = [entry["message"] for entry in browser.get_log("browser")]
    assert any("401" in message for message in errors), errors
