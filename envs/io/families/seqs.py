"""List families; each difficulty level is a different problem shape."""
from __future__ import annotations

from envs.io.families.base import Family, Level, leveled


def _ints(r, d, lo=-9, hi=20, n_max=None):
    return [r.randint(lo, hi) for _ in range(r.randint(0, n_max or 3 + d))]


def _kth_largest(p, xs):
    vs = sorted(set(xs), reverse=True)
    return vs[p["k"] - 1] if len(vs) >= p["k"] else None


EXTREMES = leveled("extremes", "xs", "lists", _ints, [
    Level(lambda r: {"k": r.randint(-9, 9)},
          lambda p: f"Return the largest item of xs, or {p['k']} if xs is empty.",
          lambda p: f"max(xs, default={p['k']})", lambda p, xs: max(xs, default=p["k"])),
    Level(lambda r: {"k": r.randint(-9, 9)},
          lambda p: f"Return the largest item of xs minus the smallest, or {p['k']} if xs "
                    f"is empty.",
          lambda p: f"max(xs) - min(xs) if xs else {p['k']}",
          lambda p, xs: max(xs) - min(xs) if xs else p["k"]),
    Level(lambda r: {"k": r.randint(2, 3)},
          lambda p: f"Return the {'second' if p['k'] == 2 else 'third'} largest distinct item of xs, or None if there "
                    f"is none.",
          lambda p: (f"    vs = sorted(set(xs), reverse=True)\n"
                     f"    return vs[{p['k'] - 1}] if len(vs) >= {p['k']} else None\n"),
          _kth_largest, block=True),
])

WINDOWS = leveled("windows", "xs", "lists", _ints, [
    Level(lambda r: {"k": r.randint(1, 20)},
          lambda p: f"Return the running totals of xs, each plus {p['k']}.",
          lambda p: f"[{p['k']} + sum(xs[:i + 1]) for i in range(len(xs))]",
          lambda p, xs: [p["k"] + sum(xs[: i + 1]) for i in range(len(xs))]),
    Level(lambda r: {"k": r.randint(2, 3)},
          lambda p: f"Return the sums of each run of {p['k']} consecutive items of xs.",
          lambda p: f"[sum(xs[i:i + {p['k']}]) for i in range(len(xs) - {p['k'] - 1})]",
          lambda p, xs: [sum(xs[i:i + p["k"]]) for i in range(len(xs) - p["k"] + 1)]),
    Level(lambda r: {"k": r.randint(2, 3)},
          lambda p: f"Return the largest sum of {p['k']} consecutive items of xs, or None if "
                    f"xs is shorter.",
          lambda p: f"max((sum(xs[i:i + {p['k']}]) for i in range(len(xs) - {p['k'] - 1})), "
                    f"default=None)",
          lambda p, xs: max((sum(xs[i:i + p["k"]]) for i in range(len(xs) - p["k"] + 1)),
                            default=None)),
])

DEDUPE = leveled("dedupe", "xs", "lists", lambda r, d: _ints(r, d, 0, 6, 4 + 2 * d), [
    Level(lambda r: {"k": r.randint(0, 3)},
          lambda p: f"Return the distinct items of xs above {p['k']}, in increasing order.",
          lambda p: f"sorted({{v for v in xs if v > {p['k']}}})",
          lambda p, xs: sorted({v for v in xs if v > p["k"]})),
    Level(lambda r: {"k": r.randint(1, 3)},
          lambda p: f"Return the items of xs of at least {p['k']}, without repeats, "
                    f"in first-seen order.",
          lambda p: f"list(dict.fromkeys(v for v in xs if v >= {p['k']}))",
          lambda p, xs: list(dict.fromkeys(v for v in xs if v >= p["k"]))),
    Level(lambda r: {"k": r.randint(1, 2)},
          lambda p: f"Return the items occurring exactly {p['k']} times in xs, each once, "
                    f"in first-seen order.",
          lambda p: f"[v for v in dict.fromkeys(xs) if xs.count(v) == {p['k']}]",
          lambda p, xs: [v for v in dict.fromkeys(xs) if xs.count(v) == p["k"]]),
])

