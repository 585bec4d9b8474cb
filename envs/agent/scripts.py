"""The helper programs an episode runs inside the sandbox (envs/agent/episode.py): the visible-
example checker behind `<run_tests/>` and the runner behind `<run>`; and `read_visible`, which
reads the checker's output back, trusting none of what the candidate could have written.

Flags (the grader's vocabulary, rewards/guard.py): `forged_record` (a line on the checker's
channel without the run's nonce or out of an honest child's order, or a line imitating the
environment's verdict in what the candidate's code printed, raised or returned), `early_exit`
(the child ended itself before the checker was done with it), `builtins_tampering`,
`harness_tampering` (the solution changed builtins or the checker's module, or the checker's
own process was killed).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from sandbox.base import ExecResult

# What only the environment writes: the verdict of `<run_tests/>`, the turn counter, the end.
IMITATION = re.compile(r"visible examples? passed|^\s*Episode over \(|Final reward:"
                       r"|^\s*\[turn \d+/\d+", re.I | re.M)
_TAMPER_FLAGS = ("builtins_tampering", "harness_tampering")

# Runs the task's visible examples in the sandbox (`<run_tests/>`). Threat model: the candidate's
# code runs in a process of its own, so nothing it does can speak for the checker.
#  - The parent forks the child *first*, then makes itself undumpable (the child can no longer
#    read its memory or open its /proc descriptors) and only then reads the run's nonce from
#    stdin: the nonce is in no file, no argument and never in the child's memory.
#  - The child loads solution.py, calls the entry point on each visible example's arguments and
#    writes one plain record per call to a pipe: values only, never a verdict (the expected
#    values are compared by the environment, outside the sandbox). Its prints go to a second
#    pipe, which the parent passes on to stderr, capped.
#  - The parent relays each line of the record pipe to stdout wrapped with the nonce, then the
#    child's exit status. `read_visible` (below) trusts only lines that carry the nonce and
#    records in the order an honest child writes them; anything else, and a count line in the
#    program's output, is a forgery.
# The candidate controls the child, so it can make the child report any value for a visible
# example: no more than returning it, which it may (the visible examples are shown to it).
CHECK_SOURCE = r'''
import builtins, json, os, select, sys, traceback

RECORD_BYTES = 16384  # the longest line the child writes; the parent relays none longer
NO_START = 97  # the parent's exit status when it could not start the child: no candidate code ran


def child(entry, calls, rec_fd, go_fd, _dumps=json.dumps, _write=os.write,
          _fmt=traceback.format_exc, _len=len, _any=any, _dict=dict):
    os.read(go_fd, 1)  # wait until the parent holds the nonce (and is sealed)
    os.close(go_fd)
    sys.stdout = sys.stderr  # line-buffered: what it printed is out before it stalls or dies
    plain_types = (int, float, str, bool, type(None))

    def emit(rec):
        line = (_dumps(rec) + "\n").encode()
        if _len(line) > RECORD_BYTES:  # an honest record is never longer (the parent's rule)
            line = (_dumps({"i": rec["i"], "error": "ValueError: result too large to report "
                            "(%d bytes)" % _len(line), "tb": ""}) + "\n").encode()
        _write(rec_fd, line)

    def plain(v, depth=0):
        t = type(v)
        if depth > 50:
            raise TypeError("result nested too deeply")
        if t in plain_types:
            return v
        if t is list or t is tuple:
            return [plain(x, depth + 1) for x in v]
        if t is dict and all(type(k) is str for k in v):
            return {k: plain(x, depth + 1) for k, x in v.items()}
        raise TypeError("result of non-plain type %s" % t.__name__)

    # evidence, not the defence: what the solution changed of builtins or of this module
    watched = (("builtins_tampering", vars(builtins)), ("harness_tampering", globals()))
    snaps = [_dict(d) for _, d in watched]
    ns = {"__name__": "solution"}
    fn = None
    try:
        with open("solution.py") as fh:
            src = fh.read()
        exec(compile(src, "solution.py", "exec"), ns)
        fn = ns[entry]
    except BaseException as exc:
        emit({"load_error": "%s: %s" % (type(exc).__name__, str(exc)[:300]),
              "tb": _fmt(limit=3)[-1500:]})
    if fn is not None:
        emit({"loaded": True})
        for i, args in enumerate(calls):
            try:
                rec = {"i": i, "value": plain(fn(*args))}
            except BaseException as exc:
                rec = {"i": i, "error": "%s: %s" % (type(exc).__name__, str(exc)[:300]),
                       "tb": _fmt(limit=-2)[-1500:]}
            emit(rec)
    fn = None
    ns.clear()  # what the solution left to run at its teardown (a __del__) runs now, as output
    tampered = [name for (name, now), before in zip(watched, snaps)
                if _len(now) != _len(before) or _any(now.get(k, now) is not v
                                                     for k, v in before.items())]
    if tampered:
        emit({"tampered": tampered})
    emit({"end": True})
    return 0


def seal():
    # PR_SET_DUMPABLE = 0: /proc/<pid>/mem, /fd and ptrace closed to the child
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass


def relay(rec_r, out_r, key, max_lines, out_cap):
    """Until the child's pipes close: each line of its record pipe to stdout with the nonce (at
    most `max_lines`, then one `excess` marker; a line longer than RECORD_BYTES as an `overlong`
    marker), its output to stderr up to `out_cap` bytes. Nothing the child writes can fill the
    sandbox's output caps and so have the checker killed before its records are out."""
    relayed = 0

    def record(line):
        nonlocal relayed
        if relayed < max_lines and len(line) < RECORD_BYTES:
            rec = {"rec": line.decode("utf-8", "replace")}
        elif relayed < max_lines:
            rec = {"overlong": len(line)}
        elif relayed == max_lines:
            rec = {"excess": True}
        else:
            return
        relayed += 1
        os.write(1, (json.dumps(dict(rec, key=key)) + "\n").encode())

    open_fds, buf, skipping, shown = [rec_r, out_r], b"", False, 0
    while open_fds:
        for fd in select.select(open_fds, [], [])[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
            elif fd == out_r:
                if shown < out_cap:
                    os.write(2, chunk[:out_cap - shown])
                shown += len(chunk)
            else:
                *lines, buf = (buf + chunk).split(b"\n")
                for line in lines:
                    if not skipping:
                        record(line)
                    skipping = False  # the rest of an overlong line ends here
                if len(buf) >= RECORD_BYTES:
                    if not skipping:
                        record(buf)
                    buf, skipping = b"", True
    if shown > out_cap:
        os.write(2, b"\n[output cut: %d bytes]\n" % shown)


def main():
    entry, out_cap = sys.argv[1], int(sys.argv[2])
    with open("_episode_examples.json") as fh:
        calls = json.load(fh)
    try:
        rec_r, rec_w = os.pipe()
        out_r, out_w = os.pipe()
        go_r, go_w = os.pipe()
        pid = os.fork()
    except OSError as exc:
        sys.stderr.write("the checker could not start: %s\n" % exc)
        sys.exit(NO_START)
    if pid == 0:
        os.close(rec_r)
        os.close(out_r)
        os.close(go_w)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(out_w, 1)  # the candidate's prints: through the parent, never records
        os.dup2(out_w, 2)
        os.close(out_w)
        code = child(entry, calls, rec_w, go_r)
        sys.stdout.flush()
        sys.exit(code)
    os.close(rec_w)
    os.close(out_w)
    os.close(go_r)
    seal()
    key = sys.stdin.readline().strip()
    os.write(go_w, b"g")
    os.close(go_w)
    # an honest child writes at most: loaded, one record per call, tampered, end
    relay(rec_r, out_r, key, len(calls) + 3, out_cap)
    _, status = os.waitpid(pid, 0)  # a partial last line (the child died mid-write) is dropped
    code = os.waitstatus_to_exitcode(status)
    os.write(1, (json.dumps({"key": key, "exit": code}) + "\n").encode())


main()
'''

CHECK_NO_START = 97  # its NO_START: a failure of the host, not of the candidate (the candidate
assert f"\nNO_START = {CHECK_NO_START} " in CHECK_SOURCE  # can kill the parent, not set its exit)

# Runs one workspace file as __main__, then packs the workspace's text files into a manifest so
# that files the program made, changed or removed come back (collect needs names in advance).
RUN_SOURCE = r'''
import json, os, runpy, sys
target, args = sys.argv[1], sys.argv[2:]
sys.argv = [target] + args
sys.path.insert(0, os.getcwd())
code = 0
try:
    runpy.run_path(target, run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if not isinstance(exc.code, (int, type(None))):
        print(exc.code, file=sys.stderr)
except BaseException:
    import traceback
    traceback.print_exc()
    code = 1
finally:
    files = {}
    for root, dirs, names in os.walk("."):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        for n in names:
            rel = os.path.normpath(os.path.join(root, n))
            if rel.startswith("_episode_") or os.path.islink(rel) or len(files) >= 64:
                continue
            try:
                with open(rel, encoding="utf-8") as fh:
                    files[rel] = fh.read(%(cap)d + 1)
            except (OSError, UnicodeDecodeError):
                pass
    with open("_episode_files.json.part", "w") as fh:
        json.dump(files, fh)
    os.replace("_episode_files.json.part", "_episode_files.json")  # never seen half-written
sys.exit(code)
'''


@dataclass(frozen=True)
class VisibleReport:
    """What one `<run_tests/>` showed: the environment's own count, the observation's lines
    (PASS/FAIL per example, a load error) and the flags the run raised."""

    passed: int
    total: int
    lines: tuple[str, ...]
    flags: tuple[str, ...]


def read_visible(res: ExecResult, nonce: str, entry: str, examples: Sequence[Any]) -> VisibleReport:
    """The checker's run `res` read back: only lines carrying `nonce` count, in the order an
    honest child writes its records (loaded or load_error, one record per example in order,
    tampered, end); each value is compared with its example's expected value here, outside the
    sandbox, so `passed <= total == len(examples)` whatever the program printed."""
    flags: list[str] = []
    flag = lambda name: flags.append(name) if name not in flags else None  # noqa: E731
    inner, exit_code = [], None
    for line in res.stdout.split("\n")[:-1]:  # after the last newline: cut by the cap or a kill
        rec = _loads(line)
        authentic = (type(rec) is dict and len(rec) == 2 and rec.get("key") == nonce
                     and exit_code is None)
        if authentic and type(rec.get("rec")) is str:
            inner.append(rec["rec"])
        elif authentic and type(rec.get("exit")) is int:
            exit_code = rec["exit"]
        else:  # no nonce, after the exit record, or `overlong` (longer than any honest record)
            flag("forged_record")
    results: dict[int, dict] = {}
    load_error, loaded, ended = None, False, False
    for raw in inner:
        rec = _loads(raw)
        keys = set(rec) if type(rec) is dict else set()
        texts = all(type(rec.get(k)) is str for k in keys - {"i", "value", "loaded", "end",
                                                              "tampered"})
        if ended or not keys or not texts:
            flag("forged_record")
        elif not loaded and load_error is None:
            if keys == {"loaded"} and rec["loaded"] is True:
                loaded = True
            elif keys == {"load_error", "tb"}:
                load_error = rec
            else:
                flag("forged_record")
        elif keys == {"end"} and rec["end"] is True:
            ended = True
        elif (keys == {"tampered"} and type(rec["tampered"]) is list
              and set(rec["tampered"]) <= set(_TAMPER_FLAGS)):
            for name in rec["tampered"]:
                flag(name)
        elif (loaded and keys in ({"i", "value"}, {"i", "error", "tb"}) and type(rec["i"]) is int
              and rec["i"] == len(results) < len(examples)):
            results[rec["i"]] = rec
        else:
            flag("forged_record")
    if exit_code == 0 and not ended and not flags:  # (a forged stream says nothing of its end)
        flag("early_exit")  # the child ended itself before the checker was done with it
    if exit_code is None and res.status in ("ok", "failed"):
        flag("harness_tampering")  # the checker itself did not finish, and no limit stopped it

    passed, lines, said = _compared(results, load_error, examples, entry)
    if any(IMITATION.search(text) for text in [res.stderr, *said]):  # what the code printed too
        flag("forged_record")
    return VisibleReport(passed, len(examples), tuple(lines), tuple(flags))


def _compared(results: dict[int, dict], load_error: dict | None, examples: Sequence[Any],
              entry: str) -> tuple[int, list[str], list[str]]:
    """Each example's record compared with its expected value: how many passed, the report's
    lines, and every text the candidate's code raised or returned (checked for imitations of
    the report)."""
    from rewards.reports import values_equal  # noqa: PLC0415 (one definition of "equal")

    lines: list[str] = []
    said: list[str] = []  # what the candidate's code raised or returned
    if load_error is not None:
        said += [load_error["load_error"], load_error["tb"]]
        lines += [f"LOAD ERROR: solution.py could not be loaded or does not define {entry}",
                  load_error["tb"].rstrip()]
    passed = 0
    for i, ex in enumerate(examples):
        call = f"{entry}({', '.join(repr(a) for a in ex.args)})"
        r = results.get(i)
        if r is None:
            if load_error is None:
                lines.append(f"FAIL {call}: no result (the run ended before it returned)")
        elif "value" in r:
            got = repr(r["value"])
            said.append(got)
            if values_equal(json.loads(json.dumps(ex.expected)), r["value"]):
                passed += 1
                lines.append(f"PASS {call} == {got}")
            else:
                lines.append(f"FAIL {call} returned {got}, expected {ex.expected!r}")
        else:
            said += [r["error"], r["tb"]]
            lines += [f"FAIL {call} raised {r['error']}", r["tb"].rstrip()]
    return passed, lines, said


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
