"""The `testfile` verifier (kind `testfile`, envs/testfile/env.py): the task carries a test file
(pytest, or MBPP-style `assert` lines) that runs in the sandbox against the candidate module;
per-test outcomes come from pytest's junit XML, checked against a second record written by the
grader's own plugin (envs/testfile/plugin/).

The answer: with an `entry_point`, the task's prompt (signature + docstring) plus the completion
is `solution.py`, as for `io` tasks; without one (a whole-module task, the prompt is prose), the
completion alone is the module. The test file imports it as `payload.module`.

Threat model. The candidate's module is imported by the test file, so it runs inside pytest's
process and can touch anything there: pytest's internals, the report file, the exit code, the
test file on disk. The grader therefore (1) writes the tests, the config and its plugin
(`conftest.py`) fresh from the task record on every run, and the candidate supplies only
`solution.py`; (2) credits a test only when two records agree: pytest's junit XML and the
plugin's summary (each test's outcome, the exit status, a per-run nonce), both written in a
window the plugin opens after checking that pytest, pluggy, builtins and the plugin set are as
they were before the candidate was imported, and that an audit hook (PEP 578, which Python code
cannot remove) shuts to every other writer of the grader's files; (3) counts every absent,
extra, skipped or unparseable test as failed, and checks pytest's exit code against the
outcomes; (4) flags, statically, answers that reach for pytest, the process's exit or the
interpreter's internals. Anything inconsistent fails closed: every test failed and a hack flag.
"""
from __future__ import annotations

import ast
import re
import secrets
import sys
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from envs.testfile.plugin import INI_SOURCE as _INI_SOURCE
from envs.testfile.plugin import PLUGIN_SOURCE as _PLUGIN
from envs.testfile.plugin import TEST_FILE as _TEST_FILE
from envs.testfile.plugin import TEST_MODULE
from rewards import plain_compare, pyast
from rewards.pytest_reports import RANK, junit_cases, read_summary
from rewards.reports import Outcome, TestReport, missing_outcome
from sandbox.base import ExecResult, Limits, Sandbox
from tasks.record import Task

_CONFTEST, _INI = "conftest.py", "pytest.ini"
_RESERVED = {TEST_MODULE, "conftest", "pytest", "_pytest", "pluggy", "py"}
_REPORT_CAP = 512 * 1024  # largest junit XML / summary read back (bytes)
_FLAG_LINE = re.compile(r"^ROLLFORGE-FLAG (\S+) ([a-z_]{1,40})$", re.M)
_EXC_NAME = re.compile(r"^E\s+([A-Za-z_][\w.]*)(?::|$)", re.M)
# Flags after which the report itself cannot be trusted: every test counts as failed.
_UNTRUSTED = {"forged_report", "collection_mismatch", "exit_code_mismatch", "tests_modified",
              "pytest_tampering", "builtins_tampering", "early_exit", "non_plain_result",
              "introspection", "thread_started", "reads_tests"}


class TestFilePayload(BaseModel):
    """The kind's own part of a task record."""

    model_config = ConfigDict(extra="forbid")
    __test__ = False

    test_file: str = Field(min_length=1, max_length=200_000,
                           description="the test source (pytest) or assert lines")
    format: Literal["pytest", "asserts"] = Field(
        "pytest", description="pytest: a pytest module; asserts: one plain `assert` per line "
        "(MBPP), each line a test named line_<n>, `import` lines as setup")
    module: str = Field("solution", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                        description="the module name the tests import the answer as")
    tests_expected: list[str] | None = Field(
        None, min_length=1, description="test names that must be collected (pytest: `test_f`, "
        "`TestC::test_m`, `test_p[id]`); null: every test the file defines")

    @field_validator("module")
    @classmethod
    def _not_reserved(cls, v: str) -> str:
        if v in _RESERVED or v in sys.stdlib_module_names:
            raise ValueError(f"{v!r} is reserved (the grader's or the standard library's)")
        return v


