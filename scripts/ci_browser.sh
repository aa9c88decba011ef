#!/usr/bin/env bash
# Install what the browser tests need (tests/web/test_browser.py, markers `browser` and `slow`):
# Debian's chromium and the playwright Python package. Idempotent: skips what is already there.
# Playwright drives the system chromium through `executable_path`; `playwright install` (which
# downloads its own browsers) is never needed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null; }
fi

PY=python3
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
if ! "$PY" -c "import playwright.sync_api" >/dev/null 2>&1; then
  "$PY" -m pip install -q playwright
fi
echo "browser tests: $(command -v chromium || command -v chromium-browser), playwright $("$PY" -c 'import importlib.metadata as m; print(m.version("playwright"))')"
