"""The ops kind through the real system sandbox and checker: references pass every probe, the
empty script earns nothing, each cheat scores no credit with its flag, idempotence is a probe."""
from __future__ import annotations

import pickle
import re
import subprocess
import sys
import time

import pytest

from envs.base import StepContext
from envs.ops.env import OpsEnv
from envs.ops.families import FAMILIES
from envs.registry import make_env
from rewards.aggregate import RewardConfig
from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox.probe import probe
from sandbox.registry import make_sandbox
from sandbox.rootfs import System, node_of, unavailable

WHY = unavailable(probe())
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")


@pytest.fixture(scope="module")
def ctx():
    cfg = SandboxConfig(timeout_s=5)
    sandbox = make_sandbox(cfg)
    yield StepContext(sandbox, cfg.limits(), RewardConfig())
    sandbox.close()


def _task(family: str):
    return make_env("ops", {"families": [family], "tasks_per_family": 1}).generate()[0]


def _not_passed(report) -> list[str]:
    return [n for n, o in zip(report.test_names, report.outcomes) if o != "passed"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reference_passes_every_probe_and_the_empty_script_earns_nothing(ctx, family):
    env, task = make_env("ops"), _task(family)
    b, report = env.grade(task, task.reference, ctx)
    assert b.solved and b.reward == 1.0, (_not_passed(report), report.exec_result.stdout[-400:])
    assert report.test_names[-1] == "idempotent"
    b, report = env.grade(task, "", ctx)
    assert b.reward == 0.0 and not b.hack_flags and report.passed == 0


@pytest.mark.parametrize("cheat,flag", [
    ("forged_end_line", "forged_end_line"),    # prints the supervisor's verdict itself
    ("kill_checker", "checker_killed"),        # right state, then kill -9 -1
    ("late_change", "background_process"),     # right state, then a setsid'd late change
    ("symlink_probe", "symlink_probe"),        # the probed file moved, a link in its place
    ("symlink_escape", "symlink_escape"),      # the probed file a link to a host file
])
@pytest.mark.parametrize("family", ["ini_set", "deploy_release"])
def test_each_cheat_gets_no_credit_and_its_flag(ctx, family, cheat, flag):
    env, task = make_env("ops"), _task(family)
    b, report = env.grade(task, env.trivial_answers(task)[cheat], ctx)
    assert flag in b.hack_flags
    assert b.pass_fraction == 0.0 and b.reward == -RewardConfig().hack_penalty
    assert not b.solved


def test_a_late_change_from_a_background_process_never_lands_in_the_state():
    tree = {"etc/app.conf": node_of({"content": "ok\n"})}
    system = System.make(probe(), tree)
    try:
        run = system.run("setsid nohup sh -c 'sleep 0.3; echo late >> /etc/app.conf' "
                         ">/dev/null 2>&1 &\necho started\n", Limits(timeout_s=5))
        time.sleep(0.8)  # past the moment it would have written
        state = system.snapshot()
    finally:
        system.close()
    # the sh, and its sleep once sh has forked it: how many the count catches depends on timing
    assert run.survivors >= 1 and run.script_rc == 0 and "started" in run.exec.stdout
    assert state["etc/app.conf"].data == b"ok\n"


def test_a_script_that_appends_twice_fails_only_idempotence(ctx):
    env, task = make_env("ops"), _task("cron_add")
    line = next(p["lines"][0] for p in task.payload["probes"] if p["name"] == "job line once")
    path = task.payload["probes"][0]["path"]
    b, report = env.grade(task, f"echo '{line}' >> /{path}\n", ctx)
    assert _not_passed(report) == ["idempotent"] and not b.hack_flags
    assert b.reward == pytest.approx((len(report.outcomes) - 1) / len(report.outcomes))


def test_a_backup_overwritten_by_the_second_run_fails_idempotence(ctx):
    env, task = make_env("ops"), _task("change_with_rollback")
    naive = re.sub(r"\[ -e (\S+) \] \|\| cp -p", "cp -p", task.reference)  # no guard
    assert naive != task.reference
    b, report = env.grade(task, naive, ctx)
    assert "idempotent" in _not_passed(report), naive


def test_a_runaway_script_times_out_and_is_not_an_infra_error():
    cfg = SandboxConfig(timeout_s=1)
    sandbox = make_sandbox(cfg)
    try:
        env, task = make_env("ops"), _task("ini_set")
        b, report = env.grade(task, "sleep 30\n", StepContext(sandbox, cfg.limits(),
                                                               RewardConfig()))
    finally:
        sandbox.close()
    assert report.status == "timeout" and set(report.outcomes) == {"timeout"}
    assert b.reward == 0.0 and not b.infra_error


def test_the_script_is_taken_from_a_fenced_block(ctx):
    env, task = make_env("ops"), _task("fix_modes")
    b, _ = env.grade(task, f"Here it is:\n```bash\n{task.reference}```\nDone.", ctx)
    assert b.solved


def test_a_bad_probe_in_a_task_record_is_refused_naming_the_field():
    env, task = make_env("ops"), _task("ini_set")
    bad = task.model_copy(update={"payload": dict(task.payload, probes=[
        {"name": "x", "type": "telepathy", "path": "etc/x"}])})
    with pytest.raises(ValueError, match=r"field 'payload.probes.0.type': 'telepathy'"):
        env.validate(bad)
    bad = task.model_copy(update={"payload": dict(task.payload, files={"../../etc/shadow": {}})})
    with pytest.raises(ValueError, match=r"payload.files"):
        env.validate(bad)


def test_the_env_pickles_as_its_options_and_generates_the_same_tasks():
    env = OpsEnv({"families": ["json_set"], "tasks_per_family": 3, "seed": 4})
    again = pickle.loads(pickle.dumps(env))
    assert [t.task_id for t in again.generate()] == [t.task_id for t in env.generate()]


def test_tasks_check_on_the_ops_kind_exits_0():
    out = subprocess.run([sys.executable, "-m", "flows.cli", "tasks", "check", "--kind", "ops",
                          "--options", '{"families": ["ini_set", "rotate_logs"], '
                          '"tasks_per_family": 1}'], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 tasks: 2 ok, 0 with problems" in out.stdout
