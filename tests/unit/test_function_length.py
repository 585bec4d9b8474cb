"""No function of the package code is longer than 60 lines (issue #35).

What is measured: every function and method (nested ones too, each on its own) of every module
under the package folders below, parsed with `ast` (nothing is imported). Its length is
`end_lineno - lineno + 1`: from its `def` line to its last line, so the signature, the
docstring, comments and blank lines inside it count, and its decorators do not. A nested
function counts inside the one that holds it as well. Bench and tests are not package code;
virtual environments, package builds (git-ignored copies) and data folders are skipped.

Why 60: a function that fits on a screen is read whole; past that a reader keeps a stack of
what came before, and the parts usually want names of their own (STYLE.md: TRL's and verl's
600- and 400-line methods are what we leave).

Where the code is longer today, the function is listed below with its current length. The
list may only shrink: a test fails when a listed function grows, when it is gone or now short
enough (its entry is then deleted with the fix), and when it is shorter than listed (its number
is lowered), so that the list stays true.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sandbox", "tasks", "rewards", "envs", "storage", "training", "engine", "flows",
            "gateway")
SKIPPED_FOLDERS = {"build", "data", "site-packages", "__pycache__"}
LIMIT = 60

# "path::Qualified.name": its length today. Split it, then delete its line. Empty now: every
# function is within the limit; a new entry is a step back, to be taken out with its fix.
LONG: dict[str, int] = {}


def _skipped(rel: Path) -> bool:
    return any(p in SKIPPED_FOLDERS or "venv" in p for p in rel.parts[:-1])


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, length) of every function in `tree`, methods named by their class."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:  # functions under `if`, `try`, `with`: named as if at this level
            yield from _functions(node, prefix)


@lru_cache(maxsize=1)
def lengths() -> dict[str, int]:
    """"path::name" -> length, for every function of the package code."""
    out: dict[str, int] = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT)
            if _skipped(rel):
                continue
            for name, n in _functions(ast.parse(f.read_text(), str(f))):
                key = f"{rel.as_posix()}::{name}"
                out[key] = max(n, out.get(key, 0))  # two defs of one name: the longer one
    return out


def test_the_measure_counts_from_the_def_line_to_the_last_without_decorators():
    tree = ast.parse("@dec\n"
                     "def f(a,\n"
                     "      b):\n"
                     '    """Doc."""\n'
                     "\n"
                     "    def inner():\n"
                     "        return 1\n"
                     "    return a\n"
                     "class C:\n"
                     "    def m(self):\n"
                     "        pass\n")
    assert dict(_functions(tree)) == {"f": 7, "f.inner": 2, "C.m": 2}


def test_every_package_is_measured_and_venvs_builds_and_data_are_not():
    found = lengths()
    assert {k.split("/")[0] for k in found} == set(PACKAGES)
    assert "training/trainer.py::grpo_update" in found
    assert not any(_skipped(Path(k.split("::")[0])) for k in found)
    assert _skipped(Path("envs/verifiers/example_env/build/lib/x/__init__.py"))
    assert _skipped(Path("envs/testfile/data/build_basics.py"))


def test_no_function_of_the_package_code_is_longer_than_60_lines():
    long = {k: n for k, n in lengths().items() if n > LIMIT}
    new = {k: n for k, n in long.items() if k not in LONG}
    assert not new, (f"functions over {LIMIT} lines (split them into named helpers): "
                     f"{sorted(new.items(), key=lambda kv: -kv[1])}")
    grown = {k: (LONG[k], n) for k, n in long.items() if k in LONG and n > LONG[k]}
    assert not grown, f"listed functions grew (listed, now); split them instead: {grown}"


def test_the_list_of_long_functions_only_shrinks():
    found = lengths()
    gone = sorted(k for k in LONG if k not in found)
    short = sorted(k for k in LONG if k in found and found[k] <= LIMIT)
    assert not gone, (f"listed in tests/unit/test_function_length.py but gone from the code "
                      f"(delete them from LONG): {gone}")
    assert not short, (f"now at most {LIMIT} lines (delete them from LONG in "
                       f"tests/unit/test_function_length.py): {short}")
    shrunk = {k: (LONG[k], found[k]) for k in LONG if LIMIT < found[k] < LONG[k]}
    assert not shrunk, f"shorter than listed (listed, now); lower their entries: {shrunk}"
