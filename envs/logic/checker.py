"""Step checking: each step of a chain is entailed by what it cites, decided by z3.

A step is **valid** when the formulas it cites (premises, and earlier steps that are valid
themselves) entail it: z3 finds `cited and not step` unsatisfiable within `timeout_ms`. A step
that does not parse, cites what does not exist, cites more than `max_cited` lines, builds on an
invalid step, is not entailed, or that the solver cannot decide in time is **invalid**, and no
later step can use it. The chain reaches the goal when its last step is valid and equivalent to
the goal (z3 proves `last <-> goal`), so the goal may be stated in any equivalent form.

Why a step may cite only a few lines: the premises of a well-posed task entail its goal, so a
check "premises and earlier steps entail the step" would accept the goal as step 1 and check
nothing. A bound on what one step may use (`max_cited`, 2 by default) makes each step one small
inference, which is what the solver then verifies.

The bound counts what a step rests on, not the lines it names (issue 34: conjoining the premises
two at a time, `1. (P1) and (P2) [P1, P2]`, `2. (1) and (P3) [1, P3]`, ..., let the last step
cite one line holding every premise, and z3 did the whole deduction there). So every valid line
stands for **units** (envs/logic/accounting.py): a premise or an inference stands for itself; a
**restatement** stands for the units it restates. A line is a restatement of some of the units
its citations stand for when z3 proves it equivalent to their conjunction, in any form
(reordered, De Morgan, nested implications, with tautologies, one line restated); or so
wherever the goal is false (weakened by the goal, `P1 and (P2 or goal)`); or so once its dead
cases are removed: the terms of its disjunctive normal form that a unit contradicts, that unit
assumed (`(P1 and P2) or not P5`, however distributed; tested again whenever the line is cited,
so that a killer derived after it counts). A step passes when its citations entail it and at
most `max_cited` of the units they stand for do, counting also the units it assumes in its own
formula as hypotheses of the goal (`(P1 and P2 and P3) -> goal []`: the deduction theorem
would otherwise move any number of premises into one step). A restatement each of whose
conjuncts is one unit's (a conjunction put together, like the determine tasks' answer) needs
no bound; any other restatement does (the answer to a determine task is equivalent to all its
premises together, and saying so is the whole deduction).

Hack flags (the answer then earns no credit, envs/logic/env.py):
- `restated_goal`: a step equivalent to the goal that its citations do not give (the answer
  asserted what it had to show without deriving it; a goal step that only builds on an earlier
  invalid step is not flagged, the error lies there);
- `contradiction`: a step unsatisfiable on its own (`false`, `A and not A`): nothing
  consistent entails it, and a chain built on it would prove anything;
- `unknown_citation`: a step cites a premise the task does not have, itself or a later step
  (the only way an answer could add a premise);
- `unchecked_step`: a step the solver could not check: unparsable, over the syntax's size caps,
  out of time or memory, undecided (`unknown`), or with more cases than its accounting looks at;
- `restated_conjunction`: a step its citations entail only through more than `max_cited` units,
  reached through restated conjunctions (the issue's chain and every equivalent packing);
- `assumed_premises`: a step that needs more than `max_cited` units once the premises or steps
  it assumes as hypotheses of the goal are counted (the curried chain);
- `no_steps`: the answer has no step at all.
`inconsistent_premises` is the task's fault, not the answer's: the premises are contradictory
(or could not be shown consistent), so anything would follow; every step is invalid and the
answer scores 0 with the flag.

Threat model: the answer is text, read by our own parser (envs/logic/syntax.py), never
executed. The danger is the solver: a crafted formula can make z3 slow or hungry (a 170-
character knapsack question within the caps takes it seconds: tests/unit/test_env_logic.py).
Each check has a time limit, every answer a total budget (`budget_s`, looked at before every
check; a step's accounting costs a few checks more than its entailment, about six on the
references, a packed step up to one per case and unit or pair of units; a step whose accounting
is undecided, or that has more than `MAX_CASES` cases, is invalid and flagged, never let
through), z3's process-wide memory cap (`memory_max_size`) is set, and the parser refuses long,
deep, quantifier-heavy or non-linear formulas before z3 sees them. Checks run in-process on
the worker, in one z3 context per thread (z3 contexts are not shared between threads),
which is what makes a check cost about a millisecond. What they cannot bound is a bug in z3
itself crashing the worker (Dask then restarts it and the shard is retried; one, in z3 4.15's
Diophantine module, is avoided by turning that module off, below); z3 crashes, rather
than raising, when a context is made with its memory cap already reached, hence the reuse.
"""
from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass

