"""The ops kind through the real system sandbox and checker: references pass every probe, the
empty script earns nothing, each cheat scores no credit with its flag, idempotence is a probe."""
from __future__ import annotations

import base64
import bz2
import gzip
import io
import lzma
import os
import pickle
import re
import subprocess
import sys
import tarfile
import time
import zlib

import pytest

from envs.base import StepContext
from envs.ops.env import OpsEnv
from envs.ops.families import FAMILIES
from envs.ops.integrity import expands_past, state_flags
from envs.ops.probes import CHECKS, Parsed, verdicts
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


# -- issue 34: outcomes a script earns without the change, and grader-side tampering --------

def _node(content: str, mode: int = 0o644):
    return node_of({"content": content, "mode": mode})


def test_probes_that_hold_untouched_or_wiped_pay_only_alongside_the_change():
    """`absent` holds on a wiped system and `unchanged` on the untouched one: neither says the
    task was done, so each pays only when the probes that do say it (here `made`) passed."""
    tree0 = {"etc/b": _node("b\n"), "etc/c": _node("c\n")}
    probes = [{"name": "made", "type": "file", "path": "etc/a", "content": "a\n"},
              {"name": "gone", "type": "absent", "path": "etc/b"},
              {"name": "kept", "type": "unchanged", "paths": ["etc/c"]}]
    wiped_but_c = {"etc/c": _node("c\n")}
    done = {"etc/a": _node("a\n"), "etc/c": _node("c\n")}
    assert verdicts(probes, wiped_but_c, tree0, Parsed({})) == {
        "made": False, "gone": False, "kept": False}
    assert verdicts(probes, done, tree0, Parsed({})) == {"made": True, "gone": True, "kept": True}
    # no probe tells the change apart on its own: only all of them together pay
    assert verdicts(probes[1:], wiped_but_c, tree0, Parsed({})) == {"gone": True, "kept": True}
    assert verdicts(probes[1:], {}, tree0, Parsed({})) == {"gone": False, "kept": False}
    assert verdicts(probes[1:], tree0, tree0, Parsed({})) == {"gone": False, "kept": False}


def test_a_line_hidden_behind_a_vertical_tab_is_no_line_and_is_flagged():
    """cron and the passwd readers split lines at newlines only; str.splitlines also splits at
    \\v, \\f, \\x1c-\\x1e, \\x85, \\u2028: a job behind one in a comment never runs."""
    job = "*/5 * * * * app /opt/app/bin/sync.sh"
    probes = [{"name": "job", "type": "file", "path": "etc/cron.d/app", "lines": [job]}]
    tree0 = {"etc/cron.d/app": _node("# app jobs\n")}
    hidden = {"etc/cron.d/app": _node(f"# app jobs\v{job}\n")}
    plain = {"etc/cron.d/app": _node(f"# app jobs\n{job}\n")}
    assert not CHECKS["file"](probes[0], hidden, tree0, Parsed({}))
    assert state_flags(probes, hidden, tree0) == ["disguised_line"]
    assert CHECKS["file"](probes[0], plain, tree0, Parsed({})) and not state_flags(
        probes, plain, tree0)


def test_a_planted_ld_so_preload_is_flagged():
    tree0 = {"etc/app.ini": _node("[a]\n")}
    final = dict(tree0, **{"etc/ld.so.preload": _node("/root/hook.so\n")})
    assert state_flags([], final, tree0) == ["loader_preload"]


def _gzip_of_zeros(mib: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(z.compress(bytes(1 << 20)) for _ in range(mib)) + z.flush()


def test_a_decompression_bomb_is_seen_without_being_expanded(tmp_path):
    """rootfs.canonical gunzips whole and tarfile reads a sparse member's full size: 250 KiB of
    gzip is 256 MiB in the grader, a 10 KiB sparse tar as many as it claims."""
    assert expands_past(_gzip_of_zeros(80)) and not expands_past(_gzip_of_zeros(1))
    (tmp_path / "hole").write_bytes(b"")
    os.truncate(tmp_path / "hole", 200 << 20)
    subprocess.run(["tar", "-C", str(tmp_path), "-cSf", str(tmp_path / "s.tar"), "hole"],
                   check=True)
    sparse = (tmp_path / "s.tar").read_bytes()
    assert len(sparse) < 64 << 10
    for data in (sparse, gzip.compress(sparse), lzma.compress(sparse), bz2.compress(sparse)):
        assert expands_past(data)
    tree = {"var/x.tar": node_of({"content_b64": base64.b64encode(sparse).decode()})}
    assert state_flags([], tree, {}) == ["decompression_bomb"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("site/index.html")
        info.size = 5
        tf.addfile(info, io.BytesIO(b"<h1>\n"))
    assert not expands_past(buf.getvalue())