# -- the tests a task defines ------------------------------------------------------------------
def _is_fixture(fn: ast.AST) -> bool:
    return any("fixture" in ast.unparse(d) for d in getattr(fn, "decorator_list", ()))


def defined_tests(p: TestFilePayload) -> tuple[str, ...]:
    """The tests the file defines: pytest's `test_*` functions and `Test*` classes' `test_*`
    methods (the collection rules the grader's pytest.ini sets), or `line_<n>` per assert."""
    tree = pyast.parse(p.test_file)
    if p.format == "asserts":
        return tuple(f"line_{n.lineno}" for n in tree.body if isinstance(n, ast.Assert))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test_") and not _is_fixture(node):
                names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            body = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if not any(m.name == "__init__" for m in body):
                names += [f"{node.name}::{m.name}" for m in body
                          if m.name.startswith("test_") and not _is_fixture(m)]
    return tuple(dict.fromkeys(names))


def expected_tests(p: TestFilePayload) -> tuple[str, ...]:
    return tuple(p.tests_expected) if p.tests_expected else defined_tests(p)


def _pytest_name(name: str, fmt: str) -> str:
    """A reported name as pytest's node name (asserts' `line_3` is the function `test_line_3`)."""
    return f"test_{name}" if fmt == "asserts" else name


def runnable_tests(p: TestFilePayload) -> str:
    """The test module the sandbox runs: asserts lines become one test function each, and every
    value the tests compare is checked to be plain data (rewards/plain_compare.py)."""
    if p.format == "pytest":
        return plain_compare.rewrite(p.test_file)
    tree = pyast.parse(p.test_file)
    # the answer's public names, except any that would shadow a builtin the assert lines call
    setup = (f"import builtins as _rollforge_builtins, {p.module} as _rollforge_solution\n"
             "globals().update({_k: _v for _k, _v in vars(_rollforge_solution).items()\n"
             "                  if not _k.startswith(('__', 'test'))\n"
             "                  and _k not in vars(_rollforge_builtins)})\n")
    out: list[str] = []
    lines = p.test_file.splitlines()
    out += [lines[n.lineno - 1].strip() for n in tree.body if not isinstance(n, ast.Assert)]
    for n in tree.body:
        if isinstance(n, ast.Assert):
            out += [f"def test_line_{n.lineno}():", "    " + lines[n.lineno - 1].strip()]
    return plain_compare.rewrite("\n".join(out) + "\n", setup)


def payload_problems(task: Task) -> list[str]:
    """What is wrong with the test file, naming the field; [] when it can be graded."""
    p = TestFilePayload.model_validate(task.payload)
    try:
        tree = pyast.parse(p.test_file)
    except (SyntaxError, ValueError) as exc:
        return [f"field 'payload.test_file': does not parse: line {getattr(exc, 'lineno', '?')}: "
                f"{getattr(exc, 'msg', exc)}"]
    bad: list[str] = []
    if p.format == "asserts":
        for n in tree.body:
            if not isinstance(n, (ast.Assert, ast.Import, ast.ImportFrom)):
                bad.append(f"field 'payload.test_file': line {n.lineno}: only `assert` and "
                           f"`import` lines are allowed in format 'asserts'")
            elif getattr(n, "end_lineno", n.lineno) != n.lineno or [
                    m.lineno for m in tree.body].count(n.lineno) > 1:
                bad.append(f"field 'payload.test_file': line {n.lineno}: one statement per line")
    else:
        for n in ast.walk(tree):
            name = n.name if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else (
                n.id if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) else None)
            if name and name.startswith("pytest_"):
                bad.append(f"field 'payload.test_file': defines {name!r}: hooks and plugins "
                           f"belong to the grader (the test file must stand alone)")
        used = {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(tree)
                if isinstance(n, (ast.Attribute, ast.Name))}
        for word in sorted(used & {"skip", "skipif", "xfail", "importorskip"}):
            bad.append(f"field 'payload.test_file': uses {word!r}: a skipped test counts as "
                       f"failed and flags the candidate, so the tests may not skip")
    defined = defined_tests(p)
    if not defined:
        bad.append("field 'payload.test_file': defines no test (pytest: top-level `test_*` "
                   "functions or `Test*` classes' `test_*` methods; asserts: `assert` lines)")
    if p.tests_expected is not None:
        if len(set(p.tests_expected)) != len(p.tests_expected):
            bad.append("field 'payload.tests_expected': has duplicates")
        for name in p.tests_expected:
            if name.split("[")[0] not in defined:
                bad.append(f"field 'payload.tests_expected': {name!r} is not a test the file "
                           f"defines ({', '.join(defined) or 'none'})")
    if task.entry_point and not re.search(rf"^\s*def\s+{re.escape(task.entry_point)}\s*\(",
                                          task.prompt, re.M):
        bad.append(f"field 'entry_point': {task.entry_point!r} is not defined by a 'def' in "
                   f"the prompt")
    return bad


