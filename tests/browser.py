"""A headless Chromium for tests that look at pages as a person would (Debian's `chromium` and
`chromium-driver`, installed by `make setup`), and helpers to read what it renders."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver


def headless_chromium() -> Iterator[WebDriver]:
    """For a fixture: one browser session, quit afterwards."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.fail("Debian's chromium and chromium-driver are missing: `make setup` installs them")
    options = Options()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1280,1000")
    session = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield session
    finally:
        session.quit()


_ROWS = """
const table = document.getElementById(arguments[0]);
if (!table) return [];
return [...table.querySelectorAll("tr")].slice(1).map(r => [...r.querySelectorAll("td")].map(c => c.innerText.trim()));
"""


def rows(browser: WebDriver, table_id: str) -> list[list[str]]:
    """The table's data rows as the browser renders them (the header row left out), read in one script
    run: the page's own refresh swaps its content between two steps of a WebDriver walk, never within."""
    return list(browser.execute_script(_ROWS, table_id))


def screenshot(browser: WebDriver, path: Path) -> None:
    assert browser.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000


def text(browser: WebDriver, element_id: str) -> str:
    """An element's rendered text, read in one script run (see `rows`)."""
    return str(
        browser.execute_script(
            "const e = document.getElementById(arguments[0]); return e ? e.innerText : ''", element_id
        )
    )


def headers(browser: WebDriver, table_id: str) -> list[str]:
    script = "return [...document.querySelectorAll('#' + arguments[0] + ' th')].map(h => h.innerText.trim())"
    return list(browser.execute_script(script, table_id))


def click_link(browser: WebDriver, link_text: str) -> None:
    """Follow the link with this text; the page's refresh may swap it out between finding and clicking."""
    for _ in range(5):
        try:
            browser.find_element(By.LINK_TEXT, link_text).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"the link {link_text!r} kept being replaced under the click")
