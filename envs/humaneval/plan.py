"""Turn a HumanEval `check(candidate)` into candidate calls (run in the sandbox) and asserts
(judged here, in the grader's process, on the plain values that come back).

Planning runs the test's own code once, in the grader, with `candidate` rewritten away:
- `assert E` where E calls the candidate: each call's arguments are evaluated where the assert
  stands and recorded; E is kept with each call replaced by the value that will come back;
- `x = candidate(...)`: recorded, and `x` is bound to a placeholder that later asserts may read
  (HumanEval/32 checks `poly(coeffs, solution)` that way);
- an assert that does not involve the candidate is evaluated at once and not counted.
Anything else (a candidate call in a loop header, inside a comprehension, passed around, a
placeholder used in control flow) makes the check *unplannable*: `plan_check` raises
`Unplannable` and the caller decides what to do.

Helpers the test uses (`poly`, `encode_cyclic`) come from the *prompt*, executed here, so a
completion that redefines them cannot change what is checked. `random` in the test is a private,
seeded instance: every sample of a task gets the same calls.
"""
from __future__ import annotations

import ast
import builtins
import copy
import functools
import hashlib
import random
import types
from dataclasses import dataclass, field
from typing import Any

from rewards import pyast, wire


class Unplannable(ValueError):
    """The check has a shape whose verdict could not be kept outside the sandbox."""


@dataclass(frozen=True)
class DeferredAssert:
    source: str  # the assert as written in the test, for reports
    code: types.CodeType  # its condition, with candidate calls replaced by __rf_v0, __rf_v1...
    call_ids: tuple[int, ...]  # planned call behind each __rf_v<j>
    env: dict[str, Any] = field(repr=False)  # local names it reads, as they were at the assert
    pending: dict[str, int] = field(repr=False)  # local name -> call id whose value it holds


@dataclass(frozen=True)
class Plan:
    calls: tuple[Any, ...]  # wire-encoded (args, kwargs) of every candidate call, in order
    asserts: tuple[DeferredAssert, ...]
    namespace: dict[str, Any] = field(repr=False)  # the test module's globals + prompt helpers


class _Pending:
    """Stands for a candidate result during planning; any use of it makes the check unplannable."""

    __slots__ = ("call_id",)

    def __init__(self, call_id: int) -> None:
        self.call_id = call_id

    def _refuse(self, *a, **k):
        raise Unplannable("a candidate result is used outside an assert")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __len__ = _refuse
    __iter__ = __getitem__ = __add__ = __sub__ = __mul__ = __call__ = __hash__ = _refuse
    __contains__ = __index__ = __int__ = __float__ = _refuse

    def __deepcopy__(self, memo):
        return self


def _copy(v: Any) -> Any:
    """A private copy of a test-side value (modules and functions are shared, not copied)."""
    if isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)):
        return v
    return copy.deepcopy(v)


def _is_candidate_call(node: ast.AST, names: frozenset[str]) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in names)


def _candidate_calls(node: ast.AST, names: frozenset[str]) -> list[ast.Call]:
    return [n for n in ast.walk(node) if _is_candidate_call(n, names)]


_SCOPES = (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)
_Where = tuple[ast.AST, "ast.AST | None", "str | None", "int | None"]


def _tree(root: ast.AST) -> list[_Where]:
    """Every node under `root` in `ast.walk`'s order, each with where it hangs: (node, parent,
    field, index in the field's list or None)."""
    out: list[_Where] = [(root, None, None, None)]
    for node, _, _, _ in out:  # (the list grows as it is read: breadth first)
        for fld in node._fields:
            v = getattr(node, fld, None)
            if isinstance(v, ast.AST):
                out.append((v, node, fld, None))
            elif isinstance(v, list):
                out.extend((x, node, fld, i) for i, x in enumerate(v) if isinstance(x, ast.AST))
    return out


def _located(new: ast.AST, old: ast.AST) -> ast.AST:
    """`new` at `old`'s place in the source, as `ast.fix_missing_locations` would put a node
    the rewrite made under `old` (so the whole tree needs no second pass)."""
    for attr in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
        setattr(new, attr, getattr(old, attr))
    return new