def solution_source(task: Task, answer: str) -> str:
    return task.prompt + answer if task.entry_point else answer


# -- static signals of the answer --------------------------------------------------------------
_PYTEST_MODULES = {"pytest", "_pytest", "pluggy", "py", "conftest", TEST_MODULE, "unittest"}
_GRADER_WORDS = ("conftest", "junit", "pytest", TEST_MODULE, ".xml", "rollforge")


def testfile_hack_flags(source: str, first_line: int) -> tuple[str, ...]:
    """Constructs with no honest use in an answer graded inside pytest's process: reaching for
    pytest or the test module, exit hooks, ending the process, defining pytest hooks."""
    tree = pyast.parse(source)
    flags: set[str] = set()
    for n in ast.walk(tree):
        if getattr(n, "lineno", first_line) < first_line:
            continue
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            for mod in (m.split(".")[0] for m in mods):
                if mod in _PYTEST_MODULES:
                    flags.add("pytest_tampering")
                elif mod in ("atexit", "faulthandler", "weakref"):
                    flags.add("exit_hook")
        elif isinstance(n, ast.Name) and n.id in ("SystemExit", "KeyboardInterrupt"):
            flags.add("exit_called")
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Name)):
            name = n.name if not isinstance(n, ast.Name) else n.id
            if name.startswith("pytest_") or name == "__test__":
                flags.add("pytest_tampering")
        elif isinstance(n, ast.Attribute) and n.attr in ("_exit", "abort"):
            flags.add("exit_called")
        elif isinstance(n, ast.Attribute) and n.attr in ("modules", "co_consts", "co_code"):
            flags.add("introspection")  # e.g. reading the expected values out of the tests
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            if any(w in n.value.lower() for w in _GRADER_WORDS):
                flags.add("file_access")
    return tuple(sorted(flags))



