"""Hack suites: the attacks tried on each kind's grader, run through the real grader and sandbox.

A kind lists its attacks in `Environment.attacks(task)` (each kind keeps them in its own module,
next to its grader: `envs/<kind>/hacks.py`; the kinds whose answer is one function share
`envs/function_hacks.py`). An `Attack` is what a policy could send: the actions of one episode (one answer for a
single-turn kind), built for a given task. Every attack must earn no credit (reward <= 0, not
solved) and carry at least one of its named flags. `run_suite` plays each attack as an episode
through `reset`/`step`, exactly as the loop does, so what is measured is what a run would pay.

To add an attack: append an `Attack` to the kind's list with the flags it must raise, then run
`rollforge hacks KIND` (or the kind's hack test) and see it refused.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from envs.base import Environment, StepContext, breakdown_of
from tasks.record import Task


@dataclass(frozen=True)
class Attack:
    """One attack on a kind's grader. `actions(task)` gives the policy's text for each turn (one
    item for a single-turn kind); the episode is graded after the last one (a forced end when the
    kind did not finish). `flags`: the grader must raise at least one of these."""

    name: str
    what: str
    actions: Callable[[Task], Sequence[str]]
    flags: tuple[str, ...]  # () : an honest-looking failure, which must earn 0 and no flag
    applies: Callable[[Task], bool] = field(default=lambda task: True)


def answer(text_of: Callable[[Task], str] | str) -> Callable[[Task], tuple[str]]:
    """`actions` of a single-turn attack from its answer (a string or a function of the task)."""
    return lambda task: (text_of(task) if callable(text_of) else text_of,)


@dataclass(frozen=True)
class AttackResult:
    kind: str
    attack: str
    task_id: str
    reward: float
    solved: bool
    pass_fraction: float
    flags: tuple[str, ...]
    expected: tuple[str, ...]
    infra_error: bool = False

    @property
    def credited(self) -> bool:
        """Paid anything at all: a positive reward or a solve."""
        return self.solved or (not math.isnan(self.reward) and self.reward > 0)

    @property
    def flagged(self) -> bool:
        """Raised one of the flags the attack names; for an attack that names none (a
        do-nothing answer an honest policy could also give), raised none: it must earn exactly
        what an honest failure earns."""
        if not self.expected:
            return not self.flags
        return bool(set(self.flags) & set(self.expected))

    @property
    def refused(self) -> bool:
        return not self.infra_error and not self.credited and self.flagged


def play_attack(env: Environment, task: Task, attack: Attack, ctx: StepContext) -> AttackResult:
    """One attack as one episode of `task`, graded by the kind's own step."""
    state, _ = env.reset(task)
    grade = final = None
    for text in list(attack.actions(task))[: max(1, env.max_turns)]:
        final = env.step(state, text, ctx)
        state = final.state
        if final.done:
            grade = breakdown_of(final.info)
            break
    else:
        final = env.step(state, None, ctx)
        grade = breakdown_of(final.info)
    if grade is None:
        raise RuntimeError(f"kind {env.name!r}: attack {attack.name!r} ended ungraded")
    # what the run pays: the grade plus any per-episode shaping the kind adds on top of it
    paid = grade.reward + float(final.info.get("shaping", 0.0) or 0.0)
    return AttackResult(env.name, attack.name, task.task_id, paid, grade.solved,
                        grade.pass_fraction, tuple(grade.hack_flags), attack.flags,
                        grade.infra_error)


def run_suite(env: Environment, tasks: Sequence[Task], ctx: StepContext,
              only: Sequence[str] = (), workers: int = 1) -> list[AttackResult]:
    """Every attack of the kind on every task it applies to (`only`: these attack names), in
    that order. `workers` attacks are graded at once, each in its own sandbox run: the
    sandboxes are thread-safe and a grade waits on its sandbox's processes, not on Python."""
    plays = [(task, attack) for task in tasks for attack in env.attacks(task)
             if (not only or attack.name in only) and attack.applies(task)]
    if workers <= 1 or len(plays) <= 1:
        return [play_attack(env, task, attack, ctx) for task, attack in plays]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="attack") as pool:
        return list(pool.map(lambda p: play_attack(env, p[0], p[1], ctx), plays))


def summary(results: Sequence[AttackResult]) -> dict[str, dict[str, int]]:
    """Per kind: attacks (distinct), tried (attack x task), credited (must be 0), flagged,
    infra (could not be run)."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        s = out.setdefault(r.kind, {"attacks": 0, "tried": 0, "credited": 0, "flagged": 0,
                                    "infra": 0})
        s["tried"] += 1
        s["credited"] += r.credited
        s["flagged"] += r.flagged
        s["infra"] += r.infra_error
    for kind, s in out.items():
        s["attacks"] = len({r.attack for r in results if r.kind == kind})
    return out
