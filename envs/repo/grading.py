"""Running a repository's tests in the sandbox and judging them (kind `repo`, envs/repo/env.py).

One run is pytest in a fresh sandbox over the whole tree, with the grader's plugin
(envs/testfile/plugin/) as the root `conftest.py`, the grader's `pytest.ini` and a per-run
nonce; the named tests are passed as node ids. The build (stable tests, which tests a mutant
turns red) and the grade use this same run.

Grading (SWE-bench's harness, with the test-file verifier's anti-gaming on top):

- the tree graded is the *pristine* tree with the instance's bug applied, then the candidate's
  changes to **source** files only; a change to a test, a `conftest.py` or a pytest/packaging
  config is dropped (the hidden tests are restored from the pristine tree) and flags
  `tests_modified`;
- FAIL_TO_PASS and PASS_TO_PASS run by node id; a test credits only when pytest's junit XML and
  the plugin's nonce-stamped summary both say it passed; a test that is absent or not collected
  is `missing` (failed); the collected set must be exactly the requested one
  (`collection_mismatch` otherwise), a collection error flags `collection_error`;
- the plugin's runtime flags (pytest or builtins patched, a report written by someone else, an
  early exit, a skip) and static flags of what the candidate added (imports of pytest, exits,
  strings that name the tests or the grader's files) give no credit.
"""
from __future__ import annotations

import ast
import re
import secrets
from dataclasses import dataclass, field, replace
from posixpath import basename

from envs.testfile.grading import testfile_hack_flags
from envs.testfile.plugin import PLUGIN_SOURCE
from rewards import plain_compare, pyast
from rewards.pytest_reports import junit_cases, read_summary
from rewards.reports import TestReport
from sandbox.base import ExecResult, Limits, Sandbox

CONFTEST, INI = "conftest.py", "pytest.ini"
INI_SOURCE = """[pytest]
python_files = test_*.py *_test.py
python_classes = Test*
python_functions = test_*
junit_family = xunit2
junit_logging = no
"""
_CONFIG_FILES = {"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "setup.py",
                 "conftest.py", "noxfile.py"}
_FLAG_LINE = re.compile(r"^ROLLFORGE-FLAG (\S+) ([a-z_]{1,40})$", re.M)
_REPORT_CAP = 4 << 20
_HEX = re.compile(r"0x[0-9a-fA-F]+")
# Flags after which no test's outcome can be trusted: every one counts as failed.
UNTRUSTED = {"forged_report", "collection_mismatch", "exit_code_mismatch", "tests_modified",
             "pytest_tampering", "builtins_tampering", "early_exit", "skipped_test",
             "collection_error", "timeout_evasion", "exit_called", "shadow_module",
             "introspection", "thread_started", "reads_tests"}
# What the candidate's added code may not mention: the tests, the grader's files and cache.
_TEST_WORDS = ("test_", "/tests", "tests/", "conftest", "junit", ".xml", "rollforge",
               ".summary-", "pytest")


def is_test_path(path: str) -> bool:
    """A file the hidden tests own: test modules, test folders, conftest and test config."""
    parts = path.split("/")
    name = parts[-1]
    return (name in _CONFIG_FILES or name.startswith("test_") or name.endswith("_test.py")
            or any(p in ("tests", "test", "testing") for p in parts[:-1]))


def junit_key(nodeid: str) -> tuple[str, str]:
    """pytest's junit (classname, name) of a node id (its mangling in _pytest/junitxml.py)."""
    names = nodeid.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    return ".".join(names[:-1]), names[-1]


@dataclass(frozen=True)
class TestRun:
    """One judged pytest run: the outcome of each test that ran (by node id), the failure
    messages (for problem statements) and what looked wrong."""

    __test__ = False
    outcomes: dict[str, str]
    messages: dict[str, str]
    collected: tuple[str, ...]
    collect_errors: tuple[str, ...]
    flags: tuple[str, ...]
    res: ExecResult
    infra: str | None = None
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # each test's CPU seconds (its call)
    cpu_total: float = 0.0  # the pytest process's CPU seconds, start to end


