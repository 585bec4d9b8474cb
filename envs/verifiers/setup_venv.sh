#!/usr/bin/env bash
# The verifiers kind's own venv (envs/verifiers/): the `verifiers` package, the environments the
# user names, and the example environment. It lives apart from .venv because verifiers pins
# openai<3 (.venv pins openai==3.60.0 for the gateway's tests), and the kind only ever runs it as
# a subprocess inside the sandbox, where the environments' code (nobody here wrote it) is loaded.
#
#   bash envs/verifiers/setup_venv.sh [VENV] [EXTRA_PIP_ARGS...]
#       VENV: default .verifiers-venv; EXTRA_PIP_ARGS: your environments' packages, e.g.
#       `-e path/to/my_env` or `vf-my-env==1.2` (installed into the same venv)
#
# Why verifiers 0.3.1: it is the newest release whose `import verifiers as vf` still gives the
# classic API (`load_environment`, `SingleTurnEnv`, `Rubric`) that environments on the hub are
# written against; 0.4.0 keeps only the new `verifiers.v1` stack. datasets is its dependency;
# reasoning-gym lets verifiers' own ReasoningGymEnv build offline.
#
# Idempotent: a venv whose stamp names these pins is left as it is (EXTRA_PIP_ARGS still go in).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-.verifiers-venv}
shift || true
PYTHON=${PYTHON:-python3}
PINS=("verifiers==0.3.1" "datasets==5.2.0" "reasoning-gym==0.1.25")
STAMP="$VENV/.rollforge-verifiers"
WANT="${PINS[*]}"

if [[ -f "$STAMP" ]] && [[ "$(head -n1 "$STAMP")" == "$WANT" ]] \
        && "$VENV/bin/python" -c "import verifiers as vf; vf.SingleTurnEnv" 2>/dev/null; then
    echo "verifiers venv $VENV is up to date ($WANT)"
else
    t0=$(date +%s)
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q "${PINS[@]}"
    # What the sandbox's harness imports: a broken venv fails here, not at the first grade.
    "$VENV/bin/python" -c "import verifiers as vf, datasets; vf.SingleTurnEnv" >/dev/null
    t1=$(date +%s)
    {
        echo "$WANT"
        echo "installed_s=$((t1 - t0))"
        echo "size=$(du -sh "$VENV" | cut -f1)"
        "$VENV/bin/python" -m pip freeze | grep -iE '^(verifiers|datasets|openai|reasoning.gym)=='
    } > "$STAMP"
    cat "$STAMP"
fi
# The example environment (the kind's default, its tests and docs), as a user installs one: into
# the venv's site-packages, which is what the sandbox shows (an editable install's source folder
# is not there). Always: it is small, and it follows the checkout.
"$VENV/bin/python" -m pip install -q --no-deps --force-reinstall "$HERE/example_env"
if [[ $# -gt 0 ]]; then
    "$VENV/bin/python" -m pip install -q "$@"
fi
