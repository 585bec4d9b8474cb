"""What a procedural task family is, and a helper for families whose difficulty changes structure.

A family is a small table row: how its constants are drawn at a difficulty, the docstring
sentence, the reference body, the semantics used to compute expected outputs, and how test
inputs are drawn. The constants of a task appear in its docstring, so a policy must read the
prompt, not memorise a family.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

Params = dict[str, Any]
Rng = random.Random

# In a block body, this token stands for the task's own function name (recursive families).
SELF = "__self__"


@dataclass(frozen=True)
class Family:
    name: str
    arg: str  # parameter list of the signature: "x", or "xs, ys" for several arguments
    draw_params: Callable[[Rng, int], Params]  # (rng, difficulty) -> params
    sentence: Callable[[Params], str]
    body: Callable[[Params], str]  # the expression after `return `, or the whole body if block
    fn: Callable[..., Any]  # semantics: (params, *args) -> output, plain JSON values only
    draw_input: Callable[[Rng, int], Any]  # one argument, or a list of them for several
    block: bool = False  # body is indented statements, not an expression
    category: str = "basic"
    levels: int = 0  # how many structurally different difficulty levels (0: only sizes grow)
    # Verification-only: its tasks ship hidden tests and a docstring example but no reference
    # solution, so a warm start never imitates one; only the RL loop (reward from executing the
    # tests) can teach it. `body` stays the checked solution for the suite's own quality tests.
    verify_only: bool = False
    # A family that asks for another family's programs (verify.py's reworded and renamed ones)
    # names that family here: a task's train/held-out side is then drawn from that family's name
    # and the constants, so the same constants sit on the same side in both and nothing trained
    # on in one is held out in the other.
    split_as: str | None = None
    # The function name its prompts use (default: the family's own name). verify.py's longer
    # families ask for a basic family's program under that family's own name.
    function_name: str | None = None

    @property
    def n_args(self) -> int:
        return len([a for a in self.arg.split(",") if a.strip()])

    def reference(self, params: Params, fname: str) -> str | None:
        """The solution shipped with a task: None for a verification-only family."""
        return None if self.verify_only else self.solution(params, fname)

    def solution(self, params: Params, fname: str) -> str:
        """The known-good body (also for verification-only families, for checking the suite)."""
        if self.block:
            return self.body(params).replace(SELF, fname)
        return f"    return {self.body(params)}\n"


@dataclass(frozen=True)
class Level:
    """One difficulty level of a leveled family: its own constants, wording, solution, semantics."""

    draw: Callable[[Rng], Params]
    sentence: Callable[[Params], str]
    body: Callable[[Params], str]  # expression, or statements when `block`
    fn: Callable[..., Any]
    block: bool = False


def distinct_params(draw: Callable[[], dict], n: int) -> list[dict]:
    """Up to `n` parameter sets from `draw()` with no two alike, in draw order; gives up after
    `10 * n` draws (a family with fewer distinct settings yields what it has)."""
    seen: set[str] = set()
    out: list[dict] = []
    for _ in range(n * 10):
        params = draw()
        key = repr(sorted(params.items()))
        if key in seen:
            continue
        seen.add(key)
        out.append(params)
        if len(out) == n:
            break
    return out


def level_of(difficulty: int, n_levels: int) -> int:
    """Difficulty 1..n picks that level; higher difficulties keep the top level (inputs grow)."""
    return max(1, min(difficulty, n_levels))


def leveled(name: str, arg: str, category: str, draw_input: Callable[[Rng, int], Any],
            levels: Sequence[Level]) -> Family:
    """A family whose difficulty picks a different problem structure, not just bigger constants."""
    lv = lambda p: levels[p["lv"] - 1]  # noqa: E731

    def draw_params(rng: Rng, d: int) -> Params:
        n = level_of(d, len(levels))
        return {"lv": n, **levels[n - 1].draw(rng)}

    def body(p: Params) -> str:
        b = lv(p).body(p)
        return b if lv(p).block else f"    return {b}\n"

    return Family(name=name, arg=arg, draw_params=draw_params,
                  sentence=lambda p: lv(p).sentence(p), body=body,
                  fn=lambda p, *args: lv(p).fn(p, *args), draw_input=draw_input,
                  block=True, category=category, levels=len(levels))
