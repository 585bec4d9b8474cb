"""The repository-suite builder: `rollforge tasks build-repo NAME==VERSION`.

1. fetch the sdist with pip and build the environment layer (envs/repo/source.py);
2. run the whole test suite `runs` times through the grader's run (envs/repo/grading.py) and
   keep the tests that pass every time and raise no flag (a test that needs a subprocess or a
   tracer is not gradeable under the grader's audit hook and is left out);
3. enumerate single-site AST mutants of the package's source (envs/repo/mutate.py), in an
   order fixed by a hash of each mutant, and keep one only if, over the stable tests, it turns
   at least one red, leaves every module importable (no collection error), raises no flag,
   keeps well away from the time limits (`BuildOptions.cpu_margin`) and a second run of its
   graded tests gives the same outcomes;
4. pair kept mutants of two different files into two-file instances (each file's bug must
   still break a test of its own in the pair);
5. write each instance as a task: the bug as a patch, its gold fix (the patch reverted), the
   FAIL_TO_PASS and PASS_TO_PASS tests by node id, the problem statement from the failing tests'
   names and messages. Nothing depends on time or on the machine, so the same command rebuilds
   the same file byte for byte.
"""
from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from envs.repo.diffs import make_diff
from envs.repo.grading import (TestRun, covers, is_test_path, judge_names, prefixes,
                               run_tests, run_timeout)
from envs.repo.mutate import Mutant, mutants
from envs.sources import split_of
from sandbox.base import Limits, Sandbox
from tasks.record import Task

log = logging.getLogger(__name__)

DEFAULT_FILE = Path(__file__).with_name("instances.jsonl")
_SKIP_FILES = ("setup.py", "versioneer.py", "_version.py", "conftest.py", "noxfile.py")


class BuildError(RuntimeError):
    """The repository cannot be built into instances (no stable tests, a bad layout)."""


@dataclass(frozen=True)
class BuildOptions:
    runs: int = 3  # whole-suite runs; a test is stable when it passes every one
    max_instances: int = 60  # single-file instances kept at most
    max_tries: int = 400  # mutants tried at most (the first ones in hash order)
    pairs: int = 10  # two-file instances made from kept ones
    heldout_fraction: float = 0.2
    per_test_s: float = 10.0  # a test's CPU-time limit
    # The part of a limit a decision may come near: a test whose call uses more CPU than
    # cpu_margin * per_test_s is left out of the stable tests, and a mutant is rejected when any
    # test it runs does (or its run uses more than cpu_margin of the run's wall-clock limit).
    # CPU time varies by some tens of percent with what shares the core, so a test that needs
    # 9 s of a 10 s limit passes in one build and times out in the next (more.py:2506 did);
    # with the timeouts on the same side as everything above a third of the limit, a decision
    # flips only for a test whose CPU time changes threefold. The pristine tests take at most
    # 0.25 s; the build prints the nearest figures on each side of the line.
    cpu_margin: float = 0.3


def source_files(tree: dict[str, bytes]) -> list[str]:
    """The package's own modules: .py files in a top-level package (or a top-level module next
    to the tests), not tests, not packaging."""
    packages = {p.split("/")[0] for p in tree if p.count("/") == 1 and p.endswith("/__init__.py")}
    out = []
    for p in tree:
        top = p.split("/")[0]
        if not p.endswith(".py") or is_test_path(p) or p.split("/")[-1] in _SKIP_FILES:
            continue
        if top in packages and not any(part in ("docs", "examples", "benchmarks")
                                       for part in p.split("/")):
            out.append(p)
    return sorted(out)


def _order(spec: str, m: Mutant) -> str:
    return hashlib.sha256(f"{spec}|{m.site}|{m.old}|{m.new}".encode()).hexdigest()


def statement(name: str, version: str, f2p: list[str], messages: dict[str, str]) -> str:
    """The issue text: which tests fail and how, in the tests' own words."""
    lines = [f"In the repository {name} {version}, these tests fail:", ""]
    for t in f2p[:6]:
        msg = " ".join(messages.get(t, "").split())[:200]
        lines.append(f"FAILED {t}" + (f" - {msg}" if msg else ""))
    if len(f2p) > 6:
        lines.append(f"... and {len(f2p) - 6} more")
    lines += ["", "Find the bug in the library's source (not in the tests) and fix it, so that "
              "they pass and every other test still does."]
    return "\n".join(lines)


