"""What a step of a logic chain rests on: the units each valid line stands for, and the tests
that tell a restatement from an inference (the rules: envs/logic/checker.py's docstring).

A premise or an inference stands for itself; a restatement (equivalent to a conjunction of the
units its citations stand for, wherever the goal is false, or once its dead cases are removed)
for those units. `account` records what a step stands for, or says why it rests on more than
the bound allows.

The price: a step equivalent to the conjunction of what it cites is a restatement even where a
reader would call it an inference (`x = 3` from `x >= 3` and `x <= 3`; `U or V` from
`D or U or V` and `D -> U`, V the goal), so a step citing it counts its parts: `y = 4` from
`x + y = 7` and that `x = 3` rests on three lines, and is refused. What it cannot catch, being semantic: a
line that packs its parents weakened by a case that only several units together kill, and any
lemma chosen so that the next step finishes the work, as long as each step is entailed by two
units; the tests compare what lines say, not how hard z3 worked.
"""
from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import z3

from envs.logic.syntax import Node, Step

if TYPE_CHECKING:
    from envs.logic.checker import Z3Terms

Unit = tuple  # ("P", k): premise k; ("S", i): the inference step i


def unit_name(u: Unit) -> str:
    return f"P{u[1]}" if u[0] == "P" else str(u[1])


class Undecided(Exception):
    """A check of the accounting was undecided or the answer's time ran out: the step is
    invalid (an accounting the solver could not finish must never let a step through).
    `gave_up`: z3 raised (out of memory, say): the caller starts a fresh context."""

    outcome = "timeout"

    def __init__(self, why: str, gave_up: bool = False) -> None:
        super().__init__(why)
        self.gave_up = gave_up


class TooInvolved(Undecided):
    """A step with more cases than the accounting looks at (`MAX_CASES`), like a size cap."""

    outcome = "error"


def _conjuncts(f: Node) -> list[Node]:
    """f as a conjunction: and, not-or, not-not, not-implies and `=` are split."""
    op = f[0]
    if op == "and":
        return [c for g in f[1] for c in _conjuncts(g)]
    if op == "not" and f[1][0] == "or":
        return [c for g in f[1][1] for c in _conjuncts(("not", g))]
    if op == "not" and f[1][0] == "not":
        return _conjuncts(f[1][1])
    if op == "not" and f[1][0] == "imp":
        return _conjuncts(f[1][1]) + _conjuncts(("not", f[1][2]))
    if op == "cmp" and f[1] == "=":  # x = 3 is x <= 3 and x >= 3
        return [("cmp", "<=", f[2], f[3]), ("cmp", ">=", f[2], f[3])]
    return [f]


def _disjuncts(f: Node) -> list[Node]:
    """f as a disjunction: or, implies (a -> b is not a, b), not-and and not-not are split."""
    op = f[0]
    if op == "or":
        return [d for g in f[1] for d in _disjuncts(g)]
    if op == "imp":
        return _disjuncts(("not", f[1])) + _disjuncts(f[2])
    if op == "not" and f[1][0] == "and":
        return [d for g in f[1][1] for d in _disjuncts(("not", g))]
    if op == "not" and f[1][0] == "not":
        return _disjuncts(f[1][1])
    return [f]


MAX_CASES = 64  # cases (DNF terms) of a step the accounting looks at; more: too involved


def cases_of(f: Node, pos: bool = True) -> list[tuple[Node, ...]]:
    """f in disjunctive normal form: its cases, each a conjunction of literals (quantified
    formulas and comparisons are literals). Raises TooInvolved past MAX_CASES cases."""
    op = f[0]
    if op == "not":
        return cases_of(f[1], not pos)
    if op in ("and", "or"):
        parts = [cases_of(g, pos) for g in f[1]]
        if (op == "or") == pos:
            out = [c for p in parts for c in p]
        else:
            out = [()]
            for p in parts:
                out = [a + b for a in out for b in p]
                if len(out) > MAX_CASES:
                    raise TooInvolved(f"more than {MAX_CASES} cases: too involved to account")
        if len(out) > MAX_CASES:
            raise TooInvolved(f"more than {MAX_CASES} cases: too involved to account")
        return out
    if op == "imp":
        return cases_of(("or", (("not", f[1]), f[2])), pos)
    if op == "iff":
        a, b = f[1], f[2]
        both = ("or", (("and", (a, b)), ("and", (("not", a), ("not", b)))))
        return cases_of(both if pos else ("not", both), True)
    return [((f if pos else ("not", f)),)]


