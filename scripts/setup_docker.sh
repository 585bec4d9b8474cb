#!/usr/bin/env bash
# Make the sandbox's real components available: bubblewrap (process backend), debootstrap and a
# running Docker engine (docker backend). Idempotent and non-interactive: installs only what is
# missing, starts dockerd in the background only if no engine answers, and always exits 0 (the
# Docker tests then skip, giving the reason this script printed and wrote to $STATUS_FILE).
set -u
export DEBIAN_FRONTEND=noninteractive
LOG_DIR="${ROLLFORGE_DOCKER_LOG_DIR:-/tmp/rollforge-docker}"
STATUS_FILE="$LOG_DIR/status"
WAIT_S="${ROLLFORGE_DOCKERD_WAIT_S:-60}"
mkdir -p "$LOG_DIR"

say() { echo "setup_docker: $*"; }
give_up() { say "docker unavailable: $*"; echo "unavailable: $*" > "$STATUS_FILE"; exit 0; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v dockerd >/dev/null || missing+=(docker.io)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
    say "installing ${missing[*]}"
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >"$LOG_DIR/apt.log" 2>&1 \
      || { $SUDO apt-get update -q >>"$LOG_DIR/apt.log" 2>&1 \
           && $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$LOG_DIR/apt.log" 2>&1; } \
      || say "apt-get install ${missing[*]} failed (see $LOG_DIR/apt.log)"
  else
    say "not root and no sudo: cannot install ${missing[*]}"
  fi
fi

PYTHON="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
build_image() {  # the sandbox image (cached rootfs: seconds; first debootstrap: ~1-2 minutes)
  if [ -x "$PYTHON" ]; then
    (cd "$(dirname "$0")/.." && "$PYTHON" -m sandbox.docker_image) \
      || say "image build failed (the docker tests will report it)"
  fi
  exit 0
}

if docker info >/dev/null 2>&1; then
  say "engine answers"; echo ok > "$STATUS_FILE"; build_image
fi
command -v dockerd >/dev/null || give_up "dockerd is not installed and could not be installed"
[ "$(id -u)" = 0 ] || [ -n "$SUDO" ] || give_up "no engine answers and starting dockerd needs root"

# runc, not crun (crun fails on this kernel/cgroup setup); cgroupfs driver (no systemd here).
say "starting dockerd (log: $LOG_DIR/dockerd.log)"
$SUDO nohup dockerd --storage-driver=overlay2 --default-runtime=runc \
  --exec-opt native.cgroupdriver=cgroupfs >"$LOG_DIR/dockerd.log" 2>&1 &
for _ in $(seq 1 "$WAIT_S"); do
  if docker info >/dev/null 2>&1; then say "engine answers"; echo ok > "$STATUS_FILE"; build_image; fi
  sleep 1
done
give_up "dockerd did not answer within ${WAIT_S}s; last log lines: $(tail -3 "$LOG_DIR/dockerd.log" | tr '\n' ' ')"