def difficulty(n_f2p: int, n_files: int) -> int:
    """1: one file, many failing tests (the failures point at it); 2: one file, few failing
    tests; 3: several files."""
    if n_files > 1:
        return 3
    return 1 if n_f2p >= 4 else 2


def build_repo(spec: str, sandbox: Sandbox, limits: Limits, opts: BuildOptions = BuildOptions(),
               progress: Callable[[str], None] = lambda s: None) -> list[Task]:
    from envs.repo.source import fetch_sdist, file_sha256, pristine_tree  # noqa

    sha = file_sha256(fetch_sdist(spec))
    tree = pristine_tree(spec, sha)
    if "conftest.py" in tree:
        raise BuildError(f"{spec}: has a root conftest.py; the grader's plugin takes that place")
    srcs = source_files(tree)
    if not srcs:
        raise BuildError(f"{spec}: no package source found (top-level packages with .py files)")
    build = _Build(spec, tree, sandbox, limits, opts, progress)
    build.find_stable_tests()
    progress(f"{spec}: {len(build.stable)} stable tests; mutating {len(srcs)} source files")
    kept = build.keep_mutants(srcs)
    tasks = [_task(spec, sha, tree, {m.path: m.source.encode()}, [m], f2p, p2p, msgs, nc, opts)
             for m, f2p, p2p, msgs, nc in kept]
    pairs = build.pair_tasks(kept, sha)
    progress(f"{spec}: {len(tasks) + len(pairs)} instances ({len(pairs)} two-file)")
    return sorted(tasks + pairs, key=lambda t: t.task_id)


class _Build:
    """One repository's build: its stable tests, then the mutants kept against them."""

    def __init__(self, spec, tree, sandbox, limits, opts, progress) -> None:
        self.spec, self.tree, self.sandbox, self.limits = spec, tree, sandbox, limits
        self.opts, self.progress = opts, progress
        self.cap = opts.cpu_margin * opts.per_test_s  # a test's CPU seconds kept at most
        self.stable: list[str] = []
        self.universe: set[str] = set()  # every node id any run collected

    def validate(self, bug):
        return _validate(self.tree, bug, self.stable, self.universe, self.sandbox, self.limits,
                         self.opts)

    def find_stable_tests(self) -> None:
        """The tests that pass in every one of `opts.runs` whole-suite runs, within the CPU
        cap, and pass together once more; BuildError when there are none or they do not."""
        spec, opts, passed_all, slowest = self.spec, self.opts, None, {}
        for i in range(opts.runs):
            r = _run(self.tree, None, self.sandbox, self.limits, opts, f"{spec}: test run {i + 1}")
            ok = {t for t, o in r.outcomes.items() if o == "passed"}
            self.universe |= set(r.outcomes)
            for t, c in r.cpu.items():
                slowest[t] = max(c, slowest.get(t, 0.0))
            passed_all = ok if passed_all is None else passed_all & ok
            self.progress(f"{spec}: run {i + 1}/{opts.runs}: {len(ok)} of {len(r.outcomes)} "
                          "tests passed")
        slow = {t for t in passed_all or () if slowest.get(t, 0.0) > self.cap}  # near the limit
        self.stable = stable = sorted((passed_all or set()) - slow)
        if stable:
            top = max(stable, key=lambda t: slowest.get(t, 0.0))
            self.progress(f"{spec}: {len(slow)} passing tests left out for using over "
                          f"{self.cap:g} s of CPU; the slowest kept, {top}, used "
                          f"{slowest.get(top, 0.0):.3f} s")
        check = _run(self.tree, stable, self.sandbox, self.limits, opts, f"{spec}: the stable tests")
        if check.flags or any(check.outcomes.get(t) != "passed" for t in stable):
            bad = [t for t in stable if check.outcomes.get(t) != "passed"][:3]
            raise BuildError(f"{spec}: the stable tests do not pass together cleanly "
                             f"(flags {list(check.flags)}, e.g. {bad})")
        if not stable:
            raise BuildError(f"{spec}: no test passes every run")

    def keep_mutants(self, srcs: list[str]) -> list[tuple]:
        """(mutant, F2P, P2P, messages, collected) of the usable mutants of `srcs`, in hash
        order, up to `opts.max_instances` kept or `opts.max_tries` tried."""
        spec, opts = self.spec, self.opts
        cands = [m for p in srcs for m in mutants(p, self.tree[p].decode())]
        cands.sort(key=lambda m: _order(spec, m))
        kept: list[tuple[Mutant, list[str], list[str], dict[str, str], int]] = []
        tried = 0
        why: Counter[str] = Counter()  # rejections by reason
        peak = {"kept": 0.0, "rejected": float("inf")}  # the nearest CPU figures to the line
        for m in cands:
            if len(kept) >= opts.max_instances or tried >= opts.max_tries:
                break
            tried += 1
            got, most = self.validate({m.path: m.source.encode()})
            if isinstance(got, str):
                why[got.split(":")[0]] += 1
                if got.startswith("slow"):
                    peak["rejected"] = min(peak["rejected"], most)
                    self.progress(f"{spec}: {m.site} rejected, {got}")
            else:
                kept.append((m, *got))
                peak["kept"] = max(peak["kept"], most)
            if tried % 25 == 0:
                self.progress(f"{spec}: {tried} mutants tried, {len(kept)} kept")
        self.progress(
            f"{spec}: {len(kept)} of {tried} mutants kept; rejected: "
            + (", ".join(f"{n} {k}" for k, n in sorted(why.items())) or "none")
            + f"; the most CPU one test of a kept mutant used: {peak['kept']:.3f} s (the "
            f"line: {self.cap:g} s" + (f"; the least over it: {peak['rejected']:.3f} s)"
                                       if peak["rejected"] < float("inf") else ")"))
        return kept

    def pair_tasks(self, kept: list[tuple], sha: str) -> list[Task]:
        """Two-file instances: pairs of kept bugs in different files whose failing tests
        differ both ways, validated together, up to `opts.pairs`."""
        tasks: list[Task] = []
        for a_i, a in enumerate(kept):
            for b in kept[a_i + 1:]:
                if len(tasks) >= self.opts.pairs:
                    break
                if a[0].path == b[0].path or not (set(a[1]) - set(b[1])) or not (
                        set(b[1]) - set(a[1])):
                    continue
                bug = {a[0].path: a[0].source.encode(), b[0].path: b[0].source.encode()}
                got, _ = self.validate(bug)
                if not isinstance(got, str):
                    tasks.append(_task(self.spec, sha, self.tree, bug, [a[0], b[0]], *got,
                                       self.opts))
        return tasks


