"""The logic kind's hack suite (envs/logic/hacks.py) through the real grader: every attack on a
few tasks of every family earns nothing and raises a flag it names, and the attacks of issue 34
(the premises conjoined two at a time, then the goal: z3 did the whole deduction in the last
step) as named tests. The kind grades in-process on the worker and never uses the sandbox, so
the context has none (as in tests/unit/test_env_logic.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from envs.base import StepContext
from envs.hacks import run_suite
from envs.logic.families import FAMILIES
from envs.logic.hacks import ATTACKS, TASK_CHECK
from envs.registry import make_env
from rewards.aggregate import RewardConfig
from sandbox.base import Limits

# The issue's figures were on six tasks a family: 36 prove tasks and 12 determine tasks.
ISSUE_OPTIONS = {"tasks_per_family": 6, "seed": 0}


@pytest.fixture(scope="module")
def env():
    return make_env("logic", ISSUE_OPTIONS)


@pytest.fixture(scope="module")
def tasks(env):
    return env.generate()


@pytest.fixture(scope="module")
def ctx():
    return StepContext(None, Limits(timeout_s=5), RewardConfig(per_test_timeout_s=0.5))


def attack(name):
    return next(a for a in ATTACKS if a.name == name)


def text(name, task):
    return attack(name).actions(task)[0]


def chain(task) -> str:
    """The issue's answer, written out here rather than taken from the suite."""
    ps = task.payload["premises"]
    lines = [f"1. ({ps[0]}) and ({ps[1]}) [P1, P2]"]
    held = f"({ps[0]}) and ({ps[1]})"
    for k, p in enumerate(ps[2:], 3):
        lines.append(f"{k - 1}. ({held}) and ({p}) [{k - 2}, P{k}]")
        held = f"{held} and ({p})"
    return "\n".join([*lines, f"{len(ps)}. {task.payload['goal']} [{len(ps) - 1}]"])


def test_every_attack_on_two_tasks_of_every_family_is_refused(env, tasks, ctx):
    mine = [t for f in sorted(FAMILIES) for t in [t for t in tasks if t.family == f][:2]]
    results = run_suite(env, mine, ctx, only=[a.name for a in ATTACKS
                                              if a.name != "slow_formula"])
    bad = [(r.attack, r.task_id, r.reward, r.flags) for r in results if not r.refused]
    assert not bad, bad
    tried = {r.attack for r in results}
    assert tried == {a.name for a in ATTACKS} - {"slow_formula"}
    # the packing attacks apply on every family (their lines fit the syntax's caps there)
    for name in ("chain_de_morgan", "chain_weakened_by_goal", "curried_chain", "two_bundles"):
        assert {t.family for t in mine if attack(name).applies(t)} == set(FAMILIES), name


def test_a_step_z3_cannot_decide_in_time_is_refused_unchecked(env, tasks, ctx):
    [r] = run_suite(env, tasks[:1], ctx, only=["slow_formula"])
    assert r.refused and "unchecked_step" in r.flags


def test_issue_34_the_chain_earns_nothing_on_any_prove_task(env, tasks, ctx):
    prove = [t for t in tasks if t.payload["ask"] == "prove"]
    assert len(prove) == 36
    for t in prove:
        b, report = env.grade(t, chain(t), ctx)
        assert b.reward == 0.0 and not b.solved, (t.task_id, report.exec_result.stdout)
        assert "restated_conjunction" in b.hack_flags, (t.task_id, b.hack_flags)


def test_issue_34_the_chain_with_the_answer_earns_nothing_on_any_determine_task(env, tasks,
                                                                                 ctx):
    determine = [t for t in tasks if t.payload["ask"] == "determine"]
    assert len(determine) == 12
    for t in determine:
        b, report = env.grade(t, chain(t), ctx)
        assert b.reward == 0.0 and not b.solved, (t.task_id, report.exec_result.stdout)
        assert "restated_conjunction" in b.hack_flags, (t.task_id, b.hack_flags)


def test_the_chains_links_pass_as_restatements_and_its_last_step_rests_on_every_premise(
        env, tasks, ctx):
    t = next(t for t in tasks if t.family == "modus_ponens")
    n = len(t.payload["premises"])
    b, report = env.grade(t, chain(t), ctx)
    log = report.exec_result.stdout
    assert "step 1: passed: entailed by P1, P2; restates P1, P2" in log
    premises = ", ".join(f"P{i}" for i in range(1, n + 1))
    assert f"step {n}: failed: needs more than 2 of {premises}, which its citations restate" \
        in log
    assert b.test_outcomes[-1] == "failed" and b.reward == 0.0


