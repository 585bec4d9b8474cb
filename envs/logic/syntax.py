"""The step syntax of the logic kind: a small formal language read by our own parser.

An answer is a numbered chain, one step a line (blank lines are skipped; every other line is a
step, so prose in the answer is an unparsable step):

    1. B or C  [P1, P2]
    2. C  [1, P3]

`N.` is the step's number (1, 2, ... in order); `[...]` cites what the step follows from:
premises `P1`, `P2`, ... of the task and earlier steps `1`, `2`, ...; nothing cited (no
brackets, or `[]`) means the step must hold on its own (a tautology).

Formulas, loosest binding first (`->` groups to the right; one `<->` per level, bracket more):

    formula := imp [ "<->" imp ]
    imp     := or [ "->" imp ]
    or      := and { "or" and }
    and     := unary { "and" unary }
    unary   := "not" unary | "(" formula ")" | "true" | "false"
             | ("all" | "some") VAR "." unary        all x. (dog(x) -> mammal(x))
             | NAME "(" ARG ")"                       dog(rex), dog(x) with x bound
             | term REL term                          x + 2*y = 7, x - y >= 3
             | NAME                                   A, K_a (a proposition)
    term    := [ "-" ] prod { ("+" | "-") prod }      linear only: no var*var, no division
    prod    := INT "*" NAME | INT | NAME
    REL     := "=" | "!=" | "<" | "<=" | ">" | ">="

A NAME is `[A-Za-z_][A-Za-z0-9_]*` other than the keywords `and or not all some true false`.
Its sort comes from where it is used, and must stay the same across a task: a proposition
(`A`), an integer (`x` in a comparison), a predicate (`dog` in `dog(x)`) or an individual
(`rex` in `dog(rex)`). VAR is one of `x y z u v w`, and inside a predicate's brackets those
names are only ever bound variables. Integers are whole numbers (z3 `Int`); individuals range
over an unnamed, non-empty domain.

The parser caps what a line may cost the solver (`MAX_*` below): a longer, deeper or bigger
line is refused as unparsable, before z3 sees it.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Union

KEYWORDS = frozenset({"and", "or", "not", "all", "some", "true", "false"})
VARIABLES = frozenset({"x", "y", "z", "u", "v", "w"})
RELATIONS = ("=", "!=", "<", "<=", ">", ">=")

MAX_CHARS = 300  # one formula's text
MAX_TOKENS = 120
MAX_DEPTH = 16  # nesting of not / brackets / quantifiers
MAX_QUANTIFIERS = 2  # nested quantifiers in one formula
MAX_INT = 10 ** 6  # largest integer literal

# A formula is a tuple tree: ("true",) ("false",) ("atom", name) ("pred", p, arg, bound)
# ("not", f) ("and", fs) ("or", fs) ("imp", a, b) ("iff", a, b) ("all"|"some", var, body)
# ("cmp", rel, lhs, rhs) with terms ("lin", ((name, coef), ...), const).
Node = tuple

_TOKEN = re.compile(r"\s*(?:(<->|->|<=|>=|!=|[=<>+\-*().,])|(\d+)|([A-Za-z_][A-Za-z0-9_]*))")
_STEP = re.compile(r"^\s*(\d+)\s*\.\s*(.*?)\s*(?:\[([^\[\]]*)\])?\s*$")
_REF = re.compile(r"^(?:[Pp](\d+)|(\d+))$")

SORT_WORDS = {"bool": "a proposition", "int": "an integer", "pred": "a predicate",
              "obj": "an individual"}


class ParseError(ValueError):
    """A formula or step line outside the syntax (or over its size caps)."""


@dataclass(frozen=True)
class Step:
    """One parsed line of an answer: its number, formula text and citations (("P", 2) for the
    premise P2, ("S", 1) for step 1)."""

    number: int
    formula: str
    cites: tuple[tuple[str, int], ...]


def parse_step(line: str) -> Step:
    """`N. FORMULA [CITES]` -> Step (the formula is parsed separately)."""
    m = _STEP.match(line)
    if not m:
        raise ParseError("a step is `N. formula [cited]`")
    cites = []
    for ref in filter(None, (r.strip() for r in (m.group(3) or "").split(","))):
        r = _REF.match(ref)
        if not r:
            raise ParseError(f"cannot cite {ref!r}: cite premises as P1 and steps as 1")
        cites.append(("P", int(r.group(1))) if r.group(1) else ("S", int(r.group(2))))
    return Step(int(m.group(1)), m.group(2), tuple(cites))


def tokenize(text: str) -> list[str]:
    if len(text) > MAX_CHARS:
        raise ParseError(f"formula longer than {MAX_CHARS} characters")
    out, at, text = [], 0, text.rstrip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if not m or m.end() == at:
            raise ParseError(f"unexpected character {text[at:].lstrip()[:1]!r}")
        out.append(m.group(1) or m.group(2) or m.group(3))
        at = m.end()
        if len(out) > MAX_TOKENS:
            raise ParseError(f"formula longer than {MAX_TOKENS} tokens")
    return out


@dataclass
class _Parser:
    tokens: list[str]
    sorts: dict[str, str]
    at: int = 0
    depth: int = 0
    bound: list[str] = field(default_factory=list)

    def peek(self, k: int = 0) -> str | None:
        i = self.at + k
        return self.tokens[i] if i < len(self.tokens) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise ParseError("formula ends too early" + (f": expected {want!r}" if want else ""))
        if want is not None and tok != want:
            raise ParseError(f"expected {want!r}, got {tok!r}")
        self.at += 1
        return tok

    def use(self, name: str, sort: str) -> None:
        if name in KEYWORDS:
            raise ParseError(f"{name!r} is a keyword, not a name")
        had = self.sorts.setdefault(name, sort)
        if had != sort:
            raise ParseError(f"{name!r} is {SORT_WORDS[had]} here, not {SORT_WORDS[sort]}")

    def formula(self) -> Node:
        left = self.imp()
        if self.peek() == "<->":
            self.take()
            right = self.imp()
            if self.peek() == "<->":
                raise ParseError("bracket chains of '<->': (A <-> B) <-> C")
            return ("iff", left, right)
        return left

    def imp(self) -> Node:
        left = self.junction("or", self.conj)
        if self.peek() == "->":
            self.take()
            return ("imp", left, self.imp())
        return left

    def conj(self) -> Node:
        return self.junction("and", self.unary)

    def junction(self, word: str, part) -> Node:
        items = [part()]
        while self.peek() == word:
            self.take()
            items.append(part())
        return items[0] if len(items) == 1 else (word, tuple(items))

    def unary(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError(f"formula nested deeper than {MAX_DEPTH}")
        try:
            return self._unary()
        finally:
            self.depth -= 1

    def _unary(self) -> Node:
        tok = self.peek()
        if tok is None:
            raise ParseError("formula ends too early")
        if tok == "not":
            self.take()
            return ("not", self.unary())
        if tok == "(":
            self.take()
            f = self.formula()
            self.take(")")
            return f
        if tok in ("true", "false"):
            self.take()
            return (tok,)
        if tok in ("all", "some"):
            self.take()
            var = self.take()
            if var not in VARIABLES:
                raise ParseError(f"a quantifier binds one of {sorted(VARIABLES)}, not {var!r}")
            if len(self.bound) >= MAX_QUANTIFIERS:
                raise ParseError(f"more than {MAX_QUANTIFIERS} nested quantifiers")
            self.take(".")
            self.bound.append(var)
            try:
                return (tok, var, self.unary())
            finally:
                self.bound.pop()
        if _is_name(tok) and self.peek(1) == "(":
            return self.predicate()
        if tok.isdigit() or tok == "-" or (_is_name(tok) and self.peek(1) in (
                *RELATIONS, "+", "-", "*")):
            lhs = self.term()
            rel = self.take()
            if rel not in RELATIONS:
                raise ParseError(f"expected a comparison ({' '.join(RELATIONS)}), got {rel!r}")
            return ("cmp", rel, lhs, self.term())
        if _is_name(tok):
            self.take()
            self.use(tok, "bool")
            return ("atom", tok)
        raise ParseError(f"unexpected {tok!r}")

    def predicate(self) -> Node:
        name = self.take()
        self.take("(")
        arg = self.take()
        self.take(")")
        if not _is_name(arg):
            raise ParseError(f"a predicate applies to a name, not {arg!r}")
        self.use(name, "pred")
        if arg in self.bound:
            return ("pred", name, arg, True)
        if arg in VARIABLES:
            raise ParseError(f"{arg!r} is not bound here: bracket the quantifier's body, "
                             f"all {arg}. (... {name}({arg}) ...)")
        self.use(arg, "obj")
        return ("pred", name, arg, False)

    def term(self) -> Node:
        coefs: dict[str, int] = {}
        const = 0
        sign = 1
        if self.peek() == "-":
            self.take()
            sign = -1
        while True:
            name, k = self.product()
            if name is None:
                const += sign * k
            else:
                coefs[name] = coefs.get(name, 0) + sign * k
            if self.peek() not in ("+", "-"):
                break
            sign = 1 if self.take() == "+" else -1
        return ("lin", tuple(sorted(coefs.items())), const)

    def product(self) -> tuple[str | None, int]:
        tok = self.take()
        if tok.isdigit():
            k = int(tok)
            if k > MAX_INT:
                raise ParseError(f"integer {tok} is larger than {MAX_INT}")
            if self.peek() != "*":
                return None, k
            self.take()
            tok = self.take()
            if not _is_name(tok):
                raise ParseError(f"expected a name after '{k}*', got {tok!r}")
        elif _is_name(tok):
            k = 1
            if self.peek() == "*":
                raise ParseError("write a product as 2*x (a number times a name): the "
                                 "arithmetic is linear")
        else:
            raise ParseError(f"expected a number or a name, got {tok!r}")
        self.use(tok, "int")
        return tok, k


def _is_name(tok: str | None) -> bool:
    return tok is not None and (tok[0].isalpha() or tok[0] == "_") and tok not in KEYWORDS


def parse_formula(text: str, sorts: dict[str, str] | None = None) -> tuple[Node, dict[str, str]]:
    """The formula's tree and the sorts of its names (`sorts` given: they must agree; a copy
    extended with the new names is returned)."""
    p = _Parser(tokenize(text), dict(sorts or {}))
    if not p.tokens:
        raise ParseError("empty formula")
    f = p.formula()
    if p.peek() is not None:
        raise ParseError(f"unexpected {p.peek()!r} after a whole formula")
    return f, p.sorts


# -- evaluation in a finite model (the generators' witnesses and truth tables) ---------------

@dataclass(frozen=True)
class Model:
    """An assignment: propositions and integers by name, a finite domain of individuals and
    the extension of each predicate."""

    values: dict[str, Any] = field(default_factory=dict)
    domain: tuple[str, ...] = ()
    preds: dict[str, frozenset[str]] = field(default_factory=dict)


def holds(f: Node, m: Model, env: dict[str, str] | None = None) -> bool:
    """Whether `f` is true in `m` (quantifiers range over `m.domain`)."""
    env = env or {}
    op = f[0]
    if op in ("true", "false"):
        return op == "true"
    if op == "atom":
        return bool(m.values[f[1]])
    if op == "pred":
        who = env[f[2]] if f[3] else f[2]
        return who in m.preds.get(f[1], frozenset())
    if op == "not":
        return not holds(f[1], m, env)
    if op == "and":
        return all(holds(g, m, env) for g in f[1])
    if op == "or":
        return any(holds(g, m, env) for g in f[1])
    if op == "imp":
        return (not holds(f[1], m, env)) or holds(f[2], m, env)
    if op == "iff":
        return holds(f[1], m, env) == holds(f[2], m, env)
    if op in ("all", "some"):
        each = (holds(f[2], m, {**env, f[1]: d}) for d in m.domain)
        return all(each) if op == "all" else any(each)
    if op == "cmp":
        a, b = _value(f[2], m), _value(f[3], m)
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                ">=": a >= b}[f[1]]
    raise ValueError(f"not a formula node: {op!r}")


def _value(t: Node, m: Model) -> int:
    return sum(k * m.values[n] for n, k in t[1]) + t[2]


def atoms(f: Node) -> set[str]:
    """The propositions a formula mentions."""
    if f[0] == "atom":
        return {f[1]}
    kids: Union[tuple, list] = ()
    if f[0] in ("and", "or"):
        kids = f[1]
    elif f[0] == "not":
        kids = (f[1],)
    elif f[0] in ("imp", "iff"):
        kids = (f[1], f[2])
    elif f[0] in ("all", "some"):
        kids = (f[2],)
    return set().union(*(atoms(g) for g in kids)) if kids else set()


def tt_entails(cited: list[Node], goal: Node) -> bool:
    """Propositional entailment by truth table (the generators' search; the checker uses z3)."""
    names = sorted(set().union(atoms(goal), *(atoms(c) for c in cited)))
    for bits in itertools.product((False, True), repeat=len(names)):
        m = Model(dict(zip(names, bits)))
        if all(holds(c, m) for c in cited) and not holds(goal, m):
            return False
    return True