import z3

from envs.logic.accounting import Undecided, Units, account
from envs.logic.syntax import Node, ParseError, Step, parse_formula, parse_step

# z3 4.15's integer arithmetic crashes the process (a segfault in its Diophantine-equation
# module, lp::dioph_eq::imp::tighten_terms_with_S) on some linear integer steps cut short by the
# time limit: the knapsack step of tests/unit/test_env_logic.py did, now and then. With the
# module off, z3 decides integer steps as before 4.14 did.
z3.set_param("lp.dio", False)

_PARAMS_LOCK = threading.Lock()
_MEMORY_MB: list[int] = []


@dataclass(frozen=True)
class StepVerdict:
    outcome: str  # passed | failed | error | timeout
    why: str


@dataclass(frozen=True)
class ChainVerdict:
    """The verdict on one answer: one entry per step, the goal's, the flags, the cost."""

    steps: tuple[StepVerdict, ...]
    goal: StepVerdict
    flags: tuple[str, ...]
    seconds: float
    checks: int  # solver calls made
    parsed: int  # steps that parsed

    @property
    def valid(self) -> int:
        return sum(s.outcome == "passed" for s in self.steps)


def set_memory_cap(mb: int) -> None:
    """z3's memory cap is one per process: set it once (again only when it changes)."""
    with _PARAMS_LOCK:
        if _MEMORY_MB != [mb]:
            z3.set_param("memory_max_size", int(mb))
            _MEMORY_MB[:] = [mb]


_LOCAL = threading.local()


def thread_context() -> z3.Context:
    """This thread's z3 context, made once and reused: a context costs about 16 MB, and making
    one under z3's memory cap when the cap is nearly reached crashes the process (z3 returns no
    context), so contexts are made when memory is low, not once per answer."""
    ctx = getattr(_LOCAL, "ctx", None)
    if ctx is None:
        ctx = _LOCAL.ctx = z3.Context()
    return ctx


class Z3Terms:
    """Formula trees to z3 terms in one context (this thread's, by default)."""

    def __init__(self, ctx: z3.Context | None = None) -> None:
        self.ctx = ctx or thread_context()
        self.obj = z3.DeclareSort("Obj", self.ctx)
        self.names: dict[tuple[str, str], z3.ExprRef] = {}

    def name(self, name: str, sort: str):
        key = (name, sort)
        if key not in self.names:
            c = self.ctx
            self.names[key] = {"bool": lambda: z3.Bool(name, c), "int": lambda: z3.Int(name, c),
                               "obj": lambda: z3.Const(name, self.obj),
                               "pred": lambda: z3.Function(name, self.obj, z3.BoolSort(c))}[sort]()
        return self.names[key]

    def term(self, f: Node, bound: dict | None = None):
        b = bound or {}
        op = f[0]
        if op in ("true", "false"):
            return z3.BoolVal(op == "true", self.ctx)
        if op == "atom":
            return self.name(f[1], "bool")
        if op == "pred":
            arg = b[f[2]] if f[3] else self.name(f[2], "obj")
            return self.name(f[1], "pred")(arg)
        if op == "not":
            return z3.Not(self.term(f[1], b))
        if op in ("and", "or"):
            parts = [self.term(g, b) for g in f[1]]
            return z3.And(*parts) if op == "and" else z3.Or(*parts)
        if op == "imp":
            return z3.Implies(self.term(f[1], b), self.term(f[2], b))
        if op == "iff":
            return self.term(f[1], b) == self.term(f[2], b)
        if op in ("all", "some"):
            v = z3.Const(f"{f[1]}!{len(b)}", self.obj)
            body = self.term(f[2], {**b, f[1]: v})
            return z3.ForAll([v], body) if op == "all" else z3.Exists([v], body)
        if op == "cmp":
            lhs, rhs = self.lin(f[2]), self.lin(f[3])
            return {"=": lambda: lhs == rhs, "!=": lambda: lhs != rhs, "<": lambda: lhs < rhs,
                    "<=": lambda: lhs <= rhs, ">": lambda: lhs > rhs,
                    ">=": lambda: lhs >= rhs}[f[1]]()
        raise ValueError(f"not a formula node: {op!r}")

    def lin(self, t: Node):
        out = z3.IntVal(t[2], self.ctx)
        for n, k in t[1]:
            out = out + z3.IntVal(k, self.ctx) * self.name(n, "int")
        return out

    def decide(self, assumptions: list, claim, timeout_ms: int) -> str:
        """'yes': the assumptions entail `claim`; 'no': they do not; 'unknown' (time, memory
        or an undecided quantifier)."""
        s = z3.Solver(ctx=self.ctx)
        s.set("timeout", max(1, int(timeout_ms)))
        s.add(*assumptions, z3.Not(claim))
        try:
            r = s.check()
        except z3.Z3Exception:  # out of memory, or the solver gave up some other way
            _LOCAL.ctx = None  # the next answer gets a fresh context
            return "unknown"
        return "yes" if r == z3.unsat else "no" if r == z3.sat else "unknown"


