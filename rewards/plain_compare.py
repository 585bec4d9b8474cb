"""Tests that compare plain values only: a rewrite of a test module's source.

A test that runs in the candidate's process and says `assert f(x) == y` lets the candidate
decide the comparison: `f` can return an object whose `__eq__` always says yes (built with
`type(...)`, no `class` statement needed), and every such test passes. The rewrite passes every
operand of a value comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`, `in`, `not in`), and the
value an `assert` tests for truth, through a checker that lets through only plain data (None,
bool, numbers, str, bytes, and lists, tuples, sets, dicts of them, subclasses that decide
nothing themselves such as namedtuples), and otherwise fails the test with the flag
`non_plain_result`. `pytest.approx(x)` stays the test's own object; its `x` is checked.
Identity tests (`is`, `is not`) are left alone: no method of the operand decides them.

The checker is the grader plugin's (envs/testfile/plugin/values.py), imported by a first line the
rewrite adds from a module that exists only while the tests are collected; the plugin checks
before and after every test that the test module still holds it and is otherwise as collected.
"""
from __future__ import annotations

import ast

from rewards import pyast

CHECKER = "__rollforge_plain__"
# A module imported again after the collection (pickle looking up a test's function) is not
# the one whose tests are graded: it gets no checker, and checks nothing.
PRELUDE = (f"try:\n    from _rollforge_plain import check as {CHECKER}\n"
           f"except ImportError:\n    {CHECKER} = lambda v, k=0: v\n")
_VALUE_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)


def _call(node: ast.expr, pair: int = 0) -> ast.expr:
    args = [node, ast.Constant(pair)] if pair else [node]
    return ast.Call(ast.Name(CHECKER, ast.Load()), args, [])


def _is_approx(node: ast.expr) -> bool:
    f = node.func if isinstance(node, ast.Call) else None
    return (isinstance(f, ast.Name) and f.id == "approx") or (
        isinstance(f, ast.Attribute) and f.attr == "approx")


class _Rewrite(ast.NodeTransformer):
    """Each operand through the checker. The two operands of a lone `==` carry a pair id (k on
    the left, -k on the right, k unique in the module): the checker sees both sides of that
    comparison, in order, and can test the one that is not plain data against the other
    (envs/testfile/plugin/values.py: values next to the test's own constant). Not `!=`: there
    the plain side is what the value must differ from, and a value next to it may be the
    value's own (`caseless("x") != "y"`, and "x" is next to "y")."""

    def __init__(self) -> None:
        self.pairs = 0

    def _operand(self, node: ast.expr, pair: int = 0) -> ast.expr:
        if _is_approx(node) and node.args:
            node.args[0] = _call(node.args[0])
            return node
        return _call(node, pair)

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        if not any(isinstance(op, _VALUE_OPS) for op in node.ops):
            return node
        pair = 0
        if len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            self.pairs += 1
            pair = self.pairs
        node.left = self._operand(node.left, pair)
        node.comparators = [self._operand(c, -pair) for c in node.comparators]
        return node

    def _truth(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.BoolOp):
            node.values = [self._truth(v) for v in node.values]
            return node
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            node.operand = self._truth(node.operand)
            return node
        if isinstance(node, ast.Compare) or isinstance(node, ast.Constant):
            return node  # a comparison's own result is a bool of the operands' deciding
        return _call(node)

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        self.generic_visit(node)
        node.test = self._truth(node.test)
        return node


def rewrite(source: str, setup: str = "") -> str:
    """The test module with every value comparison's operands checked to be plain data;
    `setup` (the grader's own lines) runs first, as it is."""
    tree = _Rewrite().visit(pyast.parse(source))
    ast.fix_missing_locations(tree)
    body = ast.unparse(tree)
    # `from __future__` must stay first
    futures = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    head = "".join(ast.unparse(n) + "\n" for n in futures)
    if futures:
        tree.body = [n for n in tree.body if n not in futures]
        body = ast.unparse(tree)
    return head + PRELUDE + setup + body + "\n"
