# Sourced by the set-up scripts: `apt_install LOG PACKAGE...` installs the packages without
# recommends, running `apt-get update` once first only if the plain install fails (a stale or
# empty package list); output goes to LOG. Returns apt-get's status. Needs $SUDO set ("" as root).
apt_install() {
  local log="$1"; shift
  $SUDO apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1 \
    || { $SUDO apt-get update -q >>"$log" 2>&1 \
         && $SUDO apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1; }
}