class Units:
    """What each valid line stands for, and what a step rests on (the module's docstring).

    `of[line]`: the units a valid line stands for (a line is ("P", k) or ("S", i)); `term[u]`:
    a unit's z3 term; `made[i]`: an inference step's formula, the units its citations stood
    for and the units there were, to test it again when cited. Every solver call goes through
    `_entails`, which counts it, keeps to the answer's deadline and raises `Undecided` rather
    than guess."""

    def __init__(self, z: Z3Terms, goal, timeout_ms: int, deadline: float) -> None:
        self.z, self.goal, self.timeout_ms, self.deadline = z, goal, timeout_ms, deadline
        self.of: dict[Unit, frozenset] = {}
        self.term: dict[Unit, object] = {}
        self.made: dict[Unit, tuple[Node, frozenset, frozenset]] = {}
        self.checks = 0

    def each(self, assumptions: list, claims: list) -> list[bool]:
        """For each claim, whether the assumptions entail it (one incremental solver)."""
        s = self.solver(*assumptions)
        return [self._entails(s, c) for c in claims]

    def solver(self, *assumptions) -> z3.Solver:
        try:
            s = z3.Solver(ctx=self.z.ctx)
            s.set("timeout", max(1, int(self.timeout_ms)))
            s.add(*assumptions)
        except z3.Z3Exception:
            raise Undecided("the solver gave up (out of memory?)", gave_up=True) from None
        return s

    def _entails(self, s: z3.Solver, claim) -> bool:
        if time.perf_counter() > self.deadline:
            raise Undecided("the answer's budget is spent")
        self.checks += 1
        try:
            s.push()
            s.add(z3.Not(claim))
            got = s.check()
            s.pop()
        except z3.Z3Exception:
            raise Undecided("the solver gave up (out of memory?)", gave_up=True) from None
        if got == z3.unknown:
            raise Undecided(f"the solver could not decide its accounting in {self.timeout_ms} ms")
        return got == z3.unsat

    def ask(self, assumptions: list, claim) -> bool:
        return self.each(assumptions, [claim])[0]

    def dead_cases(self, formula: Node, available: frozenset) -> frozenset:
        """The units that kill a case of `formula` (a term of its disjunctive normal form that
        contradicts a unit: `(P1 and P2) or not P5`, P5 a premise, however distributed)."""
        cases = cases_of(formula)
        if len(cases) < 2:
            return frozenset()  # a line with one case that is dead is false, not weakened
        units = sorted(available)
        every = [self.term[u] for u in units]
        false = z3.BoolVal(False, self.z.ctx)
        out: set = set()
        for case in cases:
            case_t = z3.And(*[self.z.term(lit) for lit in case]) if len(case) > 1 else \
                self.z.term(case[0])
            # One check screens a live case: consistent with every unit at once, no unit kills
            # it (the units are true together); else which do, unless it is false on its own.
            if not self.ask([case_t, *every], false):
                continue
            dead = self.each([case_t], [false, *(z3.Not(t) for t in every)])
            if not dead[0]:
                out.update(u for u, d in zip(units, dead[1:]) if d)
        return frozenset(out)

    def restates(self, claim, formula: Node, members: frozenset, available: frozenset
                 ) -> frozenset | None:
        """The units `claim` restates the conjunction of, if it is a restatement: unless it
        gives the goal, wherever the goal is false, and, failing that, with its dead cases
        removed (their killers assumed), it entails those members, and they entail it. None:
        an inference."""
        kept = self._restates(claim, [], members)
        if kept is None:
            dead = [self.term[u] for u in self.dead_cases(formula, available)]
            if dead and not self.ask([claim, *dead], z3.BoolVal(False, self.z.ctx)):
                kept = self._restates(claim, dead, members)  # (all cases dead: a false claim)
        return kept

    def _restates(self, claim, dead: list, members: frozenset) -> frozenset | None:
        ordered = sorted(members)
        s = self.solver(claim)
        try:
            if not self._entails(s, self.goal):
                # Weakened by the goal (`P1 and (P2 or goal)`). When the live cases leave the
                # goal no room at all, the line entails every member there: it packs them all.
                s.add(z3.Not(self.goal))
            s.add(*dead)
        except z3.Z3Exception:
            raise Undecided("the solver gave up (out of memory?)", gave_up=True) from None
        got = [self._entails(s, self.term[u]) for u in ordered]
        kept = frozenset(u for u, yes in zip(ordered, got) if yes)
        if kept and self.ask([self.term[u] for u in kept], claim):
            return kept
        return None

    def unpack(self, members: frozenset, available: frozenset) -> frozenset:
        """`members` with every cited inference that, with the units there are now, is a
        restatement replaced by what it restates (its dead case may be killed by a line
        derived after it)."""
        out, todo, seen = set(), list(members), set()
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            kept = None
            if u in self.made:
                # Only a unit added since it was checked can make it a restatement now, and
                # only by killing one of its cases.
                formula, its, then = self.made[u]
                if self.dead_cases(formula, available - then - {u}):
                    kept = self.restates(self.term[u], formula, its, available - {u})
            if kept is None:
                out.add(u)
            else:
                todo.extend(kept)
        return frozenset(out)

    def assumed(self, formula: Node, available: frozenset) -> frozenset:
        """The units `formula` assumes as hypotheses of the goal: in each of its conjuncts
        written as a disjunction with a disjunct that entails the goal, the other disjuncts'
        negations that are equivalent to a conjunction of units (`P2 -> (P3 -> goal)`
        assumes P2 and P3)."""
        out: set = set()
        units = sorted(available)
        for part in _conjuncts(formula):
            ds = [self.z.term(d) for d in _disjuncts(part)]
            if len(ds) < 2:
                continue  # no hypothesis without a second case
            toward = [self.ask([d], self.goal) for d in ds]
            if not any(toward) or all(toward):
                continue
            for d, to_goal in zip(ds, toward):
                if to_goal:
                    continue
                hyp = z3.Not(d)
                # One check screens a hypothesis no conjunction of units could be: one the
                # units together do not give (a false case's negation, as most are).
                if not self.ask([self.term[u] for u in units], hyp):
                    continue
                kept = [u for u, yes in zip(units, self.each([hyp], [self.term[u] for u in
                                                                     units])) if yes]
                if kept and self.ask([self.term[u] for u in kept], hyp):
                    out.update(kept)
        return frozenset(out)

    def each_one_of(self, parts: list[Node], kept: frozenset) -> bool:
        """Whether each of `parts` is one kept unit's (a conjunct of it, as z3 builds terms
        shared, else entailed by it alone)."""
        pieces = set()  # z3 ids of the kept units' conjuncts
        for u in kept:
            todo = [self.term[u]]
            while todo:
                t = todo.pop()
                pieces.add(t.get_id())
                if z3.is_and(t):
                    todo.extend(t.children())
        for part in parts:
            t = self.z.term(part)
            if t.get_id() in pieces:
                continue
            if not any(self.ask([self.term[u]], t) for u in sorted(kept)):
                return False
        return True

    def fewest(self, claim, members: frozenset, most: int) -> int | None:
        """The fewest members that entail `claim`, when at most `most`; else None. The members
        together entail it (they entail the lines that were cited), so `most` or more of them
        need no search: the bound holds."""
        if len(members) <= most:
            return len(members)
        ordered = sorted(members)
        for n in range(0, most + 1):
            for group in itertools.combinations(ordered, n):
                if self.ask([self.term[u] for u in group], claim):
                    return n
        return None