@pytest.mark.parametrize("name", ["chain_de_morgan", "chain_nested_implication",
                                  "chain_double_negation", "chain_reordered",
                                  "chain_with_tautologies", "chain_absorbed",
                                  "chain_restated_premises", "two_bundles",
                                  "chain_weakened_by_goal"])
def test_the_chain_in_any_equivalent_form_earns_nothing_on_every_family(env, tasks, ctx, name):
    for family in sorted(FAMILIES):
        t = next(t for t in tasks if t.family == family and attack(name).applies(t))
        b, report = env.grade(t, text(name, t), ctx)
        assert b.reward == 0.0 and not b.solved, (family, report.exec_result.stdout)
        assert "restated_conjunction" in b.hack_flags, (family, b.hack_flags)


def test_a_line_weakened_by_a_case_a_premise_kills_still_packs_what_it_cites(env, tasks,
                                                                             ctx):
    # `(P1 and P2) or not P4`: no conjunction of premises, but P4 kills its second case; the
    # last step cites it and P4. The same with that case spread over two conjuncts.
    t = next(t for t in tasks if t.family == "modus_ponens" and len(t.payload["premises"]) == 4)
    p1, p2, p3, p4 = (f"({p})" for p in t.payload["premises"])
    goal = t.payload["goal"]
    plain = (f"1. ({p1} and {p2}) or not {p4} [P1, P2]\n"
             f"2. ({p1} and {p2} and {p3}) or not {p4} [1, P3]\n3. {goal} [2, P4]")
    spread = (f"1. ({p1} or not {p4}) and ({p2} or not {p4}) [P1, P2]\n"
              f"2. ({p1} or not {p4}) and ({p2} or not {p4}) and ({p3} or not {p4}) [1, P3]\n"
              f"3. {goal} [2, P4]")
    for answer in (plain, spread):
        b, report = env.grade(t, answer, ctx)
        assert b.reward == 0.0 and "restated_conjunction" in b.hack_flags, \
            report.exec_result.stdout


def test_currying_the_premises_into_one_step_earns_nothing(env, tasks, ctx):
    # `1. P2 -> (P3 -> goal) [P1]`, then modus ponens a premise at a time: two citations a
    # step, and z3 does the whole deduction in the first.
    for name in ("curried_chain", "curried_disjunction", "curried_tautology"):
        for family in sorted(FAMILIES):
            t = next(t for t in tasks if t.family == family and attack(name).applies(t))
            b, report = env.grade(t, text(name, t), ctx)
            assert b.reward == 0.0 and not b.solved, (name, family, report.exec_result.stdout)
            assert set(b.hack_flags) & {"assumed_premises", "restated_conjunction"}, \
                (name, family, b.hack_flags)


def test_a_tautology_carrying_the_deduction_is_refused_for_what_it_assumes(env, tasks, ctx):
    t = next(t for t in tasks if t.family == "dilemma")
    b, report = env.grade(t, text("curried_tautology", t), ctx)
    assert "step 1: failed: assumes P1" in report.exec_result.stdout
    assert b.hack_flags[0] == "assumed_premises" and b.reward == 0.0


def test_the_task_check_runs_the_old_cheats_the_issues_chain_and_the_curried_chain(env, tasks):
    prove = next(t for t in tasks if t.payload["ask"] == "prove")
    determine = next(t for t in tasks if t.payload["ask"] == "determine")
    assert set(env.trivial_answers(prove)) == set(TASK_CHECK) - {"conjunction_chain_answer"}
    assert set(env.trivial_answers(determine)) == set(TASK_CHECK) - {"conjunction_chain"}
    assert env.trivial_answers(prove)["empty"] == ""
    assert [a.name for a in env.attacks(prove)] == [a.name for a in ATTACKS]


def test_cli_hacks_logic_reports_nothing_credited():
    env = dict(os.environ, DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    res = subprocess.run([sys.executable, "-m", "flows.cli", "hacks", "logic", "--tasks", "2",
                          "--attack", "conjunction_chain", "--attack", "curried_chain"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    row = next(ln.split() for ln in res.stdout.splitlines() if ln.startswith("logic"))
    assert row[3] == "0" and row[2] == row[4]  # credited 0, every try flagged