def run_timeout(limits: Limits, n: int, per_test_s: float) -> float:
    """The wall-clock limit of a run of `n` targets (test files or node ids)."""
    return limits.timeout_s + min(per_test_s * n, 120.0)


def run_tests(tree: dict[str, bytes], test_ids: list[str] | None, sandbox: Sandbox,
              limits: Limits, per_test_s: float = 10.0) -> TestRun:
    """pytest over `tree` in the sandbox with the grader's plugin; `test_ids` None: every test
    module of the tree. A test may use `per_test_s` seconds of CPU (not of wall clock: a loaded
    machine does not make a test time out, so the builder's decisions do not depend on the
    load); code that sleeps or blocks is stopped by the run's wall-clock limit."""
    token = secrets.token_hex(8)
    junit, summary = f"report-{token}.xml", f".summary-{token}.json"
    tests = sorted(p for p in tree if p.endswith(".py") and is_test_path(p))
    protected = sorted({CONFTEST, INI} | {basename(p) for p in tests
                                          if basename(p) != "__init__.py"})
    source = sorted(p for p in tree if p.endswith(".py") and not is_test_path(p))
    config = {"nonce": token, "per_test": per_test_s, "clock": "cpu", "summary": summary,
              "protected": protected, "writable": [junit, summary],
              "tests": tests + [CONFTEST, INI], "candidate": source, "plain": "probe"}
    plugin = PLUGIN_SOURCE.replace("@@CONFIG@@", repr(config))
    files: dict[str, str | bytes] = dict(tree)
    for path in tests:  # the tests compare no value whose own methods lie (plain_compare)
        files[path] = _checked_tests(files[path])
    files[CONFTEST], files[INI] = plugin, INI_SOURCE
    if test_ids is None:
        targets = sorted({p for p in tests if basename(p).startswith("test_")
                          or p.endswith("_test.py")})
    else:
        targets = list(test_ids)
    argv = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:timeout",
            "-c", INI, "--rootdir=.", "--capture=sys", "--tb=short", "--color=no",
            "-W", "ignore::DeprecationWarning", f"--junitxml={junit}", *targets]
    run_limits = replace(limits, timeout_s=run_timeout(limits, len(targets), per_test_s),
                         output_bytes=max(limits.output_bytes, _REPORT_CAP))
    res = sandbox.run(files, argv, run_limits, collect=[junit, summary])
    empty = TestRun({}, {}, (), (), (), res, seconds=res.duration_s)
    if res.status == "infra_error":
        return replace(empty, infra=res.error or "sandbox")
    if f"ROLLFORGE-LOADED {token}" not in res.stderr:
        tail = (res.stderr.strip().splitlines() or [res.status])[-1][:300]
        return replace(empty, infra=f"pytest did not start in the sandbox: {tail}")
    return judge(res, junit, summary, token)


def _checked_tests(text: str | bytes | None) -> str | bytes | None:
    """A test module with its comparisons' operands checked (rewards/plain_compare.py); as it
    is when it does not parse (pytest then reports its own collection error)."""
    if text is None:
        return None
    try:
        src = text.decode() if isinstance(text, bytes) else text
        return plain_compare.rewrite(src).encode()
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
        return text


def _junit(text: str | None) -> dict[tuple[str, str], tuple[str, str]] | None:
    """(classname, name) -> (passed|failed|skipped, message); None: not what pytest writes."""
    cases = junit_cases(text, _REPORT_CAP)
    if cases is None:
        return None
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for cls, name, outcome, msg in cases:
        prev = out.get((cls, name))
        if prev is None or prev[0] == "passed":  # a setup and a teardown error: the worst
            out[(cls, name)] = (outcome, msg)
    return out


def _coarse(o: str) -> str:
    return o if o in ("passed", "skipped") else "failed"