def _statements(node: ast.AST):
    """`node` and every statement nested in it (function and class definitions are statements,
    never parts of an expression)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for fld in ("body", "orelse", "finalbody", "handlers", "cases"):
            v = getattr(n, fld, None)
            if isinstance(v, list):
                todo.extend(x for x in v if isinstance(x, (ast.stmt, ast.excepthandler,
                                                           ast.match_case)))


class _Rewriter(ast.NodeTransformer):
    """Rewrites check's body for planning; collects each assert's judged expression."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names  # `candidate`, and the entry point's own name (HumanEval/33 uses it)
        self.asserts: list[tuple[str, types.CodeType, frozenset[str], int]] = []

    def _args_call(self, call: ast.Call) -> ast.Call:
        for a in call.args + [k.value for k in call.keywords]:
            if _candidate_calls(a, self.names):
                raise Unplannable("candidate call nested in a candidate call's arguments")
        return _located(ast.Call(_located(ast.Name("__rf_args", ast.Load()), call), call.args,
                                 call.keywords), call)

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        # One breadth-first pass over the condition (ast.walk's order, which numbers the calls)
        # tells, for each node, whether it lies in a candidate call's arguments.
        source = ast.unparse(node)
        names = self.names
        nodes = _tree(node.test)
        below: dict[int, bool] = {}  # id(node) -> inside a candidate call
        calls: list[tuple[ast.Call, ast.AST | None, str | None, int | None]] = []
        for n, parent, fld, idx in nodes:
            if parent is None:
                below[id(n)] = False
            else:
                below[id(n)] = below[id(parent)] or _is_candidate_call(parent, names)
            if _is_candidate_call(n, names):
                calls.append((n, parent, fld, idx))
            elif isinstance(n, _SCOPES) and _candidate_calls(n, names):
                raise Unplannable("candidate called inside a comprehension or lambda")
        if any(below[id(c)] for c, _, _, _ in calls):
            raise Unplannable("candidate call nested in a candidate call's arguments")
        phase1 = [_located(ast.Call(_located(ast.Name("__rf_args", ast.Load()), node), c.args,
                                    c.keywords), node) for c, _, _, _ in calls]
        body = node.test
        for j, (c, parent, fld, idx) in enumerate(calls):  # each by the value it will return
            v = ast.copy_location(ast.Name(f"__rf_v{j}", ast.Load()), c)
            if parent is None:
                body = v
            elif idx is None:
                setattr(parent, fld, v)
            else:
                getattr(parent, fld)[idx] = v
        read = {n.id for n, _, _, _ in nodes if type(n) is ast.Name and not below[id(n)]
                and not _is_candidate_call(n, names)}
        read.update(f"__rf_v{j}" for j in range(len(calls)))
        if read & names:
            raise Unplannable("candidate used other than as a call in an assert")
        code = compile(ast.Expression(body), "<humaneval assert>", "eval")
        aid = len(self.asserts)
        self.asserts.append((source, code, frozenset(read), len(calls)))
        call = ast.Call(_located(ast.Name("__rf_defer", ast.Load()), node),
                        [_located(ast.Constant(aid), node),
                         _located(ast.Call(_located(ast.Name("locals", ast.Load()), node), [],
                                           []), node), *phase1], [])
        return _located(ast.Expr(_located(call, node)), node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if _is_candidate_call(node.value, self.names):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise Unplannable("candidate result unpacked or assigned to a non-name")
            args = self._args_call(node.value)
            node.value = _located(ast.Call(_located(ast.Name("__rf_pending", ast.Load()), node),
                                           [_located(args, node)], []), node)
            _located(args.func, node)
            return node
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            raise Unplannable("candidate used other than as a call in an assert or assignment")
        return node


def _seeded_import(seed: int):
    rng = random.Random(seed)
    fake = types.ModuleType("random")
    for name in dir(random):
        obj = getattr(random, name)
        fake.__dict__[name] = getattr(rng, name) if isinstance(obj, types.MethodType) else obj
    real_import = builtins.__import__

    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "random":
            return fake
        return real_import(name, globals, locals, fromlist, level)
    return _import


def _rewrite_check(tree: ast.Module, entry_point: str) -> _Rewriter:
    """Rewrites the test's `check(candidate)` in `tree`, in place, for the planning pass; the
    rewriter, which holds each assert's judged expression. Refuses a check it cannot plan."""
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        raise Unplannable("test has no `def check(candidate)`")
    check = checks[0]
    # The test may call the solution by its own name too (HumanEval/33 compares the candidate
    # with `sort_third(...)`, which in the package's harness is the completion's own function):
    # such calls are candidate calls, so the package's semantics are kept.
    rewriter = _Rewriter(frozenset({check.args.args[0].arg, entry_point}))
    check.body = [rewriter.visit(s) for s in check.body]
    for n in _statements(check):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not check:
            raise Unplannable("check defines nested functions or classes")
    return rewriter


def plan_check(prompt: str, test_source: str, entry_point: str) -> Plan:
    """Run the test's planning pass; raise Unplannable if its verdict can't be kept outside."""
    tree = pyast.parse(test_source)
    rewriter = _rewrite_check(tree, entry_point)
    seed = int.from_bytes(hashlib.sha256(test_source.encode()).digest()[:4], "big")
    ns: dict[str, Any] = {"__builtins__": dict(vars(builtins), __import__=_seeded_import(seed)),
                          "__name__": "humaneval_test"}
    exec(compile(prompt, "<prompt>", "exec"), ns)  # trusted: helpers such as poly()
    ns.pop(entry_point, None)  # the test must reach the solution through `candidate` only
    calls: list[Any] = []
    deferred: list[DeferredAssert] = []

    def rf_args(*args, **kwargs):
        try:
            return wire.encode((args, kwargs))
        except wire.NonPlainResult as exc:
            raise Unplannable(f"candidate argument is not plain data: {exc}") from None

    def rf_pending(encoded):
        calls.append(encoded)
        return _Pending(len(calls) - 1)

    def rf_defer(aid, local_vars, *encoded_calls):
        source, code, names, _ = rewriter.asserts[aid]
        env, pending = {}, {}
        for n in names:
            if n in local_vars:
                v = local_vars[n]
                if isinstance(v, _Pending):
                    pending[n] = v.call_id
                else:
                    env[n] = _copy(v)
        if not encoded_calls and not pending:
            if not eval(code, {**ns, **env}):  # an assert about the test itself
                raise Unplannable(f"assert without the candidate fails: {source}")
            return
        ids = []
        for enc in encoded_calls:
            calls.append(enc)
            ids.append(len(calls) - 1)
        deferred.append(DeferredAssert(source, code, tuple(ids), env, pending))

    ns.update(__rf_args=rf_args, __rf_pending=rf_pending, __rf_defer=rf_defer)
    exec(compile(tree, "<humaneval test>", "exec"), ns)
    try:
        ns["check"](None)
    except Unplannable:
        raise
    except Exception as exc:
        raise Unplannable(f"planning pass raised {type(exc).__name__}: {exc}") from None
    for k in ("__rf_args", "__rf_pending", "__rf_defer"):
        ns.pop(k)
    if not deferred:
        raise Unplannable("check has no assert that involves the candidate")
    return Plan(tuple(calls), tuple(deferred), ns)


@functools.lru_cache(maxsize=1024)
def cached_plan(prompt: str, test_source: str, entry_point: str) -> Plan | Unplannable:
    try:
        return plan_check(prompt, test_source, entry_point)
    except Unplannable as exc:
        return exc


Result = tuple[str, Any]  # ("value", wire data) | ("error", type name) | ("timeout", None)


def judge(plan: Plan, results: dict[int, Result], missing: str = "missing"
          ) -> list[tuple[str, str | None]]:
    """Outcome of each deferred assert: (passed|failed|error|timeout|missing, error type)."""
    out: list[tuple[str, str | None]] = []
    for a in plan.asserts:
        needed = list(a.call_ids) + list(a.pending.values())
        bad = None
        for cid in needed:
            kind, payload = results.get(cid, (missing, None))
            if kind != "value":
                bad = (kind, payload)
                break
        if bad is not None:
            out.append(bad)
            continue
        try:
            vals = {f"__rf_v{j}": wire.decode(results[cid][1]) for j, cid in enumerate(a.call_ids)}
            vals.update({n: wire.decode(results[cid][1]) for n, cid in a.pending.items()})
        except wire.MalformedValue:
            out.append(("error", "MalformedValue"))
            continue
        try:
            env = {k: _copy(v) for k, v in a.env.items()}
            ok = bool(eval(a.code, {**plan.namespace, **env, **vals}))
        except Exception:  # noqa: BLE001 - a wrong value that breaks the comparison is a failure
            ok = False
        out.append(("passed", None) if ok else ("failed", None))
    return out
