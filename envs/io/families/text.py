"""String families; each difficulty level is a different problem shape."""
from __future__ import annotations

from envs.io.families.base import Family, Level, leveled, level_of

_WORDS = ["ab", "cab", "bad", "dace", "be", "a", "cede", "bead", "ace", "dab", "fade", "ebb"]


def _sentence(r, d):
    return " ".join(r.choice(_WORDS) for _ in range(r.randint(0, 2 + d)))


def _chars(r, d, alphabet="abcdefg"):
    return "".join(r.choice(alphabet) for _ in range(r.randint(0, 4 + 2 * d)))


REVERSE = leveled("reverse", "s", "strings",
                  lambda r, d: _chars(r, d) if level_of(d, 3) == 1 else _sentence(r, d), [
    Level(lambda r: {"k": r.randint(2, 5)},
          lambda p: f"Return the last {p['k']} characters of s, reversed.",
          lambda p: f"s[::-1][:{p['k']}]", lambda p, s: s[::-1][: p["k"]]),
    Level(lambda r: {"sep": r.choice(["-", ",", "_", "+"])},
          lambda p: f"Return the words of s in reverse order, joined by {p['sep']!r}.",
          lambda p: f"{p['sep']!r}.join(s.split()[::-1])",
          lambda p, s: p["sep"].join(s.split()[::-1])),
    Level(lambda r: {"k": r.randint(2, 4)},
          lambda p: f"Return s with each word of at least {p['k']} letters reversed, "
                    f"words joined by ' '.",
          lambda p: f"' '.join(w[::-1] if len(w) >= {p['k']} else w for w in s.split())",
          lambda p, s: " ".join(w[::-1] if len(w) >= p["k"] else w for w in s.split())),
])


def _shift(c, k, base):
    return chr((ord(c) - base + k) % 26 + base)


def _caesar_in(r, d):
    lv = level_of(d, 3)
    alphabet = {1: "abcxyz", 2: "abcxyz 1!", 3: "abcxyzABXYZ 1!"}[lv]
    return "".join(r.choice(alphabet) for _ in range(r.randint(1, 5 + 2 * d)))


CAESAR = leveled("caesar", "s", "strings", _caesar_in, [
    Level(lambda r: {"k": r.randint(1, 25)},
          lambda p: f"Return s (lowercase letters) with each letter moved {p['k']} places "
                    f"on in a-z, wrapping.",
          lambda p: f"''.join(chr((ord(c) - 97 + {p['k']}) % 26 + 97) for c in s)",
          lambda p, s: "".join(_shift(c, p["k"], 97) for c in s)),
    Level(lambda r: {"k": r.randint(1, 25)},
          lambda p: f"Return s with each letter a-z moved {p['k']} places on, wrapping; "
                    f"other characters stay.",
          lambda p: f"''.join(chr((ord(c) - 97 + {p['k']}) % 26 + 97) if 'a' <= c <= 'z' "
                    f"else c for c in s)",
          lambda p, s: "".join(_shift(c, p["k"], 97) if "a" <= c <= "z" else c for c in s)),
    Level(lambda r: {"k": r.randint(1, 25)},
          lambda p: f"Return s with each ASCII letter moved {p['k']} places on, wrapping and "
                    f"keeping case; other characters stay.",
          lambda p: (f"    out = ''\n    for c in s:\n"
                     f"        base = 65 if 'A' <= c <= 'Z' else 97 if 'a' <= c <= 'z' else 0\n"
                     f"        out += chr((ord(c) - base + {p['k']}) % 26 + base) if base else c\n"
                     f"    return out\n"),
          lambda p, s: "".join(_shift(c, p["k"], 65) if "A" <= c <= "Z" else
                               _shift(c, p["k"], 97) if "a" <= c <= "z" else c for c in s),
          block=True),
])


def _pick_chars(r):
    return {"cs": "".join(sorted(r.sample("abcdefg", r.randint(2, 4))))}


def _rotate_chars(p, s):
    cs = p["cs"]
    return "".join(cs[(cs.index(c) + 1) % len(cs)] if c in cs else c for c in s)


CHARSET = leveled("charset", "s", "strings", _chars, [
    Level(_pick_chars, lambda p: f"Return how many characters of s are in {p['cs']!r}.",
          lambda p: f"sum(c in {p['cs']!r} for c in s)",
          lambda p, s: sum(c in p["cs"] for c in s)),
    Level(_pick_chars, lambda p: f"Return s with every character in {p['cs']!r} removed.",
          lambda p: f"''.join(c for c in s if c not in {p['cs']!r})",
          lambda p, s: "".join(c for c in s if c not in p["cs"])),
    Level(_pick_chars,
          lambda p: f"Return s with each character in {p['cs']!r} replaced by the next one "
                    f"there (the last by the first).",
          lambda p: (f"    cs = {p['cs']!r}\n"
                     f"    return ''.join(cs[(cs.index(c) + 1) % len(cs)] if c in cs else c "
                     f"for c in s)\n"),
          _rotate_chars, block=True),
])

ACRONYM = leveled("acronym", "s", "strings", _sentence, [
    Level(lambda r: {"sep": r.choice(["", ".", "-", " "])},
          lambda p: f"Return the first letter of each word of s, joined by {p['sep']!r}.",
          lambda p: f"{p['sep']!r}.join(w[0] for w in s.split())",
          lambda p, s: p["sep"].join(w[0] for w in s.split())),
    Level(lambda r: {"k": r.randint(1, 3)},
          lambda p: f"Return the upper-cased first letters of the words of s longer than "
                    f"{p['k']} letters.",
          lambda p: f"''.join(w[0].upper() for w in s.split() if len(w) > {p['k']})",
          lambda p, s: "".join(w[0].upper() for w in s.split() if len(w) > p["k"])),
    Level(lambda r: {"c": r.choice("abcde")},
          lambda p: f"Return the distinct words of s containing {p['c']!r}, sorted by length, "
                    f"then alphabetically.",
          lambda p: f"sorted({{w for w in s.split() if {p['c']!r} in w}}, key=lambda w: (len(w), w))",
          lambda p, s: sorted({w for w in s.split() if p["c"] in w}, key=lambda w: (len(w), w))),
])

TEXT: list[Family] = [REVERSE, CAESAR, CHARSET, ACRONYM]
