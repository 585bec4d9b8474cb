"""The chaos run: `rollforge run` on a small config against separately started services (a
`dask scheduler` and `dask worker`s under their nannies, a Prefect server, the process sandbox,
2 trainer ranks, the store on a small tmpfs of its own), while a driver injects faults at
moments drawn from a seed, restarts what died the way a supervisor would, and resumes the run
with the same command until it completes; then the store is checked and compared with an
uninterrupted run of the same seed.

Faults (`KINDS`): SIGKILL of the flow process, of a Dask worker, of the Dask scheduler
(restarted on its port, workers too if they left), of a trainer rank, of a sandbox's process
tree; a Prefect server killed and restarted; the store's filesystem filled, then freed; a hung
sandbox (its process tree SIGSTOPped and never continued); a stage's Prefect result deleted.

Every wait is bounded: a run that makes no progress (no new journal line, no exit) for
--stall-s is a hang: counted, reported, killed, and the run resumed. Needs root (the tmpfs).

    .venv/bin/python bench/chaos.py --seeds 0 1 2 --faults 12
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT))
from dask_cluster import DASK, free_port  # noqa: E402
from prefect_server import api  # noqa: E402

from flows.env import standalone_env  # noqa: E402

KINDS = ("flow", "worker", "scheduler", "rank", "sandbox_kill", "server", "disk_full",
         "sandbox_hang", "result_deleted")
# Fields of a row that may differ between the chaos run and the uninterrupted one: seconds
# measured on the clock (also inside `reward_components`). Every other field must be equal, row by row, except on rows whose
# execution a sandbox fault hit (they are listed, not compared).
CLOCK_FIELDS = ("gen_time_s", "exec_time_s", "score_time_s", "turn_seconds")
KEY = ["iteration", "group_id", "sample_index"]


def _killtree(pid: int, sig: int = signal.SIGKILL) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    n = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(sig)
            n += 1
    return n


def _group_kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


class Services:
    """The services an operator keeps up (Prefect server, Dask scheduler, workers), each on a
    fixed port so a restart is found where the run looks for it; `supervise` restarts whatever
    is down and due, like systemd's Restart=always with a delay."""

    def __init__(self, work: Path, workers: int = 2):
        self.work, self.n_workers = work, workers
        self.home = work / "prefect-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.server_port, self.dask_port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.server_port}/api"
        self.address = f"tcp://127.0.0.1:{self.dask_port}"
        self.env = {**standalone_env(), "PREFECT_HOME": str(self.home),
                    "PREFECT_API_URL": self.base, "DO_NOT_TRACK": "1",
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        self.log = open(work / "services.log", "a")
        self.server: subprocess.Popen | None = None
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = [None] * workers
        self.down_until: dict[str, float] = {}  # service -> monotonic time it may restart

    def _popen(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=self.log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def supervise(self) -> None:
        now = time.monotonic()
        if (self.server is None or self.server.poll() is not None) \
                and now >= self.down_until.get("server", 0):
            self.server = self._popen([sys.executable, "-m", "flows.cli", "server", "--port",
                                       str(self.server_port), "--home", str(self.home),
                                       "--no-ui"])
        if (self.scheduler is None or self.scheduler.poll() is not None) \
                and now >= self.down_until.get("scheduler", 0):
            self.scheduler = self._popen([DASK, "scheduler", "--host", "127.0.0.1", "--port",
                                          str(self.dask_port), "--dashboard-address",
                                          "127.0.0.1:0"])
        for i, w in enumerate(self.workers):
            if w is None or w.poll() is not None:
                self.workers[i] = self._popen([DASK, "worker", self.address, "--host",
                                               "127.0.0.1", "--nthreads", "1",
                                               "--no-dashboard"])

    def wait_ready(self, timeout_s: float = 240) -> None:
        """Up and answering: the server's /health, the scheduler with every worker."""
        from distributed import Client

        deadline = time.monotonic() + timeout_s
        while True:
            self.supervise()
            try:
                api(self.base, "GET", "/health", attempts=1)
                with Client(self.address, timeout=10) as c:
                    c.wait_for_workers(self.n_workers, timeout=10)
                return
            except Exception as exc:  # noqa: BLE001  (any failure here means "not yet")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"services not ready after {timeout_s:.0f} s: "
                                       f"{type(exc).__name__}: {exc}") from exc
                time.sleep(1.0)

    def worker_processes(self) -> list[psutil.Process]:
        """The worker processes themselves (the nannies' children)."""
        out = []
        for w in self.workers:
            if w is not None and w.poll() is None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    out += [c for c in psutil.Process(w.pid).children()
                            if "python" in c.name() or "dask" in c.name()]
        return out

    def close(self) -> None:
        for w in self.worker_processes():  # with any sandbox a fault left stopped
            _killtree(w.pid)
        for p in [self.server, self.scheduler, *self.workers]:
            if p is not None:
                _group_kill(p)
        self.log.close()


@contextlib.contextmanager
def small_fs(path: Path, size_mb: int):
    """A tmpfs of `size_mb` at `path`: the store's own filesystem, which a fault can fill."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Write zeros at `path` until the filesystem is full (unbuffered: the last partial
    block goes in too); returns the filler."""
    filler = path / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = 1 << 20
        while size >= 512:
            try:
                os.write(fd, b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size //= 2
    finally:
        os.close(fd)
    return filler


def run_cmd(out_dir: Path, cfg: dict) -> list[str]:
    sets = [f"out_dir={out_dir}", *(f"{k}={v}" for k, v in cfg.items())]
    return [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
            *[a for s in sets for a in ("--set", s)]]


def config(services: Services, seed: int, iterations: int) -> dict:
    return {"run_id": "chaos", "seed": seed, "iterations": iterations,
            "cluster.address": services.address, "rl.processes": 2}


def _descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).children(recursive=True)
    return []


def _sandbox_roots(services: Services) -> list[psutil.Process]:
    """The outermost bubblewrap (or unshare) process of each sandbox tree on the workers."""
    roots = []
    for w in services.worker_processes():
        for p in _descendants(w.pid):
            with contextlib.suppress(psutil.NoSuchProcess):
                if p.name() in ("bwrap", "unshare") and p.status() != psutil.STATUS_ZOMBIE \
                        and p.parent().name() not in ("bwrap", "unshare"):
                    roots.append(p)
    return roots


@dataclass
class Tally:
    injected: collections.Counter = field(default_factory=collections.Counter)
    skipped: collections.Counter = field(default_factory=collections.Counter)  # nothing to hit
    exits: collections.Counter = field(default_factory=collections.Counter)  # rc -> count
    errors: collections.Counter = field(default_factory=collections.Counter)  # last error line
    hangs: list = field(default_factory=list)
    attempts: int = 0
    completed: int = 0
    left_behind: list = field(default_factory=list)  # processes alive after a flow's death


def inject(kind: str, rng: random.Random, services: Services, run: subprocess.Popen,
           run_dir: Path, store: Path, pending: list) -> str | None:
    """Apply one fault; returns what was hit, or None when there was nothing of that kind to
    hit at this moment. `pending` collects (monotonic time, undo) for the faults with a
    second half (a full disk is freed later)."""
    now = time.monotonic()
    if kind == "flow":
        os.kill(run.pid, signal.SIGKILL)
        return f"flow pid {run.pid}"
    if kind == "worker":
        ws = services.worker_processes()
        if not ws:
            return None
        w = rng.choice(ws)
        _killtree(w.pid)
        return f"worker pid {w.pid}"
    if kind == "scheduler":
        services.down_until["scheduler"] = now + rng.uniform(1, 8)
        services.scheduler.kill()
        return f"scheduler pid {services.scheduler.pid}"
    if kind == "server":
        services.down_until["server"] = now + rng.uniform(1, 8)
        _group_kill(services.server)
        return "prefect server"
    if kind == "rank":
        ranks = [p for p in _descendants(run.pid) if "training.rank" in " ".join(p.cmdline())]
        if not ranks:
            return None
        r = rng.choice(ranks)
        r.kill()
        return f"rank pid {r.pid}"
    if kind in ("sandbox_kill", "sandbox_hang"):
        roots = _sandbox_roots(services)
        if not roots:
            return None
        r = rng.choice(roots)
        n = _killtree(r.pid, signal.SIGKILL if kind == "sandbox_kill" else signal.SIGSTOP)
        return f"sandbox tree of {n} from pid {r.pid}"
    if kind == "disk_full":
        filler = fill(store)
        pending.append((now + rng.uniform(3, 20), lambda: filler.unlink(missing_ok=True)))
        return "store filled"
    if kind == "result_deleted":
        results = sorted((run_dir / ".prefect-results").glob("*"))
        if not results:
            return None
        victim = rng.choice(results)
        victim.unlink(missing_ok=True)
        return f"result {victim.name}"
    raise ValueError(f"unknown fault kind {kind!r}; expected one of {KINDS}")


_NAMED = re.compile(r"((?:\w+\.)*\w*(?:Error|Exception|Failure|Timeout|Exit)\b:?.*)")


def _last_error(log: Path) -> str:
    """The last named error the log shows (a traceback's last line, a rank's own prefix
    dropped)."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if "EventsWorker" in line or "events.clients" in line:
            continue  # Prefect's event stream complaining while its server is away
        m = _NAMED.search(line)
        if m:
            return m.group(1).strip()[:200]
    return "(no error line)"


def _stacks(pid: int) -> str:
    """The Python stacks of a hung run and its children (py-spy, from PATH or $PY_SPY), to say
    where it waits; a line saying why not when py-spy is missing."""
    spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if not spy:
        return "  (no py-spy on PATH or in $PY_SPY: no stacks)"
    out = []
    for p in [pid, *(c.pid for c in _descendants(pid))]:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            out.append(subprocess.run([spy, "dump", "--pid", str(p)], capture_output=True,
                                      text=True, timeout=60).stdout)
    return "\n".join(out)


def _ranks_of(run_pid: int) -> set[int]:
    return {p.pid for p in _descendants(run_pid)
            if "training.rank" in " ".join(p.cmdline())}


def _alive(pids: set[int]) -> list[int]:
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
    return out


def chaos(services: Services, store: Path, seed: int, n_faults: int, iterations: int,
          stall_s: float, kinds=KINDS, gap_s: tuple[float, float] = (20.0, 60.0),
          log=print) -> tuple[Tally, list[Path]]:
    """`n_faults` faults drawn from `seed` (the kinds in turn, in a shuffled order, so every
    kind is hit) injected into runs of the same config, each resumed until it completes and
    the next started in a fresh folder while faults are left; returns the tally and the
    completed runs' folders."""
    rng = random.Random(seed)
    plan = [kinds[i % len(kinds)] for i in range(n_faults)]
    rng.shuffle(plan)
    t, runs = Tally(), []
    while plan or not runs:
        out = store / f"chaos-s{seed}-r{len(runs)}"
        log(f" run {len(runs)} ({out})")
        runs.append(_one_run(services, store, out, seed, iterations, stall_s, plan, rng, gap_s,
                             t, log))
    return t, runs


MOMENT_STAGES = ("sample_completions", "run_rollouts", "score", "write_trajectories",
                 "update_policy", "checkpoint")


class _Moment:
    """When the next fault lands: `delay` seconds (0-2) after the next start of a stage drawn
    from MOMENT_STAGES (uniform moments in time would land mostly in the update, the longest
    stage), or at a time drawn from `gap_s` if that stage does not start by then (the run is
    past it, or retrying)."""

    def __init__(self, rng: random.Random, mark: int, gap_s: tuple[float, float]):
        self.stage, self.delay = rng.choice(MOMENT_STAGES), rng.uniform(0.0, 2.0)
        self.mark, self.at = mark, time.monotonic() + rng.uniform(*gap_s)

    def due(self, lines: list[str], now: float) -> bool:
        for line in lines[self.mark:]:
            self.mark += 1
            if f'"stage": "{self.stage}", "event": "start"' in line:
                self.at = min(self.at, now + self.delay)
        return now >= self.at


def _one_run(services: Services, store: Path, out: Path, seed: int, iterations: int,
             stall_s: float, plan: list[str], rng: random.Random, gap_s: tuple[float, float],
             t: Tally, log) -> Path:
    """One run resumed with the same command until it completes, faults from `plan` (consumed)
    injected while it runs."""
    from storage.registry import finished_iterations

    run_dir = out / "chaos"
    cmd = run_cmd(out, config(services, seed, iterations))
    pending: list = []
    for attempt in range(1, len(plan) + 10):
        t.attempts += 1
        services.wait_ready()
        log_path = store.parent / f"run-{out.name}-{attempt}.log"
        with open(log_path, "w") as fh:
            run = subprocess.Popen(cmd, cwd=ROOT, env=services.env, stdout=fh,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        moment = _Moment(rng, len(_journal_lines(run_dir)), gap_s)
        seen, last_progress = 0, time.monotonic()
        ranks: set[int] = set()
        while run.poll() is None:
            now = time.monotonic()
            with contextlib.suppress(psutil.Error):
                ranks |= _ranks_of(run.pid)
            services.supervise()
            for item in [p for p in pending if p[0] <= now]:
                item[1]()
                pending.remove(item)
            lines = _journal_lines(run_dir)
            n = len(lines)
            if n != seen:
                seen, last_progress = n, now
            if now - last_progress > stall_s:
                t.hangs.append(f"seed {seed} {out.name} attempt {attempt}: no progress for "
                               f"{stall_s:.0f} s after {_last_stage(run_dir)}")
                log(f"  HANG: {t.hangs[-1]}")
                log(_stacks(run.pid))
                break
            if plan and moment.due(lines, now):
                kind = plan[0]
                hit = inject(kind, rng, services, run, run_dir, store, pending)
                if hit is None:  # nothing of that kind alive now: try again a little later
                    t.skipped[kind] += 1
                    moment.at = now + 2.0
                else:
                    plan.pop(0)
                    t.injected[kind] += 1
                    log(f"  fault: {kind}: {hit} (during {_last_stage(run_dir)}); "
                        f"{len(plan)} left")
                    moment = _Moment(rng, n, gap_s)
            time.sleep(0.25)
        _group_kill(run)
        # Ranks of a dead flow are meant to exit by themselves (they watch their parent).
        deadline = time.monotonic() + 60
        while (stray := _alive(ranks)) and time.monotonic() < deadline:
            time.sleep(1)
        if stray:
            t.left_behind += stray
            for pid in stray:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for _, undo in pending:  # the operator frees the disk before resuming
            undo()
        pending.clear()
        rc = run.returncode
        t.exits[rc] += 1
        if rc not in (0, -signal.SIGKILL):
            t.errors[_last_error(log_path)] += 1
        log(f"  attempt {attempt}: exit {rc}"
            + ("" if rc in (0, -signal.SIGKILL) else f": {_last_error(log_path)}"))
        if rc == 0 and finished_iterations(str(run_dir)) == list(range(iterations)):
            t.completed += 1
            return run_dir
    raise RuntimeError(f"seed {seed}: {out} still not complete after {attempt} invocations")


def _journal_lines(run_dir: Path) -> list[str]:
    try:
        return (run_dir / "stages.jsonl").read_text().splitlines()
    except OSError:
        return []


def _last_stage(run_dir: Path) -> str:
    lines = _journal_lines(run_dir)
    if not lines:
        return "the start"
    with contextlib.suppress(ValueError):
        r = json.loads(lines[-1])
        return f"{r['stage']} {r['event']} it {r.get('iteration')}"
    return "?"


def reference(services: Services, store: Path, seed: int, iterations: int,
              timeout_s: float = 900) -> Path:
    """The same run, uninterrupted."""
    out = store / f"ref-s{seed}"
    services.wait_ready()
    with open(store.parent / f"ref-s{seed}.log", "w") as fh:
        proc = subprocess.run(run_cmd(out, config(services, seed, iterations)), cwd=ROOT,
                              env=services.env, stdout=fh, stderr=subprocess.STDOUT,
                              timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"the reference run of seed {seed} failed: exit {proc.returncode}, "
                           f"{_last_error(store.parent / f'ref-s{seed}.log')}")
    return out / "chaos"


def check_store(run_dir: Path, iterations: int, group_size: int) -> dict:
    """Every (iteration, group, sample) once, every visible file whole, metrics and checkpoints
    in agreement with the rows."""
    import pyarrow.parquet as pq

    from storage.registry import finished_iterations, list_checkpoints, read_metrics
    from storage.trajectories import read_trajectories

    problems = []
    for f in (run_dir / "trajectories").rglob("*"):
        if f.is_file() and not any(part.startswith((".", "_")) for part in
                                   f.relative_to(run_dir).parts):
            try:
                pq.read_metadata(f)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"unreadable visible file {f}: {exc}")
    df = read_trajectories(str(run_dir))
    dup = int(df.duplicated(KEY).sum())
    sizes = df.groupby(["iteration", "group_id"]).size()
    if not sizes.eq(group_size).all():
        problems.append(f"groups without {group_size} samples: "
                        f"{sizes[sizes.ne(group_size)].to_dict()}")
    its = sorted(int(i) for i in df["iteration"].unique())
    if its != list(range(iterations)):
        problems.append(f"iterations in the rows {its}, expected 0..{iterations - 1}")
    if finished_iterations(str(run_dir)) != list(range(iterations)):
        problems.append(f"finished iterations {finished_iterations(str(run_dir))}")
    m = read_metrics(str(run_dir))
    if sorted(m["iteration"].tolist()) != list(range(iterations)):
        problems.append(f"metrics rows for iterations {sorted(m['iteration'].tolist())}")
    else:
        for it, count in zip(m["iteration"], m["rollout/count"]):
            if int(count) != int((df["iteration"] == it).sum()):
                problems.append(f"iteration {it}: metrics count {count} rollouts, the store "
                                f"{int((df['iteration'] == it).sum())}")
    cks = list_checkpoints(str(run_dir))
    if sorted(c["iteration"] for c in cks) != list(range(iterations)):
        problems.append(f"checkpoints registered for {sorted(c['iteration'] for c in cks)}")
    for c in cks:  # a registered checkpoint that still exists (older ones are pruned) is whole
        model = Path(c["path"]) / "model"
        if (model.exists() or c["iteration"] == iterations - 1) \
                and not any(model.glob("*.safetensors")):
            problems.append(f"checkpoint of iteration {c['iteration']} has no weights")
    for d in (run_dir / "checkpoints").glob(".tmp-*"):
        problems.append(f"staging folder left: {d.name}")
    return {"rows": len(df), "duplicated": dup, "problems": problems}


def compare(chaos_dir: Path, ref_dir: Path, iterations: int) -> dict:
    """Rows and final weights of the chaos run against the uninterrupted one."""
    import numpy as np
    import pandas as pd
    from safetensors.numpy import load_file

    from storage.trajectories import read_trajectories
    from training import checkpoints

    a = read_trajectories(str(chaos_dir)).set_index(KEY).sort_index()
    b = read_trajectories(str(ref_dir)).set_index(KEY).sort_index()
    lost = len(b.index.difference(a.index))
    extra = len(a.index.difference(b.index))
    common = a.index.intersection(b.index)
    cols = [c for c in b.columns if c not in CLOCK_FIELDS]
    a, b = a.loc[common, cols], b.loc[common, cols]

    def same(x, y) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return (x == y) or (np.isnan(x) and np.isnan(y))
        if isinstance(x, (list, np.ndarray)) or isinstance(y, (list, np.ndarray)):
            return list(x if x is not None else []) == list(y if y is not None else [])
        return bool(x == y) or (pd.isna(x) is True and pd.isna(y) is True)

    def unclocked(components):  # the components carry the execution's seconds too
        return None if components is None else repr([  # repr: NaN equals NaN
            tuple(kv) for kv in components if kv[0] not in CLOCK_FIELDS])

    differing_rows, differing_cols, examples = set(), collections.Counter(), []
    for c in cols:
        xs, ys = a[c].tolist(), b[c].tolist()
        if c == "reward_components":
            xs, ys = map(unclocked, xs), map(unclocked, ys)
        for k, x, y in zip(common, xs, ys):
            if not same(x, y):
                differing_rows.add(k)
                differing_cols[c] += 1
                if len(examples) < 5:
                    examples.append((k, c, str(x)[:120], str(y)[:120]))
    infra = int(a["infra_error"].fillna(False).astype(bool).sum())
    wa = checkpoints.checkpoint_dir(str(chaos_dir), iterations) / "model"
    wb = checkpoints.checkpoint_dir(str(ref_dir), iterations) / "model"
    ta = {k: v for f in sorted(wa.glob("*.safetensors")) for k, v in load_file(f).items()}
    tb = {k: v for f in sorted(wb.glob("*.safetensors")) for k, v in load_file(f).items()}
    max_diff = (max(float(np.abs(ta[k].astype(np.float64) - tb[k]).max()) for k in tb)
                if ta.keys() == tb.keys() and tb else float("inf"))
    return {"lost": lost, "extra": extra, "rows_compared": len(common),
            "rows_differing": len(differing_rows), "columns_differing": dict(differing_cols),
            "infra_error_rows": infra, "weights_max_abs_diff": max_diff,
            "examples": examples}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--faults", type=int, default=len(KINDS), help="faults per seed")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--gap-s", type=float, nargs=2, default=(20.0, 60.0), metavar=("MIN", "MAX"),
                    help="the most seconds between faults, drawn uniformly: a fault lands 0-2 s "
                    "after the next start of a stage drawn at random, or after this if that "
                    "stage does not start by then")
    ap.add_argument("--stall-s", type=float, default=300.0,
                    help="seconds without a new journal line or an exit that count as a hang")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--store-mb", type=int, default=96)
    ap.add_argument("--no-reference", action="store_true", help="skip the equality check")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/chaos.py: needs root (it mounts the store's own tmpfs)", file=sys.stderr)
        return 2
    totals, lines, bad = Tally(), [], 0
    with tempfile.TemporaryDirectory(prefix="chaos-") as d:
        work = Path(d)
        services = Services(work)
        try:
            with small_fs(work / "store", args.store_mb) as store:
                for seed in args.seeds:
                    print(f"seed {seed}: {args.faults} faults", flush=True)
                    t0 = time.monotonic()
                    t, runs = chaos(services, store, seed, args.faults, args.iterations,
                                    args.stall_s, tuple(args.kinds), tuple(args.gap_s),
                                    log=lambda s: print(s, flush=True))
                    ref = None if args.no_reference else reference(services, store, seed,
                                                                     args.iterations)
                    for name in ("injected", "skipped", "exits", "errors"):
                        getattr(totals, name).update(getattr(t, name))
                    totals.hangs += t.hangs
                    totals.left_behind += t.left_behind
                    totals.attempts += t.attempts
                    totals.completed += t.completed
                    for run_dir in runs:
                        chk = check_store(run_dir, args.iterations, 4)
                        cmp = None if ref is None else compare(run_dir, ref, args.iterations)
                        bad += bool(chk["problems"] or chk["duplicated"]
                                    or (cmp and (cmp["lost"] or cmp["extra"])))
                        lines.append(f"seed {seed} {run_dir.parent.name}: rows {chk['rows']}, "
                                     f"duplicated {chk['duplicated']}, problems "
                                     f"{chk['problems']}; vs uninterrupted: {cmp}")
                        print(lines[-1], flush=True)
                    print(f"seed {seed}: {sum(t.injected.values())} faults, {t.completed} runs "
                          f"completed, {t.attempts} invocations, hangs {len(t.hangs)}, "
                          f"{time.monotonic() - t0:.0f} s", flush=True)
        finally:
            services.close()
    print("\nfaults injected by kind:", dict(sorted(totals.injected.items())))
    print("nothing to hit at the drawn moment (retried 2 s later):", dict(totals.skipped))
    print("exit codes of the invocations:", dict(totals.exits))
    print("errors the failed invocations ended with:")
    for e, n in totals.errors.most_common():
        print(f"  {n} x {e}")
    print(f"hangs: {len(totals.hangs)} {totals.hangs}")
    print(f"trainer ranks left behind by a dead flow (killed after 60 s): {totals.left_behind}")
    print(f"\n{len(args.seeds)} seeds, {sum(totals.injected.values())} faults, "
          f"{totals.attempts} invocations, runs completed {totals.completed}")
    for ln in lines:
        print(ln)
    return 1 if bad or totals.hangs or totals.left_behind else 0


if __name__ == "__main__":
    sys.exit(main())
