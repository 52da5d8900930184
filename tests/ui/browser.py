"""Headless Chromium for UI tests and screenshots, driven by Selenium (Debian `chromium` +
`chromium-driver`; `scripts/install_browser.sh` installs them). Nothing here reaches the network."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
BINARIES = ("chromium", "chromium-browser")
DRIVERS = ("chromedriver", "chromium-driver")


def missing() -> str | None:
    """Why the browser cannot run here, or None when it can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    if not any(shutil.which(b) for b in BINARIES):
        return "chromium is not installed (scripts/install_browser.sh)"
    if not any(shutil.which(d) for d in DRIVERS):
        return "chromedriver is not installed (scripts/install_browser.sh)"
    return None


@contextmanager
def chromium(width: int = 1500, height: int = 1000) -> Iterator[Any]:
    """A Selenium driver for a fresh headless Chromium (own profile dir), closed on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = next(p for b in BINARIES if (p := shutil.which(b)))
    driver_path = next(p for d in DRIVERS if (p := shutil.which(d)))
    with tempfile.TemporaryDirectory(prefix="tessera-chromium-") as profile:
        opts = webdriver.ChromeOptions()
        opts.binary_location = binary
        for flag in CHROMIUM_FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={profile}")
        opts.add_argument(f"--window-size={width},{height}")
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(options=opts, service=Service(executable_path=driver_path))
        try:
            driver.set_page_load_timeout(30)
            yield driver
        finally:
            driver.quit()


def console_errors(driver: Any) -> list[str]:
    """Console messages at SEVERE level since the last call (script errors, CSP violations, 404s)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def full_page_screenshot(driver: Any, path: str, width: int = 1500, max_height: int = 4000) -> None:
    height, chrome = driver.execute_script(
        "return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]"
    )
    driver.set_window_size(width, min(max(int(height), 600), max_height) + int(chrome))
    driver.save_screenshot(path)