# -- running and judging -----------------------------------------------------------------------
def run_test_file(task: Task, answer: str, sandbox: Sandbox, limits: Limits,
                  per_test_timeout_s: float = 1.0) -> TestReport:
    """Run the task's tests on the answer in one pytest process and judge the reports."""
    p = TestFilePayload.model_validate(task.payload)
    names = expected_tests(p)
    n = len(names)
    source = solution_source(task, answer)
    try:
        pyast.parse(source)
    except (SyntaxError, ValueError):
        return TestReport(("error",) * n, ("SyntaxError",) * n, "syntax_error", None,
                          test_names=names)
    token = secrets.token_hex(8)
    junit, summary = f"report-{token}.xml", f".summary-{token}.json"
    tests = runnable_tests(p)
    config = {"nonce": token, "per_test": per_test_timeout_s, "summary": summary,
              "protected": [_TEST_FILE, _CONFTEST, _INI], "writable": [junit, summary],
              "tests": [_TEST_FILE, _CONFTEST, _INI], "candidate": [f"{p.module}.py"],
              "preimport": p.module, "plain": True, "threads": "deny"}
    plugin = _PLUGIN.replace("@@CONFIG@@", repr(config))
    files = {f"{p.module}.py": source, _TEST_FILE: tests, _CONFTEST: plugin, _INI: _INI_SOURCE}
    targets = ([f"{_TEST_FILE}::{_pytest_name(t, p.format)}" for t in p.tests_expected]
               if p.tests_expected else [_TEST_FILE])
    argv = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:timeout",
            "-p", "no:anyio", "-c", _INI, "--capture=sys", "--tb=short", "--color=no",
            f"--junitxml={junit}", *targets]
    run_limits = replace(limits, timeout_s=per_test_timeout_s * n + limits.timeout_s,
                         output_bytes=max(limits.output_bytes, _REPORT_CAP))
    res = sandbox.run(files, argv, run_limits,
                      collect=[junit, summary, _TEST_FILE, _CONFTEST, _INI])
    if res.status == "infra_error":
        return TestReport(("missing",) * n, (), "infra_error", res, test_names=names)
    if f"ROLLFORGE-LOADED {token}" not in res.stderr:
        # pytest or the plugin never started (no pytest in the sandbox, an interpreter that could
        # not start): the candidate's code never ran, so this is the host's failure, not its
        tail = (res.stderr.strip().splitlines() or [res.status])[-1][:300]
        return TestReport(("missing",) * n, (), "infra_error", res, (),
                          f"pytest did not start in the sandbox: {tail}", test_names=names)
    return judge(p, names, res, junit, summary, token,
                 {_TEST_FILE: tests, _CONFTEST: plugin, _INI: _INI_SOURCE})


def _parse_junit(text: str | None) -> dict[str, str] | None:
    """junit XML -> {test name: passed|failed|skipped} ("" keys the module's collection); None
    when absent or not what pytest writes."""
    cases = junit_cases(text, _REPORT_CAP)
    if cases is None:
        return None
    out: dict[str, str] = {}
    for cls, name, outcome, _ in cases:
        if cls == "" and name == TEST_MODULE:
            key = ""
        elif cls == "pytest" and name == "internal":
            key = "<internal>"
        elif cls == TEST_MODULE:
            key = name
        elif cls.startswith(TEST_MODULE + "."):
            key = f"{cls[len(TEST_MODULE) + 1:]}::{name}"
        else:
            return None  # not a test of the task's file (e.g. an internal error entry)
        if RANK[outcome] >= RANK[out.get(key, "passed")]:
            out[key] = outcome
    return out


def _parse_summary(text: str | None, nonce: str) -> dict | None:
    """The plugin's record, or None when absent or of any other shape than the plugin writes."""
    return read_summary(text, nonce, _REPORT_CAP)


def _coarse(outcome: str) -> str:
    return outcome if outcome in ("passed", "skipped") else "failed"