def _run(tree, ids, sandbox, limits, opts, what: str) -> TestRun:
    """`run_tests`, with what could depend on the machine rather than on the code taken out
    of the builder's decisions: a sandbox that failed to start is tried once more and then
    stops the build (never a mutant rejected for it), and a run the wall-clock limit killed is
    run once more with four times that limit (code that hangs is killed again; a run that a
    loaded machine slowed finishes). Each test's own limit is CPU time (run_tests)."""
    r = run_tests(tree, ids, sandbox, limits, opts.per_test_s)
    if r.infra:
        r = run_tests(tree, ids, sandbox, limits, opts.per_test_s)
        if r.infra:
            raise BuildError(f"{what}: the sandbox failed twice: {r.infra}")
    if r.res.status == "timeout":
        r = run_tests(tree, ids, sandbox, replace(limits, timeout_s=4 * limits.timeout_s),
                      opts.per_test_s)
        if r.infra:
            raise BuildError(f"{what}: the sandbox failed: {r.infra}")
    return r


def too_near(r: TestRun, n: int, limits: Limits, opts: BuildOptions) -> str | None:
    """Why a run of `n` tests came too near a time limit for its outcome to hold at another
    load (BuildOptions.cpu_margin), or None. Every test of the run counts: one that fails
    decides the mutant's F2P, one that passes its P2P or its stability."""
    if r.res.status == "timeout":
        return "timeout: the run was killed by the wall-clock limit, twice"
    if any(o == "timeout" for o in r.outcomes.values()):
        return "timeout: a test ran past its CPU limit"
    cap = opts.cpu_margin * opts.per_test_s
    top = max(r.cpu, key=r.cpu.__getitem__, default=None)
    if top is not None and r.cpu[top] > cap:
        return f"slow: {top} used {r.cpu[top]:.3f} s of CPU (over {cap:g} s)"
    wall = opts.cpu_margin * run_timeout(limits, n, opts.per_test_s)
    if r.cpu_total > wall:
        return f"slow: the run used {r.cpu_total:.1f} s of CPU (over {wall:g} s)"
    return None