def judge(res: ExecResult, junit: str, summary: str, nonce: str) -> TestRun:
    """The TestRun of a finished pytest run in the sandbox: the outcomes of the plugin's summary
    record (file `summary`, keyed by `nonce`), checked against pytest's JUnit report (file
    `junit`) and the exit code. Either report missing or not in the shape pytest and the plugin
    write leaves no outcomes; a report that is there but unreadable (in a run not killed), or
    that disagrees with the other or with the exit code, raises a flag (`forged_report`,
    `exit_code_mismatch`, `early_exit`, ...)."""
    flags = list(dict.fromkeys(f for tok, f in _FLAG_LINE.findall(res.stderr) if tok == nonce))
    rec = read_summary(res.files.get(summary), nonce, _REPORT_CAP)
    cases = _junit(res.files.get(junit))
    killed = res.status in ("timeout", "memory_exceeded")
    if rec is None or cases is None:
        if not killed and (junit in res.files or summary in res.files):
            flags.append("forged_report")
        if res.exit_code == 0:
            flags.append("early_exit")
        return TestRun({}, {}, (), (), tuple(dict.fromkeys(flags)), res, seconds=res.duration_s)
    outcomes = {k: str(v) for k, v in rec["outcomes"].items()}
    mine = {junit_key(k): _coarse(v) for k, v in outcomes.items()}
    theirs = {k: v[0] for k, v in cases.items() if k[0] != "" and k != ("pytest", "internal")}
    errs = tuple(e[0] for e in rec["collect_errors"])
    if rec.get("internal_error"):
        flags.append("collection_error")
    if errs:
        flags.append("skipped_test" if all(e[1] == "Skipped" for e in rec["collect_errors"])
                     else "collection_error")
    if mine != theirs:
        flags.append("forged_report")
    if rec.get("exitstatus") != res.exit_code:
        flags.append("exit_code_mismatch")
    flags += [f for f in rec["flags"] if re.fullmatch(r"[a-z_]{1,40}", f)]
    messages = {k: _HEX.sub("0x...", cases.get(junit_key(k), ("", ""))[1])[:300]
                for k, v in outcomes.items() if v != "passed"}
    return TestRun(outcomes, messages, tuple(rec["collected"]), errs,
                   tuple(dict.fromkeys(flags)), res, seconds=res.duration_s,
                   cpu=dict(rec.get("cpu", {})), cpu_total=rec.get("cpu_total", 0.0))


# -- the grade of a candidate --------------------------------------------------------------------
def apply_overlay(base: dict[str, bytes], overlay: dict[str, bytes | None]) -> dict[str, bytes]:
    """`base` with `overlay`'s files written over it (None: the file deleted)."""
    out = dict(base)
    for path, data in overlay.items():
        if data is None:
            out.pop(path, None)
        else:
            out[path] = data
    return out


def static_flags(buggy: dict[str, bytes], changed: dict[str, bytes]) -> tuple[str, ...]:
    """Constructs the candidate added to source files that no honest fix needs: the test-file
    verifier's list (pytest, exits, introspection, the grader's words) plus strings naming the
    tests, each counted only where the buggy file did not already have it."""
    flags: set[str] = set()

    def of(text: str) -> set[str]:
        try:
            found = set(testfile_hack_flags(text, 1))
            tree = pyast.parse(text)
        except (SyntaxError, ValueError):
            return set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and any(
                    w in n.value for w in _TEST_WORDS):
                found.add("reads_tests")
        return found

    for path, data in changed.items():
        if not path.endswith(".py"):
            continue
        before = buggy.get(path)
        flags |= of(data.decode("utf-8", "replace")) - (
            of(before.decode("utf-8", "replace")) if before is not None else set())
    return tuple(sorted(flags))


_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3, "timeout": 4, "missing": 5}


