"""Where the verifiers kind's outside code runs: the kind's own venv (`verifiers` pins openai<3,
which .venv's gateway pin excludes; envs/verifiers/setup_venv.sh builds it), its interpreter
started inside a process sandbox that shows that venv's site-packages read-only (the
environments' packages are installed there), and the listing of an environment's rows.

Every run of the environment's code, loading included, is a sandbox run of
envs/verifiers/harness.py: the worker and the flow never import verifiers or the environment.
"""
from __future__ import annotations

import functools
import json
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from envs.base import EnvError
from envs.verifiers.harness import HARNESS_SOURCE
from sandbox.base import ExecResult, Limits

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = ROOT / ".verifiers-venv"
VENV_ENV = "ROLLFORGE_VERIFIERS_VENV"  # another venv built by setup_venv.sh
SETUP = "bash envs/verifiers/setup_venv.sh"
# Loading verifiers, datasets and an environment: about 4 s of CPU and 300 MB here; the run's
# limits are raised to these floors for the kind's runs (an answer's own time is per_answer_s).
LOAD_BUDGET_S = 90.0
MEMORY_FLOOR_MB = 2048
PIDS_FLOOR = 256
LIST_OUTPUT_BYTES = 64 << 20


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)


def python() -> str:
    """The venv's interpreter; EnvError with the command that builds it when it is missing."""
    exe = venv_dir() / "bin" / "python"
    if not exe.is_file():
        raise EnvError(f"the verifiers kind needs its own venv at {venv_dir()} (verifiers pins "
                       f"openai<3, which .venv's pins exclude): build it with `{SETUP}` (set "
                       f"{VENV_ENV} to use another)")
    return str(exe)


_lock = threading.Lock()


@functools.lru_cache(maxsize=4)
def _sandbox_for(exe: str):
    from sandbox.process import ProcessSandbox  # noqa: PLC0415

    # a fresh interpreter per run: each run loads its environment (seconds), which a fork
    # server of this interpreter was measured not to save (docs/environments.md)
    return ProcessSandbox(python=exe, site_packages=True, fork_server=False)


def sandbox():
    """The process sandbox whose `python` is the venv's interpreter (one per process)."""
    exe = python()
    with _lock:
        return _sandbox_for(exe)


def limits_for(limits: Limits, seconds: float, output_bytes: int | None = None) -> Limits:
    return replace(limits, timeout_s=seconds, memory_mb=max(limits.memory_mb, MEMORY_FLOOR_MB),
                   pids=max(limits.pids, PIDS_FLOOR),
                   output_bytes=max(limits.output_bytes, output_bytes or 0))


def run_harness(mode: str, job: dict, limits: Limits, per_answer_s: float) -> ExecResult:
    return sandbox().run({"harness.py": HARNESS_SOURCE, "job.json": json.dumps(job)},
                         ["python", "harness.py", mode, str(per_answer_s)], limits)


def load_error(res: ExecResult) -> str | None:
    """The environment's own load error, from the harness's first line, if it said one."""
    for line in res.stdout.splitlines()[:1]:
        try:
            rec = json.loads(line)
        except ValueError:
            return None
        if isinstance(rec, dict) and isinstance(rec.get("load_error"), str):
            return rec["load_error"]
    return None


@functools.lru_cache(maxsize=16)
def _listing(env_id: str, args_json: str) -> tuple[dict[str, Any], tuple[dict[str, Any], ...]]:
    job = {"env_id": env_id, "env_args": json.loads(args_json)}
    res = run_harness("list", job, limits_for(Limits(), LOAD_BUDGET_S, LIST_OUTPUT_BYTES), 1.0)
    what = f"verifiers environment {env_id!r} with env_args {json.loads(args_json)}"
    err = load_error(res)
    if err is not None:
        raise EnvError(f"{what} did not load: {err}")
    rows, done, info = [], False, {}
    for line in res.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("env"), dict) and not info:
            info = rec["env"]
        elif isinstance(rec, dict) and rec.get("rows_done") is True:
            done = True
        elif isinstance(rec, dict) and rec.get("split") in ("train", "eval") \
                and type(rec.get("index")) is int:
            rows.append(rec)
    if not done:
        raise EnvError(f"{what}: listing its dataset failed ({res.status}, exit "
                       f"{res.exit_code}{', ' + res.error if res.error else ''}): "
                       f"{res.stderr.strip()[-600:]}")
    if not rows:
        raise EnvError(f"{what}: its dataset is empty")
    return info, tuple(rows)


def rows(env_id: str, env_args: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """Every row of the environment's datasets ({split: train|eval, index, prompt, answer,
    info}), listed in the sandbox; EnvError naming the environment when it does not load."""
    return _listing(env_id, json.dumps(env_args, sort_keys=True))[1]


def env_info(env_id: str, env_args: dict[str, Any]) -> dict[str, Any]:
    """What the listing said of the environment itself: {"class", "multi_turn", "max_turns"
    (-1: no limit of its own)}."""
    return _listing(env_id, json.dumps(env_args, sort_keys=True))[0]
