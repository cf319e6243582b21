"""A real headless Chromium for the tests that check the live map's page (selenium + chromedriver)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def chromium(window: tuple[int, int] = (1600, 1000)) -> Iterator:
    """Yield a headless Chromium driver (quit afterwards) with a `window` (width, height) of that
    size, or skip naming what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e .[test])")
    if not Path(CHROMEDRIVER).exists() or not (shutil.which("chromium") or Path("/usr/bin/chromium").exists()):
        pytest.skip("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={window[0]},{window[1]}", "--force-device-scale-factor=1"):
        options.add_argument(flag)
    if Path("/usr/bin/chromium").exists():
        options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
