"""Every parse of Python source in the product goes through `rewards.pyast.parse` (one lock):
CPython 3.11's AST constructor shares a recursion counter between threads, and two threads
parsing at once can fail a correct program with "SystemError: AST constructor recursion depth
mismatch" (python/cpython#106905); it failed the canonical HumanEval scoring test once here."""
import ast
import re
from pathlib import Path

from rewards import pyast

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("envs", "flows", "rewards", "sandbox", "storage", "tasks", "training")


def test_the_locked_parse_gives_the_tree_ast_parse_gives():
    src = "def f(x):\n    return [y * 2 for y in range(x) if y % 3]\n"
    assert ast.dump(pyast.parse(src)) == ast.dump(ast.parse(src))
    assert ast.dump(pyast.parse("x + 1", mode="eval")) == ast.dump(ast.parse("x + 1", mode="eval"))


def test_no_product_module_calls_ast_parse_itself():
    offenders = []
    for pkg in PRODUCT:
        for path in (ROOT / pkg).rglob("*.py"):
            if path == ROOT / "rewards" / "pyast.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"(?<![\w.])ast\.parse\(|PyCF_ONLY_AST", line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert offenders == [], offenders