def _validate(tree, bug, stable, universe, sandbox, limits, opts):
    """((F2P, P2P, messages, collected) of a bug, or why it is not a usable instance), and the
    most CPU time any one test of its runs used."""
    buggy = dict(tree, **bug)
    what = f"mutant of {', '.join(sorted(bug))}"
    r = _run(buggy, stable, sandbox, limits, opts, what)
    most = max(r.cpu.values(), default=0.0)
    if near := too_near(r, len(stable), limits, opts):
        return near, most  # before any other reason: what a slower run would have made of it
    if r.flags or r.collect_errors or set(r.collected) != set(stable):
        return "unusable: a flag, a collection error or other tests collected", most
    if any(o not in ("passed", "failed", "error") for o in r.outcomes.values()):
        return "unusable: an outcome other than passed, failed or error", most
    f2p = sorted(t for t in stable if r.outcomes.get(t) != "passed")
    if not f2p:
        return "harmless: no stable test turned red", most
    files = {t.split("::")[0] for t in f2p}
    p2p = compress(sorted(t for t in stable if t not in f2p and t.split("::")[0] in files),
                   f2p, universe)
    again = _run(buggy, f2p + p2p, sandbox, limits, opts, what)
    most = max([most, *again.cpu.values()])
    if near := too_near(again, len(f2p) + len(p2p), limits, opts):
        return near, most
    outs, flags = judge_names(again, tuple(f2p + p2p), frozenset(f2p), None)
    outs = [o == "passed" for o in outs]
    if again.flags or any(outs[: len(f2p)]) or not all(outs[len(f2p):]):
        return "flaky: not the same outcome twice", most
    return (f2p, p2p, {t: r.messages.get(t, "") for t in f2p}, len(again.collected)), most


def compress(p2p: list[str], f2p: list[str], universe: set[str]) -> list[str]:
    """PASS_TO_PASS names, shortened: a test file, a class or a parametrized function stands
    for its node ids where every node under it that pytest collects is in `p2p` or is a
    FAIL_TO_PASS test (the grader runs it and credits it by its nodes that are not
    FAIL_TO_PASS; envs/repo/grading.py outcome_of). Coarsest first: a far shorter record."""
    allowed = set(p2p) | set(f2p)
    left = set(p2p)
    out: list[str] = []
    for level in range(8):
        cands = sorted({pre[level] for t in left if len(pre := prefixes(t)) > level})
        for c in cands:
            mine = {t for t in left if covers(c, t)}
            if len(mine) > 1 and all(u in allowed for u in universe if covers(c, u)):
                out.append(c)
                left -= mine
    return sorted(out + sorted(left))


def _task(spec, sha, tree, bug, muts, f2p, p2p, msgs, n_collected, opts) -> Task:
    from envs.repo.source import split_spec  # noqa: PLC0415

    name, version = split_spec(spec)
    patch = make_diff(tree, dict(tree, **bug))
    gold = make_diff(dict(tree, **bug), tree)
    digest = hashlib.sha256(f"{spec}|{patch}".encode()).hexdigest()[:10]
    task_id = f"repo/{name}/{digest}"
    files = sorted(bug)
    return Task(task_id=task_id, suite="repos", family=name,
                difficulty=difficulty(len(f2p), len(files)),
                split=split_of(task_id, opts.heldout_fraction, "repos"),
                prompt=statement(name, version, f2p, msgs), kind="repo", reference=gold,
                payload={"repo": spec, "sdist_sha256": sha, "patch": patch, "files": files,
                         "operators": [m.family for m in muts],
                         "sites": [m.site for m in muts],
                         "fail_to_pass": f2p, "pass_to_pass": p2p,
                         "n_collected": n_collected})


def build_into_file(spec: str, path: Path = DEFAULT_FILE, opts: BuildOptions = BuildOptions(),
                    progress: Callable[[str], None] = print) -> tuple[int, int]:
    """Build `spec`'s instances and write them into the task file in place of that repository's
    earlier ones (the other repositories' are kept), atomically. Returns (made, in the file)."""
    from envs.repo.sandboxes import layer_sandbox  # noqa: PLC0415
    from envs.repo.source import split_spec  # noqa: PLC0415
    from tasks.files import load_tasks, save_tasks  # noqa: PLC0415

    name, _ = split_spec(spec)
    sandbox = layer_sandbox("process")
    limits = Limits(timeout_s=60.0, memory_mb=1024, pids=64, output_bytes=1 << 20)
    made = build_repo(spec, sandbox, limits, opts, progress)
    old = load_tasks(path, validate=None) if path.exists() else []
    keep = [t for t in old if t.family != name]
    tasks = sorted(keep + made, key=lambda t: t.task_id)
    save_tasks(tasks, path)
    return len(made), len(tasks)
