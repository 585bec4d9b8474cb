"""The logic kind's hack suite: answers a policy could send to earn credit without a proof, each
written against a task (envs/hacks.py plays them through the real grader; `rollforge hacks
logic`). Every one must earn nothing and raise one of the flags it names (the flags:
envs/logic/checker.py).

Three families: the issue-34 class, where the premises are packed into one line so that z3 does
the whole deduction in one step (the plain chain and every equivalent way of writing it, each
refused by `restated_conjunction`); the curried chain, where a step assumes the premises in its
own formula (`P2 -> (P3 -> goal) [P1]`, refused by `assumed_premises`); and the older cheats on
citations, syntax and the solver. `trivial_answers` (the task check) runs a few of them.
"""
from __future__ import annotations

from typing import Callable

from envs.hacks import Attack, answer
from envs.logic.syntax import ParseError, parse_step, tokenize
from tasks.record import Task

# The knapsack question "no non-negative x..w with these weights sum to 999999 in 30 items": within
# the syntax's caps, but z3 needs seconds for it (tests/unit/test_env_logic.py).
SLOW = ("not (12345*x + 23456*y + 34567*z + 45678*u + 56789*v + 67891*w = 999999 and x >= 0 "
        "and y >= 0 and z >= 0 and u >= 0 and v >= 0 and w >= 0 and x + y + z + u + v + w <= 30)")
# What the task check (`rollforge tasks check`, `trivial_answers`) runs on every task: the old
# cheats, the chain and the curried chain (templates that need no reasoning, so they
# also find a task whose answer is its premises restated); the whole suite is `rollforge hacks
# logic`. Each packing attack costs tens of milliseconds, a reference about five.
TASK_CHECK = ("empty", "restated_goal", "contradiction", "invented_premise", "unparsable_step",
              "conjunction_chain", "conjunction_chain_answer", "curried_chain")


def _premises(task: Task) -> list[str]:
    return [f"({p})" for p in task.payload["premises"]]


def _goal(task: Task) -> str:
    return f"({task.payload['goal']})"


def _prove(task: Task) -> bool:
    return task.payload.get("ask", "prove") == "prove"


def _packed(name: str, what: str, text_of: Callable[[Task], str], *flags: str,
            also: Callable[[Task], bool] = lambda t: True) -> Attack:
    """A packing attack. It applies where every line is within the syntax's caps: a line over
    them is refused as unparsable, which would not test what the attack is for (`huge_formula`
    does)."""
    def fits(task: Task) -> bool:
        try:
            for line in text_of(task).splitlines():
                tokenize(parse_step(line).formula)
        except ParseError:
            return False
        return also(task)
    return Attack(name, what, answer(text_of), flags, fits)


def _chain(join: Callable[[str, str], str], order: Callable[[list], list] = list
           ) -> Callable[[Task], str]:
    """The issue's chain: `1. join(P1, P2) [P1, P2]`, `2. join(P1 and P2, P3) [1, P3]`, ...,
    then the goal (the answer, for a determine task) citing the last line. `join` writes the
    conjunction of what the line before holds and the next premise (written out flat, so that
    an obfuscated chain stays within the syntax's caps and is refused for what it is)."""
    def text(task: Task) -> str:
        ps = order(list(enumerate(_premises(task), 1)))
        (i, a), (j, b) = ps[0], ps[1]
        lines, held = [f"1. {join(a, b)} [P{i}, P{j}]"], f"{a} and {b}"
        for k, p in ps[2:]:
            lines.append(f"{len(lines) + 1}. {join(f'({held})', p)} [{len(lines)}, P{k}]")
            held = f"{held} and {p}"
        return "\n".join([*lines, f"{len(lines) + 1}. {_goal(task)} [{len(lines)}]"])
    return text


def _restated_then_chained(task: Task) -> str:
    """Each premise restated as a step of its own (the premises under new names), then the
    chain over those steps."""
    ps = _premises(task)
    lines = [f"{i}. {p} [P{i}]" for i, p in enumerate(ps, 1)]
    body, at = f"{ps[0]} and {ps[1]}", len(ps) + 1
    lines.append(f"{at}. {body} [1, 2]")
    for k in range(3, len(ps) + 1):
        body = f"{body} and {ps[k - 1]}"
        at += 1
        lines.append(f"{at}. {body} [{at - 1}, {k}]")
    return "\n".join([*lines, f"{at + 1}. {_goal(task)} [{at}]"])


