"""Small-algorithm families that scan a sequence; each difficulty level is a different shape."""
from __future__ import annotations

from envs.io.families.base import Family, Level, leveled, level_of


def _longest(p, s):
    best = cur = 0
    for ch in s:
        cur = cur + 1 if ch == p["c"] else 0
        best = max(best, cur)
    return best


def _runs(p, s):
    out, i = [], 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        if j - i >= p["k"]:
            out.append([s[i], j - i])
        i = j
    return out


def _rle_in(r, d):
    if level_of(d, 3) == 2:  # an encoded string: letter, digit, letter, digit, ...
        return "".join(r.choice("abc") + str(r.randint(1, 9)) for _ in range(r.randint(0, 2 + d)))
    return "".join(r.choice("ab") * r.randint(1, 4) for _ in range(r.randint(0, 2 + d)))


RUN_LENGTH = leveled("run_length", "s", "algorithms", _rle_in, [
    Level(lambda r: {"c": r.choice("ab")},
          lambda p: f"Return the length of the longest run of {p['c']!r} in s.",
          lambda p: (f"    best = cur = 0\n    for ch in s:\n"
                     f"        cur = cur + 1 if ch == {p['c']!r} else 0\n"
                     f"        best = max(best, cur)\n    return best\n"),
          _longest, block=True),
    Level(lambda r: {"k": r.randint(3, 7)},
          lambda p: f"Decode s, letters each followed by a digit count ('a2b1' -> 'aab'); "
                    f"cap each count at {p['k']}.",
          lambda p: f"''.join(s[i] * min(int(s[i + 1]), {p['k']}) for i in range(0, len(s), 2))",
          lambda p, s: "".join(s[i] * min(int(s[i + 1]), p["k"]) for i in range(0, len(s), 2))),
    Level(lambda r: {"k": r.randint(2, 3)},
          lambda p: f"Return the runs of equal characters of s of length {p['k']}+ as "
                    f"[char, length] pairs, in order.",
          lambda p: (f"    out, i = [], 0\n    while i < len(s):\n        j = i\n"
                     f"        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
                     f"        if j - i >= {p['k']}:\n            out.append([s[i], j - i])\n"
                     f"        i = j\n    return out\n"),
          _runs, block=True),
])

_PAIRS = ["()", "[]", "<>", "{}"]


def _balanced(r, pairs, n):
    """A balanced string over `pairs`, with letters between."""
    out, stack = [], []
    for _ in range(n):
        if stack and r.random() < 0.45:
            out.append(stack.pop())
        elif r.random() < 0.15:
            out.append(r.choice("xy"))
        else:
            o, c = r.choice(pairs)
            out.append(o)
            stack.append(c)
    return "".join(out + stack[::-1])


def _brackets_in(r, d):
    """A properly nested string over all four pairs (so nested over any subset), half broken."""
    s = _balanced(r, _PAIRS, r.randint(1, 3 + 2 * d))
    if level_of(d, 3) != 2 and r.random() < 0.5:  # break it: drop, reverse or add a bracket
        i = r.randrange(len(s))
        s = r.choice([s[:i] + s[i + 1:], s[::-1], s + r.choice("([<{)]>}")])
    return s


def _is_nested(p, s):
    closer = {p["o"][1]: p["o"][0], p["t"][1]: p["t"][0]}
    stack = []
    for ch in s:
        if ch in closer.values():
            stack.append(ch)
        elif ch in closer:
            if not stack or stack.pop() != closer[ch]:
                return False
    return not stack


def _depth_ok(p, s):
    depth = 0
    for ch in s:
        depth += (ch == p["o"][0]) - (ch == p["o"][1])
        if depth < 0:
            return False
    return depth == 0


def _max_depth(p, s):
    depth = best = 0
    for ch in s:
        depth += (ch == p["o"][0]) - (ch == p["o"][1])
        best = max(best, depth)
    return best


def _two_pairs(r):
    o, t = r.sample(_PAIRS, 2)
    return {"o": o, "t": t}


BRACKETS = leveled("brackets", "s", "algorithms", _brackets_in, [
    Level(lambda r: {"o": r.choice(_PAIRS)},
          lambda p: f"Return True if the {p['o'][0]!r} and {p['o'][1]!r} in s are balanced.",
          lambda p: (f"    depth = 0\n    for ch in s:\n"
                     f"        depth += (ch == {p['o'][0]!r}) - (ch == {p['o'][1]!r})\n"
                     f"        if depth < 0:\n            return False\n    return depth == 0\n"),
          _depth_ok, block=True),
    Level(lambda r: {"o": r.choice(_PAIRS)},
          lambda p: f"Return the deepest nesting of {p['o']!r} pairs in s.",
          lambda p: (f"    depth = best = 0\n    for ch in s:\n"
                     f"        depth += (ch == {p['o'][0]!r}) - (ch == {p['o'][1]!r})\n"
                     f"        best = max(best, depth)\n    return best\n"),
          _max_depth, block=True),
    Level(_two_pairs,
          lambda p: f"Return True if the brackets {p['o']} and {p['t']} in s are balanced and "
                    f"properly nested.",
          lambda p: (f"    closer = {{{p['o'][1]!r}: {p['o'][0]!r}, {p['t'][1]!r}: {p['t'][0]!r}}}\n"
                     f"    stack = []\n    for ch in s:\n"
                     f"        if ch in closer.values():\n            stack.append(ch)\n"
                     f"        elif ch in closer:\n"
                     f"            if not stack or stack.pop() != closer[ch]:\n"
                     f"                return False\n    return not stack\n"),
          _is_nested, block=True),
])


def _pair_index(p, xs):
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            if xs[i] + xs[j] == p["k"]:
                return [i, j]
    return None


def _shortest_run(p, xs):
    best = 0
    for i in range(len(xs)):
        total = 0
        for j in range(i, len(xs)):
            total += xs[j]
            if total == p["k"] and (best == 0 or j - i + 1 < best):
                best = j - i + 1
    return best


PAIR_SUM = leveled("pair_sum", "xs", "algorithms",
                   lambda r, d: [r.randint(0, 9) for _ in range(r.randint(2, 4 + d))], [
    Level(lambda r: {"k": r.randint(6, 14)},
          lambda p: f"Return True if two items at different positions of xs sum to {p['k']}.",
          lambda p: (f"any(xs[i] + xs[j] == {p['k']} for i in range(len(xs)) "
                     f"for j in range(i + 1, len(xs)))"),
          lambda p, xs: _pair_index(p, xs) is not None),
    Level(lambda r: {"k": r.randint(6, 14)},
          lambda p: f"Return [i, j] for the first i < j (by i, then j) with xs[i] + xs[j] == "
                    f"{p['k']}, else None.",
          lambda p: (f"    for i in range(len(xs)):\n        for j in range(i + 1, len(xs)):\n"
                     f"            if xs[i] + xs[j] == {p['k']}:\n"
                     f"                return [i, j]\n    return None\n"),
          _pair_index, block=True),
    Level(lambda r: {"k": r.randint(8, 20)},
          lambda p: f"Return the length of the shortest run of consecutive items of xs summing "
                    f"to {p['k']}, or 0.",
          lambda p: (f"    best = 0\n    for i in range(len(xs)):\n        total = 0\n"
                     f"        for j in range(i, len(xs)):\n            total += xs[j]\n"
                     f"            if total == {p['k']} and (best == 0 or j - i + 1 < best):\n"
                     f"                best = j - i + 1\n    return best\n"),
          _shortest_run, block=True),
])

SCANS: list[Family] = [RUN_LENGTH, BRACKETS, PAIR_SUM]