SORT_BY = leveled("sort_by", "xs", "lists", _ints, [
    Level(lambda r: {"k": r.randint(1, 3)},
          lambda p: f"Return the {p['k']} largest items of xs, largest first.",
          lambda p: f"sorted(xs, reverse=True)[:{p['k']}]",
          lambda p, xs: sorted(xs, reverse=True)[: p["k"]]),
    Level(lambda r: {"k": r.randint(-5, 10)},
          lambda p: f"Return xs sorted by distance from {p['k']}, ties keeping their order.",
          lambda p: f"sorted(xs, key=lambda v: abs(v - {p['k']}))",
          lambda p, xs: sorted(xs, key=lambda v: abs(v - p["k"]))),
    Level(lambda r: {"k": r.randint(2, 5)},
          lambda p: f"Return xs sorted by remainder mod {p['k']}, then by value, largest first.",
          lambda p: f"sorted(xs, key=lambda v: (v % {p['k']}, -v))",
          lambda p, xs: sorted(xs, key=lambda v: (v % p["k"], -v))),
])


def _rotate(p, xs):
    if not xs:
        return []
    k = p["k"] % len(xs)
    return xs[k:] + xs[:k]


CHUNK = leveled("chunk", "xs", "lists", _ints, [
    Level(lambda r: {"k": r.randint(2, 4)},
          lambda p: f"Return every {p['k']}-th item of xs, starting with the first.",
          lambda p: f"xs[::{p['k']}]", lambda p, xs: xs[:: p["k"]]),
    Level(lambda r: {"k": r.randint(2, 4)},
          lambda p: f"Return xs cut into lists of {p['k']} items (the last may be shorter).",
          lambda p: f"[xs[i:i + {p['k']}] for i in range(0, len(xs), {p['k']})]",
          lambda p, xs: [xs[i:i + p["k"]] for i in range(0, len(xs), p["k"])]),
    Level(lambda r: {"k": r.randint(2, 9)},
          lambda p: f"Return xs rotated left by {p['k']} places (wrapping; [] stays []).",
          lambda p: (f"    if not xs:\n        return []\n    k = {p['k']} % len(xs)\n"
                     f"    return xs[k:] + xs[:k]\n"),
          _rotate, block=True),
])


def _interleave(p, xs, ys):
    out = []
    for a, b in zip(xs, ys):
        out += [a, b]
    n = min(len(xs), len(ys))
    return [v for v in out + xs[n:] + ys[n:] if v != p["k"]]


ZIP_LISTS = leveled("zip_lists", "xs, ys", "lists",
                    lambda r, d: [_ints(r, d, 0, 9), _ints(r, d, 0, 9)], [
    Level(lambda r: {"k": r.randint(1, 9)},
          lambda p: f"Return the pairwise sums of xs and ys plus {p['k']}, up to the shorter "
                    f"length.",
          lambda p: f"[a + b + {p['k']} for a, b in zip(xs, ys)]",
          lambda p, xs, ys: [a + b + p["k"] for a, b in zip(xs, ys)]),
    Level(lambda r: {"k": r.randint(0, 4)},
          lambda p: f"Return the items of xs that are in ys and greater than {p['k']}, "
                    f"in order, without repeats.",
          lambda p: f"[v for i, v in enumerate(xs) if v in ys and v > {p['k']} and v not in xs[:i]]",
          lambda p, xs, ys: [v for i, v in enumerate(xs)
                             if v in ys and v > p["k"] and v not in xs[:i]]),
    Level(lambda r: {"k": r.randint(0, 9)},
          lambda p: f"Return xs and ys interleaved, then the rest of the longer, without "
                    f"items equal to {p['k']}.",
          lambda p: (f"    out = []\n    for a, b in zip(xs, ys):\n        out += [a, b]\n"
                     f"    n = min(len(xs), len(ys))\n"
                     f"    return [v for v in out + xs[n:] + ys[n:] if v != {p['k']}]\n"),
          _interleave, block=True),
])

SEQS: list[Family] = [EXTREMES, WINDOWS, DEDUPE, SORT_BY, CHUNK, ZIP_LISTS]