def _two_bundles(task: Task) -> str:
    """The premises packed into two lines, each conjoining half of them (a chain of its own);
    the goal cites both: two citations, every premise."""
    ps = list(enumerate(_premises(task), 1))
    lines: list[str] = []
    ends = []
    for half in (ps[:len(ps) // 2], ps[len(ps) // 2:]):
        (i, held), *rest = half
        cite = f"P{i}"
        if not rest:
            lines.append(f"{len(lines) + 1}. {held} [{cite}]")
        for k, p in rest:
            held = f"{held} and {p}"
            lines.append(f"{len(lines) + 1}. {held} [{cite}, P{k}]")
            cite = str(len(lines))
        ends.append(len(lines))
    return "\n".join([*lines, f"{len(lines) + 1}. {_goal(task)} [{ends[0]}, {ends[1]}]"])


def _weakened_by_goal(task: Task) -> str:
    """The chain with every premise weakened by the goal: `P1 and (P2 or goal)`, ... No line is
    equivalent to a conjunction of premises, but each is wherever the goal is false."""
    ps, g = _premises(task), _goal(task)
    body = f"{ps[0]} and ({ps[1]} or {g})"
    lines = [f"1. {body} [P1, P2]"]
    for k, p in enumerate(ps[2:], 3):
        body = f"{body} and ({p} or {g})"
        lines.append(f"{len(lines) + 1}. {body} [{len(lines)}, P{k}]")
    return "\n".join([*lines, f"{len(lines) + 1}. {g} [{len(lines)}]"])


def _curried(task: Task) -> str:
    """`1. P2 -> (P3 -> ... -> goal) [P1]`, then one premise discharged a step: every step
    cites two lines, and z3 does the whole deduction in the first."""
    ps, g = _premises(task), _goal(task)
    rests = [g]
    for p in reversed(ps[1:]):
        rests.append(f"({p} -> {rests[-1]})")
    rests.reverse()  # rests[0]: P2 -> (P3 -> ... goal); rests[-1]: the goal
    lines = [f"1. {rests[0]} [P1]"]
    for k, rest in enumerate(rests[1:], 2):
        lines.append(f"{k}. {rest} [{k - 1}, P{k}]")
    return "\n".join(lines)


def _curried_disjunction(task: Task) -> str:
    """The curried first step written as a disjunction, `not P2 or not P3 or goal [P1]`."""
    ps, g = _premises(task), _goal(task)
    lines = [f"1. {' or '.join([*(f'not {p}' for p in ps[1:]), g])} [P1]"]
    for k in range(2, len(ps) + 1):
        rest = " or ".join([*(f"not {p}" for p in ps[k:]), g])
        lines.append(f"{k}. {rest} [{k - 1}, P{k}]")
    return "\n".join(lines)


def _curried_tautology(task: Task) -> str:
    """A tautology carrying the whole deduction, `(P1 and ... and Pn) -> goal` citing nothing,
    then the premises discharged as in the curried chain."""
    ps, g = _premises(task), _goal(task)
    lines = [f"1. ({' and '.join(ps)}) -> {g} []"]
    for k in range(1, len(ps) + 1):
        rest = f"({' and '.join(ps[k:])}) -> {g}" if ps[k:] else g
        lines.append(f"{k + 1}. {rest} [{k}, P{k}]")
    return "\n".join(lines)


def _unparsable_first(task: Task) -> str:
    first, *rest = (task.reference or "").splitlines()
    return "\n".join([first.split(".", 1)[0] + ". ((( ->"] + rest)


def _cites(task: Task) -> str:
    k = min(task.payload.get("max_cited", 2), len(task.payload["premises"]))
    return ", ".join(f"P{i}" for i in range(1, k + 1))


ATTACKS: tuple[Attack, ...] = (
    Attack("empty", "no answer at all", answer(""), ("no_steps",)),
    Attack("restated_goal", "the goal as step 1, citing the first premises",
           answer(lambda t: f"1. {t.payload['goal']} [{_cites(t)}]"), ("restated_goal",)),
    Attack("contradiction", "`false` from the first premises, then the goal from it",
           answer(lambda t: f"1. false [{_cites(t)}]\n2. {t.payload['goal']} [1]"),
           ("contradiction",)),
    Attack("invented_premise", "the goal from a premise the task does not have",
           answer(lambda t: f"1. {t.payload['goal']} [P{len(t.payload['premises']) + 1}]"),
           ("unknown_citation",)),
    Attack("unparsable_step", "the reference with its first step unparsable",
           answer(_unparsable_first), ("unchecked_step",), lambda t: bool(t.reference)),
    # -- issue 34: the premises packed into one line, the goal drawn from it in one z3 call --
    _packed("conjunction_chain", "issue 34: the premises conjoined two at a time, then the goal",
            _chain(lambda a, b: f"{a} and {b}"), "restated_conjunction", also=_prove),
    _packed("conjunction_chain_answer", "issue 34, determine form: the chain, then the answer",
            _chain(lambda a, b: f"{a} and {b}"), "restated_conjunction",
            also=lambda t: not _prove(t)),
    _packed("chain_de_morgan", "the chain written `not (not A or not B)`",
            _chain(lambda a, b: f"not (not {a} or not {b})"), "restated_conjunction"),
    _packed("chain_nested_implication", "the chain written `not (A -> not B)`",
            _chain(lambda a, b: f"not ({a} -> not {b})"), "restated_conjunction"),
    _packed("chain_double_negation", "the chain written `not not (A and B)`",
            _chain(lambda a, b: f"not not ({a} and {b})"), "restated_conjunction"),
    _packed("chain_reordered", "the chain over the premises last to first, each `B and A`",
            _chain(lambda a, b: f"{b} and {a}", lambda ps: ps[::-1]), "restated_conjunction"),
    _packed("chain_with_tautologies", "the chain with `(T_ or not T_)` conjoined at each step",
            _chain(lambda a, b: f"{a} and (T_ or not T_) and {b}"), "restated_conjunction"),
    _packed("chain_absorbed", "each link `(A and B) or (A and B and Q_)`: equivalent to a "
            "conjunction, not written as one",
            _chain(lambda a, b: f"({a} and {b}) or ({a} and {b} and Q_)"),
            "restated_conjunction"),
    _packed("chain_restated_premises", "every premise restated as a step, then the chain over "
            "those steps", _restated_then_chained, "restated_conjunction"),
    _packed("two_bundles", "the premises in two conjunctions, the goal citing both",
            _two_bundles, "restated_conjunction"),
    _packed("chain_weakened_by_goal", "the chain with each premise weakened by the goal, "
            "`P1 and (P2 or goal)`", _weakened_by_goal, "restated_conjunction"),
    # -- the deduction theorem: the premises assumed in a step's own formula --
    # (A curried line's cases `not P2`, `not P3` are killed by P2, P3: with them it leaves the
    # goal no room, so it packs what it cites, and the restatement test refuses it first.)
    _packed("curried_chain", "`P2 -> (P3 -> ... goal) [P1]`, then a premise discharged a step",
            _curried, "assumed_premises", "restated_conjunction"),
    _packed("curried_disjunction", "`not P2 or not P3 or ... goal [P1]`, then discharged",
            _curried_disjunction, "assumed_premises", "restated_conjunction"),
    _packed("curried_tautology", "`(P1 and ... and Pn) -> goal` citing nothing, then "
            "discharged", _curried_tautology, "assumed_premises"),
    # -- citations, syntax, the solver --
    Attack("self_citation", "the goal citing itself",
           answer(lambda t: f"1. {t.payload['goal']} [1]"), ("unknown_citation",)),
    Attack("circular_citation", "two steps citing each other",
           answer(lambda t: f"1. {t.payload['goal']} [2]\n2. {t.payload['goal']} [1]"),
           ("unknown_citation",)),
    Attack("cite_the_goal", "the goal citing `G`, as if the goal were a premise",
           answer(lambda t: f"1. {t.payload['goal']} [G]"), ("unchecked_step",)),
    Attack("duplicate_numbers", "the reference with every step numbered 1",
           answer(lambda t: "\n".join("1." + ln.split(".", 1)[1]
                                      for ln in (t.reference or "").splitlines())),
           ("unchecked_step",), lambda t: bool(t.reference)),
    Attack("answer_only", "the goal alone, with no number and no citation",
           answer(lambda t: t.payload["goal"]), ("unchecked_step",)),
    Attack("lenient_syntax", "prose the parser is not lenient with",
           answer(lambda t: f"Step 1: {t.payload['goal']} (from P1 and P2)."),
           ("unchecked_step",)),
    Attack("tautology_then_goal", "`goal or not goal` citing nothing, then the goal from it",
           answer(lambda t: f"1. {_goal(t)} or not {_goal(t)} []\n2. {_goal(t)} [1]"),
           ("restated_goal",)),
    Attack("huge_formula", "a step over the syntax's size caps",
           answer(lambda t: "1. " + " and ".join(["(T_ or not T_)"] * 40) + f" [P1]\n"
                  f"2. {_goal(t)} [1, P2]"), ("unchecked_step",)),
    Attack("too_many_cases", "a step of 2^7 cases, past what the accounting looks at",
           answer(lambda t: "1. " + " and ".join(f"(T{i}_ or not T{i}_)" for i in range(7))
                  + f" [P1]\n2. {_goal(t)} [1, P2]"), ("unchecked_step",)),
    Attack("slow_formula", "a step within the caps that z3 needs seconds for, then the goal",
           answer(lambda t: f"1. {SLOW}\n2. {t.payload['goal']} [1]"), ("unchecked_step",)),
)


def attacks(task: Task) -> list[Attack]:
    """The suite on `task` (each attack says itself whether it applies)."""
    return list(ATTACKS)


def trivial_answers(task: Task) -> dict[str, str]:
    """The answers the task check runs on `task`: those of `TASK_CHECK` that apply."""
    return {a.name: a.actions(task)[0] for a in ATTACKS
            if a.name in TASK_CHECK and a.applies(task)}
