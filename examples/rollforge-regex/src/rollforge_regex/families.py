"""The procedural families: each draws one rule (its English wording, its reference pattern, its
difficulty) and makers of strings on each side of it from a seeded RNG.

The negatives are near misses (a letter among digits, the prefix one letter off, the suffix's
dot replaced), so that a pattern has to state the rule rather than approximate it. Every string
is checked against the reference on this side (our own patterns, simple and trusted), so a
maker may be sloppy: a candidate on the wrong side is drawn again.
"""
from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from typing import Callable

LOWER = string.ascii_lowercase
ALNUM = string.ascii_letters + string.digits
ALPHABET = ALNUM + "-_.@"  # what the random parts of strings are drawn from (no newline)

Maker = Callable[[random.Random], str]


@dataclass(frozen=True)
class Rule:
    """One task's rule. `text` completes "matches a string exactly when the string ..."."""

    text: str
    reference: str
    difficulty: int  # 1-3
    positive: Maker
    negative: Maker


def _tail(rng: random.Random, lo: int = 0, hi: int = 8, chars: str = ALPHABET) -> str:
    return "".join(rng.choice(chars) for _ in range(rng.randint(lo, hi)))


def _swap_one(rng: random.Random, s: str, chars: str) -> str:
    """`s` with one character replaced by a different one from `chars`."""
    i = rng.randrange(len(s))
    return s[:i] + rng.choice([c for c in chars if c != s[i]]) + s[i + 1:]


def digits(rng: random.Random) -> Rule:
    def neg(r: random.Random) -> str:
        d = _tail(r, 1, 8, string.digits)
        i = r.randint(0, len(d))
        return r.choice(["", d[:i] + r.choice(LOWER + " -.+,") + d[i:], "-" + d, d + ".5"])

    return Rule("consists only of decimal digits 0-9 (at least one)", "[0-9]+", 1,
                lambda r: _tail(r, 1, 10, string.digits), neg)


def letter(rng: random.Random) -> Rule:
    return Rule("starts with an ASCII letter (a-z or A-Z), whatever follows", "[A-Za-z].*", 1,
                lambda r: r.choice(string.ascii_letters) + _tail(r),
                lambda r: r.choice(["", r.choice(string.digits + "-_.@ ") + _tail(r)]))


def prefix(rng: random.Random) -> Rule:
    p = "".join(rng.choice(LOWER) for _ in range(rng.randint(2, 3)))

    def neg(r: random.Random) -> str:
        return r.choice([_tail(r, 1, 4) + p + _tail(r), p[:-1] + _tail(r), p.upper() + _tail(r),
                         _swap_one(r, p, LOWER) + _tail(r)])

    return Rule(f'starts with "{p}", whatever follows', re.escape(p) + ".*", 1,
                lambda r: p + _tail(r), neg)


def suffix(rng: random.Random) -> Rule:
    # The first character is a regex metacharacter half the time: an unescaped '.' or '+'
    # is the classic mistake, and the near misses below catch it.
    s = rng.choice(".-_+") + "".join(rng.choice(LOWER) for _ in range(rng.randint(2, 3)))

    def neg(r: random.Random) -> str:
        return r.choice([_tail(r) + r.choice([c for c in ALNUM if c != s[0]]) + s[1:],
                         _tail(r) + s + r.choice(ALNUM), _tail(r) + s[:-1], s + _tail(r, 1)])

    return Rule(f'ends with "{s}"', ".*" + re.escape(s), 2, lambda r: _tail(r) + s, neg)


def contains(rng: random.Random) -> Rule:
    sub = "".join(rng.choice(LOWER + string.digits) for _ in range(rng.randint(2, 4)))

    def neg(r: random.Random) -> str:
        k = r.randint(1, len(sub) - 1)
        middle = r.choice([_swap_one(r, sub, LOWER + string.digits),
                           sub[:k] + r.choice("-_.@") + sub[k:], ""])
        return _tail(r, 0, 5) + middle + _tail(r, 0, 5)

    return Rule(f'contains "{sub}" somewhere', ".*" + re.escape(sub) + ".*", 2,
                lambda r: _tail(r, 0, 5) + sub + _tail(r, 0, 5), neg)


def length(rng: random.Random) -> Rule:
    n = rng.randint(3, 8)

    def neg(r: random.Random) -> str:
        return r.choice([_tail(r, n - 1, n - 1, ALNUM), _tail(r, n + 1, n + 2, ALNUM),
                         _swap_one(r, _tail(r, n, n, ALNUM), "-_.@ ")])

    return Rule(f"is exactly {n} characters long, each an ASCII letter or digit",
                f"[A-Za-z0-9]{{{n}}}", 3, lambda r: _tail(r, n, n, ALNUM), neg)


FAMILIES: dict[str, Callable[[random.Random], Rule]] = {
    "digits": digits, "letter": letter, "prefix": prefix, "suffix": suffix,
    "contains": contains, "length": length,
}


def draw_strings(rule: Rule, rng: random.Random, n: int) -> tuple[list[str], list[str]]:
    """`n` distinct positives and `n` distinct negatives of `rule`, disjoint by construction."""
    ref = re.compile(rule.reference)
    sides: tuple[list[str], list[str]] = ([], [])
    for side, maker, want in ((sides[0], rule.positive, True), (sides[1], rule.negative, False)):
        for _ in range(100 * n):
            s = maker(rng)
            if (ref.fullmatch(s) is not None) == want and s not in side:
                side.append(s)
                if len(side) == n:
                    break
        else:
            raise RuntimeError(f"family rule {rule.reference!r}: could not draw {n} distinct "
                               f"{'positives' if want else 'negatives'}")
    return sides
