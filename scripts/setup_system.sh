#!/usr/bin/env bash
# System packages the embedded default uses when it can: bubblewrap for the process sandbox's
# namespaces. Installed with apt only if missing and only where we are root; otherwise the sandbox
# says which protections it could not apply and uses what remains.
set -u
command -v bwrap >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing bubblewrap (process sandbox namespaces)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends bubblewrap >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends bubblewrap >/dev/null 2>&1; } \
    || echo "setup: could not install bubblewrap; the process sandbox falls back to unshare"
else
  echo "setup: bubblewrap is missing and cannot be installed here (not root);" \
       "the process sandbox falls back to what it can apply"
fi
exit 0
