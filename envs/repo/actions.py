"""The repo kind's actions: read from the policy's turn (`parse_actions`), then each run over
the episode's workspace (`run_action`), giving the observation's text and its outcome record
(envs/tools.py). Kept apart from the environment (envs/repo/env.py) so that what an action
means, and what it may touch, reads in one place: only the episode's overlay is written, and
commands run in the sandbox within what is left of the episode's time budget.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import replace

from envs.base import StepContext
from envs.repo.grading import is_test_path
from envs.tools import outcome
from sandbox.base import ExecResult
from sandbox.workspace import check_relpath
from tasks.record import Task

_MAX_FILE_BYTES = 256 * 1024

_ACTION = re.compile(
    r'<ls(?:\s+path="(?P<lspath>[^"]*)")?\s*/>'
    r'|<read\s+path="(?P<rpath>[^"]*)"(?:\s+start="(?P<start>\d+)")?(?:\s+end="(?P<end>\d+)")?\s*/>'
    r'|<search\s+pattern="(?P<pat>[^"]*)"(?:\s+path="(?P<spath>[^"]*)")?\s*/>'
    r'|<edit\s+path="(?P<epath>[^"]*)"\s*>(?P<ebody>.*?)</edit>'
    r'|<write\s+path="(?P<wpath>[^"]*)"\s*>(?P<wbody>.*?)</write>'
    r'|<run>(?P<cmd>.*?)</run>'
    r'|<submit\s*/>', re.S)
_BLOCK = re.compile(r"<<<<<<< SEARCH\n(.*?)\n?=======\n(.*?)\n?>>>>>>> REPLACE", re.S)


def parse_actions(text: str) -> list[tuple]:
    """The actions in `text` as tuples; ValueError saying what is wrong."""
    out: list[tuple] = []
    for m in _ACTION.finditer(text):
        g = m.groupdict()
        tag = m.group(0)
        if tag.startswith("<ls"):
            out.append(("ls", _path(g["lspath"] or ".", dot=True)))
        elif tag.startswith("<read"):
            out.append(("read", _path(g["rpath"]), int(g["start"]) if g["start"] else None,
                        int(g["end"]) if g["end"] else None))
        elif tag.startswith("<search"):
            out.append(("search", g["pat"], _path(g["spath"] or ".", dot=True)))
        elif tag.startswith("<edit"):
            out.append(("edit", _path(g["epath"]), g["ebody"]))
        elif tag.startswith("<write"):
            body = g["wbody"][1:] if g["wbody"].startswith("\n") else g["wbody"]
            out.append(("write", _path(g["wpath"]), body))
        elif tag.startswith("<run>"):
            try:
                argv = shlex.split(g["cmd"])
            except ValueError as exc:
                raise ValueError(f"<run>: {exc}") from None
            if not argv or argv[0] not in ("pytest", "python", "python3"):
                raise ValueError(f"<run>{g['cmd'][:60]}</run>: commands are `pytest ARGS` or "
                                 f"`python ARGS`")
            out.append(("run", tuple(argv)))
        else:
            out.append(("submit",))
    if not out:
        raise ValueError('no action found; expected <ls/>, <read path="..."/>, <search '
                         'pattern="..."/>, <edit path="...">...</edit>, <write path="...">'
                         '...</write>, <run>pytest ...</run> or <submit/>')
    if any(a[0] == "submit" for a in out[:-1]):
        raise ValueError("<submit/> must be the last action of the turn")
    return out


def _path(p: str, dot: bool = False) -> str:
    if dot and p.strip() in ("", ".", "./"):
        return "."
    try:
        return check_relpath(p.strip()).replace("\\", "/")
    except ValueError as exc:
        raise ValueError(str(exc)) from None


def run_action(a: tuple, view: dict[str, bytes], task: Task, files: dict, ctx: StepContext,
               left: float, info: dict) -> tuple[str, dict]:
    """Run one action of `parse_actions` over `view` (the pristine tree under the episode's
    `files`): its text for the observation and its outcome (envs/tools.py)."""
    kind = a[0]
    if kind == "ls":
        return _ls(view, a[1])
    if kind == "read":
        return _read(view, a[1], a[2], a[3])
    if kind == "search":
        return _search(view, a[1], a[2])
    if kind in ("edit", "write"):
        return _edit(view, files, kind, a[1], a[2])
    return _run_command(a[1], task, files, ctx, left, info)


def _ls(view: dict[str, bytes], folder: str) -> tuple[str, dict]:
    """The entries of `folder` (a subfolder's name ends with `/`)."""
    d = folder.strip("/").rstrip("/")
    d = "" if d in ("", ".") else d + "/"
    names = sorted({p[len(d):].split("/")[0] + ("/" if "/" in p[len(d):] else "")
                    for p in view if p.startswith(d)})
    return (f"$ ls {d or '.'}\n" + ("\n".join(names) if names else "(nothing there)"),
            outcome("ran") if names else outcome("failed", "nothing there"))


def _read(view: dict[str, bytes], path: str, first: int | None, last: int | None
          ) -> tuple[str, dict]:
    """Lines `first` to `last` of a file, numbered (200 lines from `first` by default)."""
    start, end = first or 1, last or (first or 1) + 199
    if path not in view:
        return _failed(f"read {path}: no such file")
    lines = view[path].decode("utf-8", "replace").splitlines()
    body = "\n".join(f"{i:5d} {lines[i - 1]}" for i in range(start, min(end, len(lines)) + 1))
    return (f"$ read {path} {start}-{min(end, len(lines))} of {len(lines)}\n{body}",
            outcome("ran"))


def _search(view: dict[str, bytes], pattern: str, folder: str) -> tuple[str, dict]:
    """The lines of the text files under `folder` that `pattern` matches (60 shown)."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        return _failed(f"search: bad pattern {pattern!r}: {exc}")
    d = folder.strip("/")
    hits = []
    for p, data in view.items():
        if (not d or d == "." or p.startswith(d + "/") or p == d) and p.endswith(
                (".py", ".txt", ".rst", ".cfg", ".toml", ".md")):
            for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if rx.search(line):
                    hits.append(f"{p}:{i}: {line.strip()[:160]}")
    return (f"$ search {pattern!r}\n" + ("\n".join(hits[:60]) or "(no match)") + (
        f"\n... {len(hits) - 60} more" if len(hits) > 60 else ""), outcome("ran"))


def _edit(view: dict[str, bytes], files: dict, kind: str, path: str, text: str
          ) -> tuple[str, dict]:
    """`write`: `text` is the file; `edit`: `text` holds SEARCH/REPLACE blocks, each of which
    must match the file exactly once. The episode's `files` take the result."""
    if kind == "write":
        new = text
    else:
        if path not in view:
            return _failed(f"edit {path}: no such file (use <write> to make one)")
        new = view[path].decode("utf-8", "replace")
        blocks = _BLOCK.findall(text)
        if not blocks:
            return _failed(f"edit {path}: no <<<<<<< SEARCH ... ======= ... >>>>>>> "
                           "REPLACE block")
        for old, rep in blocks:
            n = new.count(old) if old else 0
            if n != 1:
                return _failed(f"edit {path}: a SEARCH block matches {n} times (it must "
                               f"match exactly once; nothing was changed): {old[:80]!r}")
            new = new.replace(old, rep, 1)
    data = new.encode()
    if len(data) > _MAX_FILE_BYTES:
        return _failed(f"{kind} {path}: refused, over {_MAX_FILE_BYTES} bytes")
    files[path] = data
    note = " (a test file: edits to tests are dropped at grading)" if is_test_path(path) else ""
    return f"{kind} {path}: ok ({len(data)} bytes){note}", outcome("ran")


def _run_command(argv: tuple[str, ...], task: Task, files: dict, ctx: StepContext, left: float,
                 info: dict) -> tuple[str, dict]:
    """`pytest ...` or `python ...` in the sandbox, over the episode's files on the pristine
    tree, within what is left of the episode's time budget."""
    if left <= 0:
        return (f"$ {' '.join(argv)}: skipped, the episode's time budget is spent",
                outcome("not_run", "the episode's time budget is spent"))
    from envs.repo.sandboxes import layer_sandbox  # noqa: PLC0415
    from envs.repo.source import pristine_base  # noqa: PLC0415

    # the root on sys.path as the grader has it (its root conftest.py puts it there): a
    # package whose tests folder has no __init__.py imports otherwise only when installed
    cmd = (["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no",
            "--rootdir=.", "-o", "pythonpath=.", "--tb=short", *argv[1:]]
           if argv[0] == "pytest" else ["python", *argv[1:]])
    limits = replace(ctx.limits, timeout_s=min(max(ctx.limits.timeout_s, 30.0), max(left, 0.1)),
                     memory_mb=max(ctx.limits.memory_mb, 1024))
    # only the episode's own files are written; the rest of the tree is the extracted
    # sdist, shown read-only in place where the backend can (never a copy per command)
    p = task.payload
    mine = {k: v for k, v in files.items() if v is not None}
    res = layer_sandbox(ctx.sandbox.name).run(
        mine, cmd, limits, base=pristine_base(p["repo"], p["sdist_sha256"], files))
    if res.infra_error:
        info["infra_error"] = True
        return (f"$ {shlex.join(argv)}: the sandbox failed to start (not your fault): "
                f"{res.error}", outcome("not_run", f"infra error: {res.error}"))
    passed, total = _pytest_counts(res.stdout) if argv[0] == "pytest" else (None, None)
    return _describe(f"$ {shlex.join(argv)}", res), outcome(
        "ran" if res.status == "ok" else "failed", "" if res.status == "ok" else
        f"{res.status} (exit {res.exit_code})", passed, total)


def _failed(text: str) -> tuple[str, dict]:
    """An action that could not do its work: its message is the observation and the detail."""
    return text, outcome("failed", text)


_COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")


def _pytest_counts(stdout: str) -> tuple[int | None, int | None]:
    """(passed, run) from pytest's last summary line (`3 failed, 5 passed in 0.1s`); None
    when there is none (a collection that never started). Errors count as run, not passed."""
    lines = [ln for ln in stdout.splitlines() if _COUNT.search(ln) and " in " in ln]
    if not lines:
        return None, None
    n = {k.rstrip("s"): int(v) for v, k in _COUNT.findall(lines[-1])}
    passed = n.get("passed", 0)
    return passed, passed + n.get("failed", 0) + n.get("error", 0)


def _describe(head: str, res: ExecResult) -> str:
    status = {"ok": "exit 0", "failed": f"exit {res.exit_code}", "timeout": "killed: time limit",
              "memory_exceeded": "killed: memory limit",
              "output_truncated": "output over the limit"}.get(res.status, res.status)
    out = [f"{head} [{status}]"]
    if res.stdout.strip():
        out.append(res.stdout.rstrip()[-4000:])
    if res.stderr.strip():
        out.append("stderr:\n" + res.stderr.rstrip()[-1500:])
    return "\n".join(out)
