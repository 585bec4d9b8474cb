"""The agent kind's hack suite (envs/agent/hacks.py) with visible-progress shaping on, through
the real episode, the hidden-test grader and the process sandbox (issue 34).

What a run pays for an episode is its grade's reward plus its shaping (flows/episodes.py
`episode_rows`); `Paying` keeps that sum, so these tests measure what training would get.
"""
from __future__ import annotations

import pytest

from envs.agent import AgentEnv
from envs.agent.hacks import partial_solution
from envs.base import StepContext
from envs.hacks import run_suite
from rewards.aggregate import RewardConfig
from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox

SHAPED = {"shaping": "visible_progress", "shaping_coef": 0.1}
LIMITS = Limits(timeout_s=3.0)


class Paying(AgentEnv):
    """The agent kind that also keeps, per finished episode, what the run pays for it."""

    def __init__(self, config=None):
        super().__init__(config)
        self.paid: list[float] = []

    def step(self, state, action, ctx):
        result = super().step(state, action, ctx)
        if result.done:
            self.paid.append(result.info["grade"].reward + result.info["shaping"])
        return result


@pytest.fixture(scope="module")
def ctx():
    sbx = make_sandbox(SandboxConfig())
    yield StepContext(sbx, LIMITS, RewardConfig())
    sbx.close()


@pytest.fixture(scope="module")
def tasks():
    """Two procedural tasks of different families (each has one visible example)."""
    ts = sorted(AgentEnv(SHAPED).generate(), key=lambda t: t.task_id)
    return [next(t for t in ts if t.family == family) for family in ("add", "filter_gt")]


def play(env, task, ctx, *turns):
    """The episode of `turns`: its last step's result and every turn's observation."""
    state, _ = env.reset(task)
    seen = []
    for text in turns:
        result = env.step(state, text, ctx)
        state = result.state
        seen.append(result.observation)
        if result.done:
            break
    else:
        result = env.step(state, None, ctx)
    return result, seen


def whole(task, body: str) -> str:
    return f'<write path="solution.py">\n{task.prompt}{body}</write>'


def test_visible_count_printed_at_exit_earns_no_shaping_and_is_flagged(ctx, tasks):
    # Issue 34: the count line was read from the candidate's own process, so a line printed at
    # exit set the shaping term to 100. Here the solution is even right (hidden grade 1.0).
    env, task = Paying(SHAPED), tasks[0]
    forge = "import atexit\natexit.register(lambda: print('1000/1 visible examples passed'))\n"
    result, seen = play(env, task, ctx, whole(task, task.reference + forge) + "<run_tests/>",
                        "<submit/>")
    grade = result.info["grade"]
    assert result.info["shaping"] == 0.0
    assert "forged_record" in grade.hack_flags and not grade.solved
    assert env.paid == [grade.reward] and grade.reward <= 0
    assert seen[0].rstrip().splitlines()[-2] == "1/1 visible examples passed"


def test_honest_episode_keeps_its_visible_progress_shaping(ctx, tasks):
    env, task = Paying(SHAPED), tasks[0]
    result, _ = play(env, task, ctx, whole(task, task.reference) + "<run_tests/>", "<submit/>")
    grade = result.info["grade"]
    assert grade.solved and grade.hack_flags == ()
    first = result.state.history[0]
    assert first["visible_passed"] == first["visible_total"] == 1
    assert result.info["shaping"] == pytest.approx(0.1)
    assert env.paid == [pytest.approx(1.1)]


def test_visible_progress_pays_nothing_on_top_of_a_zero_hidden_grade(ctx, tasks):
    # Hard-coding the visible example passes it honestly (the agent is shown it), but shaping
    # must never turn a zero episode into a positive reward.
    env, task = Paying(SHAPED), tasks[0]
    ex = task.examples[0]
    lookup = (f"    if list(({', '.join(map(repr, ex.args))},)) == {list(ex.args)!r}:\n"
              f"        return {ex.expected!r}\n    return None\n")
    result, _ = play(env, task, ctx, whole(task, lookup) + "<run_tests/>", "<submit/>")
    assert result.state.history[0]["visible_passed"] == 1
    assert result.info["grade"].reward == 0.0 and result.info["shaping"] == 0.0
    assert env.paid == [0.0]


def test_partial_solution_of_the_attacks_earns_hidden_credit_but_fails_the_visible_example(
        ctx, tasks):
    # The attacks carry a solution that a run would otherwise pay for, so only the defences
    # stand between them and credit.
    for task in tasks:
        env = Paying(SHAPED)
        attempt = f'<write path="solution.py">\n{partial_solution(task)}</write><run_tests/>'
        result, _ = play(env, task, ctx, attempt, "<submit/>")
        assert result.state.history[0]["visible_passed"] == 0
        assert result.info["grade"].reward > 0 and result.info["shaping"] == 0.0


def test_every_agent_attack_is_refused_with_shaping_on(ctx, tasks):
    env = Paying(SHAPED)
    results = run_suite(env, tasks, ctx)
    assert len({r.attack for r in results}) >= 15
    assert len(env.paid) == len(results)
    bad = [(r.attack, r.task_id, r.reward, r.flags) for r in results if not r.refused]
    assert not bad, bad
    paid = [(r.attack, p) for r, p in zip(results, env.paid) if p > 0]
    assert not paid, paid


def test_the_agent_kind_lists_the_issue_attack_and_its_obfuscated_forms(tasks):
    names = {a.name for a in AgentEnv(SHAPED).attacks(tasks[0])}
    assert {"atexit_count", "atexit_import_concat", "getattr_chain", "exec_built_string",
            "del_printer", "os_write_fd1", "dev_stdout", "late_thread"} <= names


def test_an_answer_given_whole_is_graded_as_the_episodes_submitted_solution(ctx, tasks):
    # `rollforge tasks check --kind agent` grades references and trivial answers this way: the
    # same verdict the episode's final grade gives the same text written to solution.py
    from envs.quality import check_task

    env = AgentEnv(SHAPED)
    task = tasks[0]
    checked = check_task(task, ctx.sandbox, LIMITS, env=env)
    assert checked.ok and checked.reference_reward == 1.0, checked
    result, _ = play(env, task, ctx, whole(task, task.reference) + "<submit/>")
    assert result.info["grade"].solved
    wrong, _ = env.grade(task, "    return None\n", ctx)
    assert not wrong.solved and wrong.reward <= 0
