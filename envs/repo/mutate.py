"""Bugs synthesized into real source by small AST changes (SWE-smith's procedural mutations).

Each operator family finds sites in a module and rewrites one node; the new text replaces only
that node's span of the source, so a mutant is a one-line diff in the file as it was (no
reformatting by `ast.unparse` of the whole module). Sites are enumerated in source order and
named `path:line:col:family`, so the same source gives the same mutants on every machine.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from typing import Callable, Iterator

from rewards import pyast

_FLIP = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
         ast.NotIn: ast.In}
_ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.FloorDiv: ast.Mult, ast.Mult: ast.FloorDiv}


@dataclass(frozen=True)
class Mutant:
    path: str
    line: int
    family: str
    old: str  # the node's source text before
    new: str  # and after
    source: str  # the whole mutated module

    @property
    def site(self) -> str:
        return f"{self.path}:{self.line}:{self.family}"


def _flip_compare(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
        new = copy.deepcopy(node)
        new.ops = [_FLIP[type(node.ops[0])]()]
        return new
    return None


def _plus_one(e: ast.expr) -> ast.expr:
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return ast.Constant(e.value + 1)
    return ast.BinOp(copy.deepcopy(e), ast.Add(), ast.Constant(1))


def _off_by_one(node: ast.AST) -> ast.AST | None:
    """range(n) -> range(n + 1), range(a, b) -> range(a, b + 1); a[i:j] -> a[i:j + 1] (or the
    lower bound when there is no upper one)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" \
            and 1 <= len(node.args) <= 2 and not node.keywords \
            and not any(isinstance(a, ast.Starred) for a in node.args):
        new = copy.deepcopy(node)
        new.args[-1] = _plus_one(node.args[-1])
        return new
    if isinstance(node, ast.Slice) and node.step is None and (node.upper or node.lower):
        new = copy.deepcopy(node)
        if node.upper is not None:
            new.upper = _plus_one(node.upper)
        else:
            new.lower = _plus_one(node.lower)
        return new
    return None


def _remove_branch(node: ast.AST) -> ast.AST | None:
    """`if cond:` -> `if False:` (the branch never runs; its `else`, if any, always does)."""
    if isinstance(node, ast.expr) and getattr(node, "_rf_if_test", False) and not (
            isinstance(node, ast.Constant)):
        return ast.Constant(False)
    return None


def _swap_args(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Call) and len(node.args) >= 2 and not any(
            isinstance(a, ast.Starred) for a in node.args[:2]) \
            and ast.dump(node.args[0]) != ast.dump(node.args[1]):
        new = copy.deepcopy(node)
        new.args[0], new.args[1] = new.args[1], new.args[0]
        return new
    return None


def _wrong_constant(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return ast.Constant(node.value + 1)
    if isinstance(node, ast.Constant) and type(node.value) is bool:
        return ast.Constant(not node.value)
    return None


def _drop_return(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        return ast.Return(None)
    return None


def _swap_bool_op(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return new
    return None


def _swap_arith(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH and not (
            isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
        new = copy.deepcopy(node)
        new.op = _ARITH[type(node.op)]()
        return new
    return None


FAMILIES: dict[str, Callable[[ast.AST], ast.AST | None]] = {
    "flip_comparison": _flip_compare,
    "off_by_one": _off_by_one,
    "remove_branch": _remove_branch,
    "swap_arguments": _swap_args,
    "wrong_constant": _wrong_constant,
    "drop_return": _drop_return,
    "swap_bool_op": _swap_bool_op,
    "swap_arithmetic": _swap_arith,
}


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and n.body and isinstance(n.body[0], ast.Expr) \
                and isinstance(n.body[0].value, ast.Constant):
            out.add(id(n.body[0].value))
    return out


def _skipped(tree: ast.AST) -> set[int]:
    """Nodes under `if __name__ == ...`, `if TYPE_CHECKING`, version checks and decorators:
    mutations there do nothing a test sees, or break the import for a reason no fix teaches."""
    out: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If):
            text = ast.unparse(n.test)
            if any(w in text for w in ("__name__", "TYPE_CHECKING", "version_info", "PY")):
                out.update(id(m) for m in ast.walk(n))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for d in n.decorator_list:
                out.update(id(m) for m in ast.walk(d))
        if isinstance(n, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)):
            out.update(id(m) for m in ast.walk(n))
    return out


def _splice(lines: list[bytes], node: ast.AST, text: str) -> str:
    """The module with `node`'s span (one line) replaced by `text` (columns are UTF-8 bytes)."""
    i = node.lineno - 1
    line = lines[i]
    new = line[:node.col_offset] + text.encode() + line[node.end_col_offset:]
    return b"".join(lines[:i] + [new] + lines[i + 1:]).decode()


def mutants(path: str, source: str) -> Iterator[Mutant]:
    """Every single-site mutant of the module, in source order then family order. Only nodes
    on one line are changed (the diff stays a one-line change), and the result must compile."""
    tree = pyast.parse(source)
    for m in ast.walk(tree):  # the tests of `if` statements are the remove_branch sites
        if isinstance(m, ast.If):
            m.test._rf_if_test = True  # type: ignore[attr-defined]
    lines = source.encode().splitlines(keepends=True)
    skip = _skipped(tree) | _docstring_nodes(tree)
    nodes = sorted((n for n in ast.walk(tree) if hasattr(n, "lineno") and id(n) not in skip
                    and n.lineno == getattr(n, "end_lineno", None)),
                   key=lambda n: (n.lineno, n.col_offset, -n.end_col_offset, type(n).__name__))
    seen: set[str] = set()
    for n in nodes:
        old = ast.get_source_segment(source, n)
        if old is None:
            continue
        for family, op in FAMILIES.items():
            new_node = op(n)
            if new_node is None:
                continue
            new = ast.unparse(new_node)
            if isinstance(n, ast.Slice):
                new = new.strip("()")
            if new == old:
                continue
            mutated = _splice(lines, n, new)
            try:
                compile(mutated, path, "exec")
            except (SyntaxError, ValueError):
                continue
            if mutated in seen:
                continue
            seen.add(mutated)
            yield Mutant(path, n.lineno, family, old, new, mutated)