def judge(p: TestFilePayload, names: tuple[str, ...], res: ExecResult, junit: str,
          summary: str, nonce: str, originals: dict[str, str]) -> TestReport:
    """Per-test outcomes from the run's two records, trusting neither alone."""
    n = len(names)
    flags = list(dict.fromkeys(
        f for tok, f in _FLAG_LINE.findall(res.stderr) if tok == nonce))
    if any(res.files.get(k) != v for k, v in originals.items()):
        flags.append("tests_modified")
    xml_text, sum_text = res.files.get(junit), res.files.get(summary)
    cases, rec = _parse_junit(xml_text), _parse_summary(sum_text, nonce)
    killed = res.status in ("timeout", "memory_exceeded")

    def report(outcomes, errors=(), load_error=None):
        fl = tuple(dict.fromkeys(flags))
        if set(fl) & _UNTRUSTED:
            outcomes = tuple("failed" if o == "passed" else o for o in outcomes)
        return TestReport(tuple(outcomes), tuple(errors), res.status, res, fl, load_error,
                          test_names=names)

    if cases is None or rec is None:
        if not killed and (xml_text is not None or sum_text is not None):
            flags.append("forged_report")  # a record pytest and the plugin never wrote
        if res.exit_code == 0:
            flags.append("early_exit")  # success claimed without the reports
        return report((missing_outcome(res),) * n)
    prefix = _TEST_FILE + "::"
    outcomes = {k[len(prefix):] if k.startswith(prefix) else k: v
                for k, v in rec["outcomes"].items()}
    errors = {k[len(prefix):] if k.startswith(prefix) else k: str(v)[:64]
              for k, v in rec["errors"].items()}
    mine = {k: _coarse(v) for k, v in outcomes.items()}
    if rec["collect_errors"]:
        mine[""] = "skipped" if all(e[1] == "Skipped" for e in rec["collect_errors"]) else "failed"
    if rec["internal_error"]:
        mine["<internal>"] = "failed"
    flags += [f for f in rec["flags"] if re.fullmatch(r"[a-z_]{1,40}", f)]
    if mine != cases:
        flags.append("forged_report")
        return report(("failed",) * n)
    if rec["exitstatus"] != res.exit_code:
        flags.append("exit_code_mismatch")  # the process ended with another code than pytest's
    if rec["collect_errors"] and all(e[1] == "Skipped" for e in rec["collect_errors"]):
        return report(("failed",) * n)  # skipped at import: flagged by the plugin
    if rec["collect_errors"] or rec["internal_error"]:  # the module never loaded: all errored
        etype, text = _load_error(rec)
        if res.exit_code == 0:
            flags.append("exit_code_mismatch")
        return report(("error",) * n, (etype,) * n, load_error=text[:400])
    by_name = _nodes_of(names, outcomes, p.format)
    if by_name is None or set(rec["collected"]) != set(rec["outcomes"]):
        flags.append("collection_mismatch")
        return report(("failed",) * n)
    result, etypes = _per_test(names, by_name, outcomes, errors)
    ok = all(o in ("passed", "skipped") for o in outcomes.values())
    if (res.exit_code == 0) != ok:
        flags.append("exit_code_mismatch")
    if "skipped" in outcomes.values():
        flags.append("skipped_test")
    return report(result, etypes)


def _load_error(rec: dict) -> tuple[str, str]:
    """The error type and text of a test module that never loaded (a collection error or
    pytest's internal error), from the plugin's summary."""
    text = " ".join(e[1] for e in rec["collect_errors"]) or str(rec["internal_error"])
    m = _EXC_NAME.findall(text) or re.findall(r"^([A-Za-z_][\w.]*):", text, re.M)
    return (m[-1] if m else text.split(":")[0] or "CollectError").split(".")[-1][:64], text


def _nodes_of(names: tuple[str, ...], outcomes: dict[str, str], fmt: str
              ) -> dict[str, list[str]] | None:
    """Each test's pytest nodes (a parametrized test has several); None when a node is no
    test's or a test has no node."""
    by_name: dict[str, list[str]] = {t: [] for t in names}
    want = {_pytest_name(t, fmt): t for t in names}
    for node in outcomes:
        t = want.get(node) or want.get(node.split("[")[0])
        if t is None:
            return None
        by_name[t].append(node)
    return None if any(not v for v in by_name.values()) else by_name


def _per_test(names: tuple[str, ...], by_name: dict[str, list[str]], outcomes: dict[str, str],
              errors: dict[str, str]) -> tuple[list[Outcome], list[str]]:
    """Each test's outcome, the worst of its nodes' (a skip fails), and the error type of each
    that errored or timed out."""
    result: list[Outcome] = []
    etypes: list[str] = []
    for t in names:
        worst = max((outcomes[node] for node in by_name[t]), key=RANK.__getitem__)
        result.append("failed" if worst == "skipped" else worst)  # type: ignore[arg-type]
        if worst in ("error", "timeout"):
            etypes.append(next((errors[nd] for nd in by_name[t] if nd in errors), worst))
    return result, etypes

