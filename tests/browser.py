"""A headless Chromium for tests that look at pages as a person would (Debian's `chromium` and
`chromium-driver`, installed by `make setup`), and helpers to read what it renders."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
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


def rows(browser: WebDriver, table_id: str) -> list[list[str]]:
    """The table's data rows as the browser renders them (the header row left out)."""
    found = browser.find_elements(By.CSS_SELECTOR, f"#{table_id} tr")[1:]
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in found]


def screenshot(browser: WebDriver, path: Path) -> None:
    assert browser.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000