def prefixes(nodeid: str) -> list[str]:
    """The names that can stand for a node, coarsest first: its file, its classes, and its
    function when it is a parametrized case."""
    parts = nodeid.split("::")
    out = ["::".join(parts[:i]) for i in range(1, len(parts))]
    if "[" in parts[-1]:
        out.append(nodeid.split("[")[0])
    return out


def covers(name: str, nodeid: str) -> bool:
    return nodeid == name or nodeid.startswith(name + "::") or nodeid.startswith(name + "[")


def outcome_of(name: str, outcomes: dict[str, str], exact: frozenset[str]) -> str:
    """A named test's outcome: a node id's own, or for a file's, class's or function's name (a
    PASS_TO_PASS name standing for the nodes under it) the worst of its nodes that are not
    named themselves; `missing` when nothing of it ran."""
    if name in outcomes:
        return outcomes[name]
    cases = [o for k, o in outcomes.items() if covers(name, k) and k not in exact]
    return max(cases, key=_RANK.__getitem__) if cases else "missing"


def judge_names(run: TestRun, names: tuple[str, ...], f2p: frozenset[str],
                n_collected: int | None) -> tuple[list[str], list[str]]:
    """(outcome per name, flags) of a run of `names`: absent is missing, a skip fails, and the
    collected count must be what the build saw (`n_collected`) or every requested node."""
    flags: list[str] = []
    want = n_collected if n_collected is not None else len(names)
    if run.outcomes and not run.collect_errors and (
            len(run.collected) != want or any(not any(covers(n, k) for n in names)
                                              for k in run.collected)):
        flags.append("collection_mismatch")
    out = []
    for t in names:
        o = outcome_of(t, run.outcomes, f2p)
        out.append("failed" if o == "skipped" else o)
    return out, flags


def grade_candidate(pristine: dict[str, bytes], bug: dict[str, bytes],
                    candidate: dict[str, bytes | None], fail_to_pass: list[str],
                    pass_to_pass: list[str], sandbox: Sandbox, limits: Limits,
                    per_test_s: float = 10.0, n_collected: int | None = None) -> TestReport:
    """The candidate's changes (over the buggy tree) graded on a pristine copy: source changes
    applied, test changes dropped and flagged, F2P then P2P run by name."""
    buggy = apply_overlay(pristine, bug)
    names = tuple(fail_to_pass) + tuple(pass_to_pass)
    n = len(names)
    flags: list[str] = []
    kept: dict[str, bytes | None] = {}
    for path, data in candidate.items():
        if buggy.get(path) == data:
            continue
        if is_test_path(path) or path in (CONFTEST, INI):
            flags.append("tests_modified")  # the hidden tests are restored: the change is dropped
        elif "/" not in path and path not in buggy:
            # a new module at the root lands on sys.path once pytest imports the root conftest
            # and would shadow a standard module (json.py, re.py) for the grader's own imports
            flags.append("shadow_module")
        else:
            kept[path] = data
    flags += static_flags(buggy, {k: v for k, v in kept.items() if v is not None})
    tree = apply_overlay(buggy, kept)
    syntax = False
    for path, data in kept.items():
        if data is not None and path.endswith(".py"):
            try:
                pyast.parse(data)
            except (SyntaxError, ValueError):
                syntax = True
    run = run_tests(tree, list(names), sandbox, limits, per_test_s)
    if run.infra:
        return TestReport(("missing",) * n, (), "infra_error", run.res, load_error=run.infra,
                          test_names=names)
    outcomes, more = judge_names(run, names, frozenset(fail_to_pass), n_collected)
    flags = list(dict.fromkeys(flags + list(run.flags) + more))
    if set(flags) & UNTRUSTED:
        outcomes = ["failed" if o == "passed" else o for o in outcomes]
    status = "syntax_error" if syntax else run.res.status
    errors = tuple(o for o in outcomes if o in ("error", "timeout"))
    return TestReport(tuple(outcomes), errors, status, run.res, tuple(flags),
                      load_error="; ".join(run.collect_errors)[:400] or None, test_names=names)
