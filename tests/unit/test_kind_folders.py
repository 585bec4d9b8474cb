"""A kind is its folder (envs/<kind>/) and one line of envs/registry.py, nothing else (issue 35).

Two checks. The static one: no module of the product packages outside a kind's folder imports
it, except the importers named below, each with the reason (a kind built on another kind, or
shared code that still knows a kind: what is left to move). The live one: for each kind that no
module outside its folder imports, a copy of the tree with that folder and its registry line
deleted imports every module of the product packages and passes a fast subset of the unit suite
(SUBSET, minus the files that belong to the deleted kind), in a fresh interpreter that cannot
reach the deleted folder through the editable install.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from envs.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[2]
# The product packages, bottom layer first (engine and gateway, the serving side, are left out:
# they import no kind, and the gateway is still being built).
PACKAGES = ("sandbox", "tasks", "rewards", "envs", "storage", "training", "flows")

# Modules outside a kind's folder that import it, and why. A kind listed here is not deleted by
# the live check: deleting it would break these by design.
IMPORTERS: dict[str, dict[str, str]] = {
    "io": {
        "envs/agent/env.py": "agent episodes play the io kind's procedural tasks "
                             "(ProceduralOptions)",
        "envs/dataframe/families.py": "the dataframe families draw their parameters like the io "
                                      "families do (envs.io.families.base)",
        "envs/dataframe/grading.py": "dataframe answers run in the io harness's frames: mode",
        "flows/config.py": "the run config's top-level procedural fields (tasks.families, ...) "
                           "are checked against the io families",
        "flows/report.py": "the end-of-run table groups held-out rows by io family",
        "flows/stages.py": "the warm start leaves out the io suite's generic names",
        "flows/warm_start.py": "the agent warm start's first attempts (io edge families)",
    },
    "testfile": {
        "envs/repo/grading.py": "repo tasks are graded by the testfile kind's pytest plugin",
    },
    "agent": {
        "flows/config.py": "the run config's `episodes` section is the agent kind's EpisodeConfig",
    },
    "repo": {
        "flows/cli_tasks.py": "`rollforge tasks build-repo` builds the repo kind's task file",
    },
}
DELETABLE = [k for k in BUILTIN if k not in IMPORTERS]  # dataframe, humaneval, ops, logic

# Fast unit tests of the shared code, in-process (the CLI tests, which start `rollforge` in a
# subprocess each, and the every-family reference run are left out for time): config and task
# sources, task files, the task-quality check through the real sandbox, the curriculum, the
# trajectory store, the losses. About 18 s of CPU per kind here, imports included (74 s for four
# kinds, two at a time; several minutes of wall time when the machine is shared).
SUBSET = ("test_config.py", "test_tasks_files.py", "test_tasks_quality.py", "test_curriculum.py",
          "test_storage_trajectories.py", "test_losses.py")
SUBSET_FILTER = "not cli and not every_family"


def _imported_kinds(path: Path) -> set[str]:
    """The built-in kinds whose folder `path` imports (anywhere in it, functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "envs" and len(parts) > 1 and parts[1] in BUILTIN:
                found.add(parts[1])
    return found


def test_only_the_named_importers_reach_into_a_kinds_folder():
    seen: dict[str, set[str]] = {k: set() for k in BUILTIN}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            for kind in _imported_kinds(path):
                if not rel.startswith(f"envs/{kind}/"):
                    seen[kind].add(rel)
    assert {k: sorted(v) for k, v in seen.items() if v} == \
           {k: sorted(v) for k, v in IMPORTERS.items()}


def _belongs_to(test_file: Path, kind: str) -> bool:
    """Whether a test file is the kind's: it names its folder or the kind itself."""
    return bool(re.search(rf"""envs[./]{kind}\b|["']{kind}["']""", test_file.read_text()))


def _copy_without(kind: str, dest: Path) -> Path:
    tree = dest / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".engine-venv", ".verifiers-venv", ".openenv-venv", "runs",
        "__pycache__", ".pytest_cache", "*.egg-info"))
    shutil.rmtree(tree / "envs" / kind)
    registry = tree / "envs" / "registry.py"
    text = registry.read_text()
    line = re.compile(rf'^    "{kind}": "envs\.{kind}:\w+",\n', re.M)
    assert len(line.findall(text)) == 1, f"expected one registry line for {kind!r}"
    registry.write_text(line.sub("", text))
    return tree


# Run in the copy: the editable install's finder (which maps `envs` to this checkout, and would
# find the deleted folder there) is taken out first.
_DRIVER = textwrap.dedent('''
    import importlib, importlib.util, pkgutil, sys
    root, kind, tests = sys.argv[1], sys.argv[2], sys.argv[3:]
    sys.meta_path[:] = [f for f in sys.meta_path
                        if "envs" not in getattr(sys.modules.get(f.__module__), "MAPPING", {})]
    sys.path[:] = [root] + [p for p in sys.path if not p.startswith("__editable__")]
    import envs
    assert list(envs.__path__) == [root + "/envs"], envs.__path__
    assert importlib.util.find_spec("envs." + kind) is None, "the deleted kind is still found"
    for pkg in %r:
        for info in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + "."):
            importlib.import_module(info.name)
    import pytest
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-x", "-k", %r, *tests]))
''' % (PACKAGES, SUBSET_FILTER))


def _run_without(kind: str, tmp: Path) -> str | None:
    """What went wrong in a copy of the tree without `kind` (None: nothing)."""
    tree = _copy_without(kind, tmp / kind)
    tests = [f"tests/unit/{name}" for name in SUBSET
             if not _belongs_to(tree / "tests" / "unit" / name, kind)]
    run = subprocess.run([sys.executable, "-c", _DRIVER, str(tree), kind, *tests], cwd=tree,
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "DO_NOT_TRACK": "1", "PYTHONPATH": str(tree)})
    return None if run.returncode == 0 else (run.stdout[-3000:] + "\n" + run.stderr[-3000:])


def test_deleting_a_kinds_folder_and_registry_line_leaves_the_rest_working(tmp_path):
    assert DELETABLE, "no kind is deletable: every one is imported from outside its folder"
    # Two copies at a time (one per core): each is mostly its interpreter's imports.
    with ThreadPoolExecutor(2) as pool:
        failed = dict(zip(DELETABLE, pool.map(lambda k: _run_without(k, tmp_path), DELETABLE)))
    failed = {k: why for k, why in failed.items() if why is not None}
    assert not failed, "\n\n".join(f"without envs/{k}/:\n{why}" for k, why in failed.items())