def account(units: Units, i: int, formula: Node, claim, step: Step, most: int
             ) -> tuple[str, str | None]:
    """A step its citations entail: (why it passed, None) after recording what it stands
    for, or (why it fails, its flag) when it rests on more than `most` units."""
    available = frozenset(units.term)
    members = units.unpack(frozenset().union(*(units.of[(kind, k)] for kind, k in step.cites)),
                           available)
    cites = ", ".join(f"{'P' if c == 'P' else ''}{k}" for c, k in step.cites) or "nothing"
    try:
        kept = units.restates(claim, formula, members, available)
    except TooInvolved:
        if units.fewest(claim, members, most) is None:  # refused either way: say why
            return _too_many(members, most), "restated_conjunction"
        raise
    if kept is not None:
        # It stands for what it restates, whatever else holds. It is free (a conjunction put
        # together) when each of its conjuncts is one unit's; otherwise it infers, and the
        # bound holds: the determine answer is equivalent to all the premises together.
        if units.each_one_of(_conjuncts(formula), kept) or \
                units.fewest(claim, members, most) is not None:
            units.of[("S", i)] = kept
            return (f"entailed by {cites}; restates " + ", ".join(map(unit_name, sorted(kept)))
                    + " (a step citing it cites those)"), None
        return _too_many(members, most), "restated_conjunction"
    assumed = units.assumed(formula, available) - members
    if len(assumed) <= most and units.fewest(claim, members, most - len(assumed)) is not None:
        me = ("S", i)
        units.of[me], units.term[me] = frozenset({me}), claim
        units.made[me] = (formula, members, available)
        return f"entailed by {cites}", None
    if assumed and units.fewest(claim, members, most) is not None:
        return (f"assumes {', '.join(map(unit_name, sorted(assumed)))} on the way to the goal "
                f"without citing them: it rests on more than {most} lines"), "assumed_premises"
    return _too_many(members, most), "restated_conjunction"


def _too_many(members: frozenset, most: int) -> str:
    return (f"needs more than {most} of {', '.join(map(unit_name, sorted(members)))}, which "
            f"its citations restate: a step may rest on at most {most}")
