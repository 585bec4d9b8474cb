"""Dict families (keys are strings, so results stay plain JSON); levels change the shape."""
from __future__ import annotations

from envs.io.families.base import Family, Level, leveled, level_of

_WORDS = ["ab", "cab", "bad", "dace", "be", "a", "cede", "bead", "ace", "dab"]


def _sentence(r, d):
    return " ".join(r.choice(_WORDS) for _ in range(r.randint(0, 3 + d)))


def _top_word(p, s):
    ws = s.split()
    return min(ws, key=lambda w: (-ws.count(w), w)) if ws else p["none"]


def _by_initial(p, s):
    out: dict[str, list[str]] = {}
    for w in sorted(set(s.split())):
        if len(w) >= p["k"]:
            out.setdefault(w[0], []).append(w)
    return out


WORD_FREQ = leveled("word_freq", "s", "dicts", _sentence, [
    Level(lambda r: {"k": r.randint(1, 3)},
          lambda p: f"Return a dict of each word of s with at least {p['k']} letters to its count.",
          lambda p: f"{{w: s.split().count(w) for w in s.split() if len(w) >= {p['k']}}}",
          lambda p, s: {w: s.split().count(w) for w in s.split() if len(w) >= p["k"]}),
    Level(lambda r: {"none": r.choice(["", "-", "none", "?"])},
          lambda p: f"Return the most frequent word of s (alphabetically first on ties), "
                    f"or {p['none']!r} if none.",
          lambda p: (f"    ws = s.split()\n    if not ws:\n        return {p['none']!r}\n"
                     f"    return min(ws, key=lambda w: (-ws.count(w), w))\n"),
          _top_word, block=True),
    Level(lambda r: {"k": r.randint(2, 3)},
          lambda p: f"Return a dict from each first letter to the sorted distinct words of s "
                    f"of {p['k']}+ letters.",
          lambda p: (f"    out = {{}}\n    for w in sorted(set(s.split())):\n"
                     f"        if len(w) >= {p['k']}:\n"
                     f"            out.setdefault(w[0], []).append(w)\n    return out\n"),
          _by_initial, block=True),
])


def _str_dict(r, d):
    keys = r.sample(["x", "y", "z", "u", "v", "w", "p", "q"], r.randint(0, 3 + d))
    if level_of(d, 3) == 2:  # values must be unique to swap them
        return dict(zip(keys, r.sample("abcdefgh", len(keys))))
    return {k: r.choice("abcd") for k in keys}


def _grouped(p, d):
    out: dict[str, list[str]] = {}
    for k in sorted(d):
        out.setdefault(d[k], []).append(k)
    return {v: ks for v, ks in out.items() if len(ks) >= p["k"]}


INVERT = leveled("invert", "d", "dicts", _str_dict, [
    Level(lambda r: {"v": r.choice("abcd")},
          lambda p: f"Return how many values of d are {p['v']!r}.",
          lambda p: f"list(d.values()).count({p['v']!r})",
          lambda p, d: list(d.values()).count(p["v"])),
    Level(lambda r: {"v": r.choice("abcd")},
          lambda p: f"Return d with keys and values swapped (values are unique), leaving "
                    f"out value {p['v']!r}.",
          lambda p: f"{{v: k for k, v in d.items() if v != {p['v']!r}}}",
          lambda p, d: {v: k for k, v in d.items() if v != p["v"]}),
    Level(lambda r: {"k": r.randint(1, 2)},
          lambda p: f"Return a dict from each value of d to its sorted keys, for values of "
                    f"{p['k']}+ keys.",
          lambda p: (f"    out = {{}}\n    for k in sorted(d):\n"
                     f"        out.setdefault(d[k], []).append(k)\n"
                     f"    return {{v: ks for v, ks in out.items() if len(ks) >= {p['k']}}}\n"),
          _grouped, block=True),
])


def _int_dict(r, d):
    keys = r.sample(["x", "y", "z", "u", "v", "w", "p", "q"], r.randint(0, 3 + d))
    return {k: r.randint(-5, 15) for k in keys}


SCORES = leveled("scores", "d", "dicts", _int_dict, [
    Level(lambda r: {"k": r.randint(0, 9)},
          lambda p: f"Return the sum of the values of d that are above {p['k']}.",
          lambda p: f"sum(v for v in d.values() if v > {p['k']})",
          lambda p, d: sum(v for v in d.values() if v > p["k"])),
    Level(lambda r: {"k": r.randint(0, 9)},
          lambda p: f"Return d without the items whose value is below {p['k']}.",
          lambda p: f"{{k: v for k, v in d.items() if v >= {p['k']}}}",
          lambda p, d: {k: v for k, v in d.items() if v >= p["k"]}),
    Level(lambda r: {"k": r.randint(2, 3)},
          lambda p: f"Return the {p['k']} keys of d with the largest values, ties broken "
                    f"alphabetically.",
          lambda p: f"sorted(d, key=lambda k: (-d[k], k))[:{p['k']}]",
          lambda p, d: sorted(d, key=lambda k: (-d[k], k))[: p["k"]]),
])


def _two_dicts(r, d):
    keys = ["x", "y", "z", "u", "v"]
    return [{k: r.randint(-5, 15) for k in r.sample(keys, r.randint(0, 1 + min(d, 3)))}
            for _ in range(2)]


MERGE = leveled("merge", "a, b", "dicts", _two_dicts, [
    Level(lambda r: {"key": r.choice("xyz")},
          lambda p: f"Return a merged with b (b wins on shared keys), without key {p['key']!r}.",
          lambda p: f"{{k: v for k, v in {{**a, **b}}.items() if k != {p['key']!r}}}",
          lambda p, a, b: {k: v for k, v in {**a, **b}.items() if k != p["key"]}),
    Level(lambda r: {"k": r.randint(2, 5)},
          lambda p: f"Return a dict of every key of a or b to {p['k']} times the sum of its "
                    f"values there.",
          lambda p: f"{{k: {p['k']} * (a.get(k, 0) + b.get(k, 0)) for k in {{**a, **b}}}}",
          lambda p, a, b: {k: p["k"] * (a.get(k, 0) + b.get(k, 0)) for k in {**a, **b}}),
    Level(lambda r: {"k": r.randint(0, 9)},
          lambda p: f"Return the sorted keys in exactly one of a and b whose value there "
                    f"exceeds {p['k']}.",
          lambda p: f"sorted(k for k in a.keys() ^ b.keys() if {{**a, **b}}[k] > {p['k']})",
          lambda p, a, b: sorted(k for k in a.keys() ^ b.keys() if {**a, **b}[k] > p["k"])),
])

MAPS: list[Family] = [WORD_FREQ, INVERT, SCORES, MERGE]
