"""Unified diffs between trees of files: how an instance's bug, its gold fix and a candidate's
single-turn answer are written (`git apply` reads them too), and a strict applier (every
context and removed line must match exactly; fuzz would let a stale patch land elsewhere)."""
from __future__ import annotations

import difflib
import re

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A diff that does not apply; the message names the file and the hunk."""


def make_diff(before: dict[str, bytes], after: dict[str, bytes], context: int = 3) -> str:
    """The diff turning `before` into `after` over the paths either has, in path order."""
    out: list[str] = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        al = a.decode().splitlines(keepends=True) if a is not None else []
        bl = b.decode().splitlines(keepends=True) if b is not None else []
        lines = list(difflib.unified_diff(al, bl, f"a/{path}" if a is not None else "/dev/null",
                                          f"b/{path}" if b is not None else "/dev/null",
                                          n=context))
        for line in lines:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def changed_paths(diff: str) -> list[str]:
    out = []
    for line in diff.splitlines():
        if line.startswith("+++ ") or line.startswith("--- "):
            p = line[4:].split("\t")[0].strip()
            if p != "/dev/null":
                p = p[2:] if p[:2] in ("a/", "b/") else p
                if p not in out:
                    out.append(p)
    return out


def apply_diff(tree: dict[str, bytes], diff: str) -> dict[str, bytes | None]:
    """The files `diff` changes, as they are after it ({path: bytes}, None for a deleted
    file): an overlay over `tree`. Raises PatchError when any hunk does not match."""
    lines = diff.splitlines(keepends=True)
    out: dict[str, bytes | None] = {}
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            if lines[i].startswith(("+++ ", "@@")):
                raise PatchError(f"line {i + 1}: a hunk or '+++' without a '---' header")
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchError(f"line {i + 1}: '---' is not followed by '+++'")
        src = lines[i][4:].split("\t")[0].strip()
        dst = lines[i + 1][4:].split("\t")[0].strip()
        strip = (lambda p: p[2:] if p[:2] in ("a/", "b/") else p)
        path = strip(dst if dst != "/dev/null" else src)
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise PatchError(f"line {i + 1}: bad path {path!r}")
        cur = out[path] if path in out else tree.get(path)
        if src == "/dev/null":
            cur = None
        old = cur.decode("utf-8", "replace").splitlines(keepends=True) if cur is not None else []
        new, i = _patched(lines, i + 2, old, path)
        out[path] = None if dst == "/dev/null" else "".join(new).encode()
    if not out and diff.strip():
        raise PatchError("no file header ('--- a/PATH' / '+++ b/PATH') found")
    return out


def _patched(lines: list[str], i: int, old: list[str], path: str) -> tuple[list[str], int]:
    """`old` (one file's lines) with the hunks that start at `lines[i]` applied, and the index
    of the first line after them. Raises PatchError when a hunk does not match."""
    new: list[str] = []
    pos = 0
    while i < len(lines) and lines[i].startswith("@@"):
        m = _HUNK.match(lines[i])
        if not m:
            raise PatchError(f"{path}: line {i + 1}: bad hunk header {lines[i].strip()!r}")
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        if start < pos:
            raise PatchError(f"{path}: hunk {lines[i].strip()!r} overlaps the one before")
        new += old[pos:start]
        pos = start
        i += 1
        # the header's counts bound the hunk ('--- ' of the next file starts with '-' too)
        n_old = int(m.group(2)) if m.group(2) is not None else 1
        n_new = int(m.group(4)) if m.group(4) is not None else 1
        while i < len(lines) and (n_old > 0 or n_new > 0 or lines[i].startswith("\\")) \
                and lines[i][:1] in (" ", "-", "+", "\\"):
            tag, text = lines[i][:1], lines[i][1:]
            n_old -= tag in (" ", "-")
            n_new -= tag in (" ", "+")
            nl_missing = i + 1 < len(lines) and lines[i + 1].startswith("\\")
            if nl_missing:
                text = text.rstrip("\n")
            if tag == "\\":
                i += 1
                continue
            if tag in (" ", "-"):
                if pos >= len(old) or old[pos] != text:
                    raise PatchError(f"{path}: the hunk at line {start + 1} does not match "
                                     f"line {pos + 1} ({text.rstrip()[:60]!r})")
                pos += 1
            if tag in (" ", "+"):
                new.append(text)
            i += 1
    new += old[pos:]
    return new, i
