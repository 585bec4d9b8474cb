#!/usr/bin/env bash
# The openenv kind's own venv (envs/openenv/): `openenv-core` and the packages of the environment
# servers the user names. The kind runs this venv's interpreter only to start a server (a
# subprocess on loopback: envs/openenv/server.py); the flow and the workers talk to it over its
# WebSocket protocol with .venv's own `websockets`, and never import openenv.
#
#   bash envs/openenv/setup_venv.sh [VENV] [EXTRA_PIP_ARGS...]
#       VENV: default .openenv-venv; EXTRA_PIP_ARGS: your environments' packages, e.g.
#       `-e path/to/my_env` (installed into the same venv)
#
# Why apart from .venv: openenv-core 0.3.0 depends on gradio, whose pin pillow<13 would take
# .venv's pillow==13.0.0 down to 12.3.0 (`pip install --dry-run` against requirements.lock), and
# an environment server's own dependencies must not be resolved against the trainer's pins.
# About 45 s and 470 MB the first time; a pin already satisfied is not fetched again.
set -euo pipefail

VENV=${1:-.openenv-venv}
shift || true
PYTHON=${PYTHON:-python3}

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "openenv-core==0.3.0" "$@"
# What a server started by the kind imports: a broken venv fails here, not at the first run.
"$VENV/bin/python" -c "import uvicorn, openenv.core.env_server"
echo "openenv venv $VENV: $("$VENV/bin/python" -m pip freeze | grep -i '^openenv-core==')"