def task_sorts(premises: list[str], goal: str) -> dict[str, str]:
    """The names' sorts of a task (raises ParseError naming the part that does not parse)."""
    sorts: dict[str, str] = {}
    for i, p in enumerate(premises, 1):
        try:
            _, sorts = parse_formula(p, sorts)
        except ParseError as exc:
            raise ParseError(f"premise P{i}: {exc}") from None
    try:
        _, sorts = parse_formula(goal, sorts)
    except ParseError as exc:
        raise ParseError(f"goal: {exc}") from None
    return sorts


@functools.lru_cache(maxsize=4096)
def premises_consistent(premises: tuple[str, ...], timeout_ms: int = 2000) -> bool:
    """Whether z3 finds a model of the premises (undecided counts as not shown consistent)."""
    z = Z3Terms()
    sorts: dict[str, str] = {}
    terms = []
    for p in premises:
        f, sorts = parse_formula(p, sorts)
        terms.append(z.term(f))
    return z.decide(terms, z3.BoolVal(False, z.ctx), timeout_ms) == "no"


def check_chain(premises: list[str], goal: str, answer: str, *, max_cited: int = 2,
                timeout_ms: int = 500, budget_s: float = 10.0, max_steps: int = 24
                ) -> ChainVerdict:
    """Check every step of `answer` against the task's premises and goal (see the module's
    docstring for what makes a step valid and what raises a flag)."""
    t0 = time.perf_counter()
    lines = [ln for ln in answer.splitlines() if ln.strip()]
    if not premises_consistent(tuple(premises)):
        bad = StepVerdict("failed", "the task's premises are contradictory")
        return ChainVerdict((bad,) * len(lines), bad, ("inconsistent_premises",),
                            time.perf_counter() - t0, 1, 0)
    chain = _ChainCheck(premises, goal, max_cited, timeout_ms, t0 + budget_s)
    if not lines:
        chain.flag("no_steps")
    for i, line in enumerate(lines, 1):
        if i > max_steps:
            chain.verdicts.append(StepVerdict("failed", f"past the longest chain ({max_steps} "
                                              f"steps)"))
        elif time.perf_counter() - t0 > budget_s:
            chain.verdicts.append(StepVerdict("timeout", f"the answer's budget of {budget_s:g} s "
                                              f"is spent"))
            chain.flag("unchecked_step")
        else:
            chain.verdicts.append(chain.check(i, line))
    goal_v = chain.goal_verdict(len(lines))
    return ChainVerdict(tuple(chain.verdicts), goal_v, tuple(chain.flags),
                        time.perf_counter() - t0, chain.checks + chain.units.checks, chain.parsed)


