#!/usr/bin/env bash
# Make PostgreSQL's server programs available for the test of `rollforge server --database`:
# Debian's `postgresql` package (initdb, pg_ctl, postgres, psql under /usr/lib/postgresql/<ver>).
# The test starts its own throw-away cluster on a loopback port; this script never starts or
# configures one, and stops the package's default cluster if installing it started one.
# Idempotent and non-interactive: installs only what is missing and always exits 0; when it
# cannot be had, the test skips with the reason this script printed and wrote to $STATUS_FILE.
set -u
export DEBIAN_FRONTEND=noninteractive
LOG_DIR="${ROLLFORGE_POSTGRES_LOG_DIR:-/tmp/rollforge-postgres}"
STATUS_FILE="$LOG_DIR/status"
mkdir -p "$LOG_DIR"
# shellcheck source=apt_install.sh
. "$(dirname "$0")/apt_install.sh"

say() { echo "setup_postgres: $*"; }
give_up() { say "postgresql unavailable: $*"; echo "unavailable: $*" > "$STATUS_FILE"; exit 0; }
bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi

BIN="$(bindir)"
if [ -n "$BIN" ] && [ -x "$BIN/initdb" ] && [ -x "$BIN/pg_ctl" ]; then
  say "postgresql present ($BIN)"
elif [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
  say "installing postgresql (log: $LOG_DIR/apt.log)"
  apt_install "$LOG_DIR/apt.log" postgresql || give_up "apt-get install postgresql failed (see $LOG_DIR/apt.log)"
  BIN="$(bindir)"
  [ -n "$BIN" ] && [ -x "$BIN/initdb" ] || give_up "postgresql installed but no /usr/lib/postgresql/*/bin/initdb"
  # The package may have started its default cluster (on port 5432): the tests do not use it,
  # so it is stopped rather than left running.
  if command -v pg_lsclusters >/dev/null; then
    pg_lsclusters -h 2>/dev/null | while read -r ver name _port status _rest; do
      [ "$status" = online ] && $SUDO pg_ctlcluster "$ver" "$name" stop >>"$LOG_DIR/apt.log" 2>&1 \
        && say "stopped the package's default cluster $ver/$name"
    done
  fi
  say "installed postgresql ($BIN)"
else
  give_up "no PostgreSQL server programs under /usr/lib/postgresql, and installing them needs root"
fi

if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  give_up "running as root but there is no postgres user to run initdb as (initdb refuses root)"
fi
say "ready: $("$BIN/postgres" --version 2>/dev/null)"
echo "ok $BIN" > "$STATUS_FILE"
exit 0
