#!/usr/bin/env bash
# Install headless Chromium and its WebDriver (Debian packages `chromium`, `chromium-driver`) for the
# UI's end-to-end test (tests/ui/test_ui_browser.py, driven by Selenium from the [dev] extras).
# Never fails the build: without a browser that test is skipped and says why.
set -u

have() { command -v "$1" >/dev/null 2>&1; }

if have chromium && have chromedriver; then
  echo "install_browser: chromium and chromedriver already installed"
  exit 0
fi
if ! have apt-get; then
  echo "install_browser: no apt-get here; the browser test will be skipped" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if have sudo && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "install_browser: not root and no passwordless sudo; the browser test will be skipped" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium chromium-driver; then
  echo "install_browser: installed $(chromium --version 2>/dev/null | head -n1)"
else
  echo "install_browser: apt-get could not install chromium; the browser test will be skipped" >&2
fi
exit 0