class _ChainCheck:
    """One answer's check in progress: the task's formulas as z3 terms, the steps found valid
    (which later steps may cite), the verdicts and flags so far, the solver calls made."""

    def __init__(self, premises: list[str], goal: str, max_cited: int, timeout_ms: int,
                 deadline: float) -> None:
        self.z = z = Z3Terms()
        self.sorts = task_sorts(premises, goal)
        self.prem = [z.term(parse_formula(p, self.sorts)[0]) for p in premises]
        self.goal_t = z.term(parse_formula(goal, self.sorts)[0])
        self.units = Units(z, self.goal_t, timeout_ms, deadline)
        for k, t in enumerate(self.prem, 1):
            self.units.of[("P", k)], self.units.term[("P", k)] = frozenset({("P", k)}), t
        self.max_cited, self.timeout_ms = max_cited, timeout_ms
        self.valid: dict[int, object] = {}  # step number -> its z3 term
        self.verdicts: list[StepVerdict] = []
        self.flags: list[str] = []
        self.checks = self.parsed = 0

    def flag(self, name: str) -> None:
        if name not in self.flags:
            self.flags.append(name)

    def check(self, i: int, line: str) -> StepVerdict:
        """The verdict on step `i`, the line `line`; a failed step is looked at for flags."""
        try:
            step: Step = parse_step(line)
            if step.number != i:
                raise ParseError(f"numbered {step.number}, expected {i}")
            f, new_sorts = parse_formula(step.formula, self.sorts)
        except ParseError as exc:
            self.flag("unchecked_step")
            return StepVerdict("error", f"unparsable: {exc}")
        self.parsed += 1
        claim = self.z.term(f)
        verdict = self._judge(i, step, f, new_sorts, claim)
        if verdict.outcome == "failed":
            self._flag_failure(claim, verdict.why)
        return verdict

    def _judge(self, i: int, step: Step, f: Node, new_sorts: dict[str, str], claim
               ) -> StepVerdict:
        """Whether step `i` is valid: what it cites exists and is valid, is few enough lines,
        entails it, and stands for at most `max_cited` units. A valid step is kept."""
        cited, why = self._citations(i, step)
        if why is None and len(step.cites) > self.max_cited:
            why = f"cites {len(step.cites)} lines; a step may cite at most {self.max_cited}"
        if why is not None:
            return StepVerdict("failed", why)
        self.checks += 1
        got = self.z.decide(cited, claim, self.timeout_ms)
        if got == "unknown":
            self.flag("unchecked_step")
            return StepVerdict("timeout", f"the solver could not decide it in {self.timeout_ms} ms")
        if got != "yes":
            return StepVerdict("failed", "not entailed by what it cites")
        try:
            verdict, bad = account(self.units, i, f, claim, step, self.max_cited)
        except Undecided as exc:
            if exc.gave_up:
                _LOCAL.ctx = None  # the next answer gets a fresh context (decide())
            self.flag("unchecked_step")
            return StepVerdict(exc.outcome, f"unchecked: {exc}")
        if bad is not None:
            self.flag(bad)
            return StepVerdict("failed", verdict)
        self.valid[i] = claim
        self.sorts = new_sorts
        return StepVerdict("passed", verdict)

    def _citations(self, i: int, step: Step) -> tuple[list, str | None]:
        """The terms step `i` cites, and why it cannot use them (None when it can)."""
        cited = []
        for kind, k in step.cites:
            if kind == "P" and 1 <= k <= len(self.prem):
                cited.append(self.prem[k - 1])
            elif kind == "S" and 1 <= k < i:
                if k not in self.valid:
                    return cited, f"builds on step {k}, which is invalid"
                cited.append(self.valid[k])
            else:
                self.flag("unknown_citation")
                return cited, f"cites {'P' if kind == 'P' else ''}{k}, which is not " + (
                    "a premise" if kind == "P" else "an earlier step")
        return cited, None

    def _flag_failure(self, claim, why: str) -> None:
        # An invalid contradiction is flagged however it failed; an invalid goal when it fails
        # by its own inference (the goal citing every premise fails the citation bound), not
        # when it only builds on an earlier invalid step: that error lies earlier.
        self.checks += 1
        if self.z.decide([claim], z3.BoolVal(False, self.z.ctx), self.timeout_ms) == "yes":
            self.flag("contradiction")
        if not why.startswith("builds on"):
            self.checks += 1
            if self.z.decide([], claim == self.goal_t, self.timeout_ms) == "yes":
                self.flag("restated_goal")

    def goal_verdict(self, last: int) -> StepVerdict:
        """Whether the last step, number `last`, is valid and equivalent to the goal."""
        if not last:
            return StepVerdict("failed", "no steps")
        if last not in self.valid:
            return StepVerdict("failed", "the last step is invalid")
        self.checks += 1
        same = self.z.decide([], self.valid[last] == self.goal_t, self.timeout_ms)
        return StepVerdict("passed", "the last step is the goal") if same == "yes" else \
            StepVerdict("failed", "the last step is not the goal")
