#!/usr/bin/env bash
# Make the browser test's components available: Debian's chromium (driven headless by
# Playwright; `playwright install`, which downloads browser builds, is never used) and the
# pinned playwright package in .venv. Idempotent and non-interactive: installs only what is
# missing and always exits 0; when something cannot be had, the browser test skips with the
# reason this script printed and wrote to $STATUS_FILE.
set -u
export DEBIAN_FRONTEND=noninteractive
LOG_DIR="${ROLLFORGE_BROWSER_LOG_DIR:-/tmp/rollforge-browser}"
STATUS_FILE="$LOG_DIR/status"
CHROMIUM="${ROLLFORGE_CHROMIUM:-/usr/bin/chromium}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
mkdir -p "$LOG_DIR"
# shellcheck source=apt_install.sh
. "$(dirname "$0")/apt_install.sh"

say() { echo "setup_browser: $*"; }
give_up() { say "browser unavailable: $*"; echo "unavailable: $*" > "$STATUS_FILE"; exit 0; }

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi

if [ -x "$CHROMIUM" ]; then
  say "chromium present ($CHROMIUM)"
elif [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
  say "installing chromium (log: $LOG_DIR/apt.log)"
  apt_install "$LOG_DIR/apt.log" chromium || give_up "apt-get install chromium failed (see $LOG_DIR/apt.log)"
  [ -x "$CHROMIUM" ] || give_up "chromium installed but $CHROMIUM is missing"
  say "installed chromium"
else
  give_up "$CHROMIUM is missing, and installing it needs root"
fi

[ -x "$PYTHON" ] || give_up "no virtual environment at $PYTHON (run make setup)"
if "$PYTHON" -c "import playwright" 2>/dev/null; then
  say "playwright present"
else
  pin="$(grep -i '^playwright==' "$ROOT/requirements.lock" || echo playwright)"
  say "installing $pin"
  "$PYTHON" -m pip install -q "$pin" >"$LOG_DIR/pip.log" 2>&1 \
    || give_up "pip install $pin failed (see $LOG_DIR/pip.log)"
fi
say "ready: $("$CHROMIUM" --version 2>/dev/null | head -1), playwright $("$PYTHON" -c \
  'import importlib.metadata as m; print(m.version("playwright"))')"
echo ok > "$STATUS_FILE"
exit 0
