"""The layers of the package code hold, checked over its import graph.

The graph: every module under the packages below, parsed with `ast` (nothing is imported), an
edge for every `import` and `from ... import` of another of these modules, at the top of a
module or inside a function (an import put in a function to dodge a cycle still ties the two
modules), relative imports resolved. `from pkg import name` is an edge to `pkg.name` when that
is a module, else to `pkg`.

The layers, lowest first (a package may import its own layer's and lower ones, never a higher):

    sandbox  ->  tasks, rewards  ->  envs  ->  storage, training, engine  ->  flows, gateway

`engine/` (the sampling boundary, the vLLM server, weight sync) sits beside `training/`: it uses
training's sample records and tokenizers, and the flows drive both. `gateway/` sits beside
`flows/`: it serves the sampler that `flows/sampler.py` chooses for a run's config
(`flows/config.py`), and the CLI in `flows/` starts it. Packages of one layer may import each
other; the cycle rule keeps them from doing it in a circle.

An import under `if TYPE_CHECKING:` names a type for annotations and never runs: it counts for
the layers (a lower layer does not name a higher one's types either), not for cycles (a helper
module may annotate with the class that owns it).

Prefect, Dask and `distributed` are imported only under `flows/`: the other layers are plain
Python a unit test calls directly (a Dask client may be handed down as an object; its library is
not imported). No module imports another in a cycle. No private name (`_x`) is imported from
another module: what a module shares is public. The tests keep that rule too: they go through
the public surface, so no test imports a private name of the package code or of `bench/`.

Where the code breaks a rule today, the breach is listed below by name, with why it is not
fixed yet. The lists must shrink: a test fails when a listed breach is gone, so that its entry
is deleted with the fix and the lists stay true.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYER = {"sandbox": 0, "tasks": 1, "rewards": 1, "envs": 2, "storage": 3, "training": 3,
         "engine": 3, "flows": 4, "gateway": 4}
ORCHESTRATION = ("prefect", "dask", "distributed")
ORCHESTRATION_HOME = ("flows",)

# (importer, imported): a lower layer's import of a higher one.
LAYER_BREACHES: set[tuple[str, str]] = set()

# Modules outside flows/ that import Prefect, Dask or distributed.
ORCHESTRATION_BREACHES: set[str] = set()

# Each set of modules that import one another in a circle (a strongly connected component).
CYCLES: set[frozenset[str]] = set()

# (importer, source, name): a private name imported from another module.
PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class Import:
    importer: str  # module name, e.g. "training.group"
    target: str  # the imported module of this package code, or the top name of an outside one
    name: str | None  # what `from ... import name` took (None for `import x`)
    source: str  # the module `from` named (for `import x`: x)
    in_function: bool
    typing_only: bool  # under `if TYPE_CHECKING:`: never run, it names a type for annotations
    line: int


def _module_files(packages: tuple[str, ...] = tuple(LAYER)) -> dict[str, Path]:
    """Module name -> file, for every module under `packages`."""
    mods = {}
    for pkg in packages:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if "build" in f.relative_to(ROOT).parent.parts:  # a package build's copies
                continue  # (git-ignored), not the code; a module named build.py is code
            mods[_module_name(f)] = f
    return mods


def _module_name(f: Path) -> str:
    """`flows/staging.py` -> `flows.staging`; a package's `__init__.py` -> the package."""
    parts = list(f.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _own(name: str, mods: dict[str, Path]) -> str | None:
    """The longest module of the package code that `name` is or lies in."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in mods:
            return ".".join(parts)
        parts.pop()
    return None


def _imports_of(module: str, path: Path, mods: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    in_functions = {id(n) for fn in ast.walk(tree)
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    typing_only = {id(n) for branch in ast.walk(tree) if isinstance(branch, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(branch.test)
                   for n in ast.walk(branch) if isinstance(n, (ast.Import, ast.ImportFrom))}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        inside, typing = id(node) in in_functions, id(node) in typing_only
        if isinstance(node, ast.Import):
            for a in node.names:
                target = _own(a.name, mods) or a.name.split(".")[0]
                out.append(Import(module, target, None, a.name, inside, typing, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for a in node.names:
                full = f"{source}.{a.name}"
                target = full if full in mods else (_own(source, mods) or source.split(".")[0])
                out.append(Import(module, target, a.name, source, inside, typing, node.lineno))
    return out


@lru_cache(maxsize=1)
def graph() -> tuple[dict[str, Path], tuple[Import, ...]]:
    mods = _module_files()
    return mods, tuple(i for m, f in mods.items() for i in _imports_of(m, f, mods))


def internal_edges(typing_only: bool = True) -> dict[str, set[str]]:
    """Importer -> the modules of the package code it imports (`typing_only`: with the imports
    made for annotations only)."""
    mods, imports = graph()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for i in imports:
        if i.target in mods and i.target != i.importer and (typing_only or not i.typing_only):
            edges[i.importer].add(i.target)
    return edges


def cycles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.add(frozenset(comp))
    return found


def _same(found: set, allowed: set, what: str) -> None:
    def shown(items: set) -> list:
        return sorted(sorted(x) if isinstance(x, frozenset) else x for x in items)

    assert not found - allowed, f"{what}, not allowed: {shown(found - allowed)}"
    assert not allowed - found, (f"{what} listed in tests/unit/test_layers.py but gone from the "
                                 f"code (delete them from the list): {shown(allowed - found)}")


def test_the_graph_sees_every_package_and_both_kinds_of_import():
    mods, imports = graph()
    assert {m.split(".")[0] for m in mods} == set(LAYER)
    assert "envs.repo.build" in mods  # only a build/ folder is left out, not a build.py
    edges = internal_edges()
    assert "training.group" in edges["flows.pipeline"]  # top-level
    assert "training.rank_spawn" in edges["training.group"]  # `from training import rank_spawn`
    assert any(i.in_function for i in imports) and any(not i.in_function for i in imports)


def test_no_package_imports_one_from_a_higher_layer():
    found = {(m, t) for m, ts in internal_edges().items() for t in ts
             if LAYER[t.split(".")[0]] > LAYER[m.split(".")[0]]}
    _same(found, LAYER_BREACHES, "imports of a higher layer")


def test_prefect_and_dask_are_imported_only_in_flows():
    _, imports = graph()
    found = {i.importer for i in imports if i.target.split(".")[0] in ORCHESTRATION
             and i.importer.split(".")[0] not in ORCHESTRATION_HOME}
    _same(found, ORCHESTRATION_BREACHES, "Prefect/Dask imports outside flows/")


def test_no_import_cycle_between_modules():
    _same(cycles(internal_edges(typing_only=False)), CYCLES, "cycles")


def _private(name: str | None) -> bool:
    """`_x`, not `__x` (a dunder such as `__version__` is public)."""
    return bool(name) and name.startswith("_") and not name.startswith("__")


def test_no_private_name_is_imported_from_another_module():
    mods, imports = graph()
    found = {(i.importer, i.source, i.name) for i in imports
             if _private(i.name) and _own(i.source, mods) is not None and i.source != i.importer}
    _same(found, PRIVATE_IMPORTS, "private names imported across modules")


def test_no_test_imports_a_private_name_of_the_package():
    """Tests go through the public surface: a test that needs a private name says the name
    should be public (or the test should call what uses it)."""
    packages = (*LAYER, "bench")
    mods = _module_files(packages)
    found = sorted(f"{f.relative_to(ROOT)}:{i.line} from {i.source} import {i.name}"
                   for f in sorted((ROOT / "tests").rglob("*.py"))
                   for i in _imports_of(_module_name(f), f, mods)
                   if _private(i.name) and i.source.split(".")[0] in packages)
    assert not found, "tests import private names of the package:\n" + "\n".join(found)


def test_the_cycle_finder_finds_a_circle_and_nothing_in_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == set()
