"""The driver of a chaos run: `rollforge run` started, watched and resumed with the same command
until it completes, a fault from the seeded plan injected at each drawn moment, a run without
progress for --stall-s counted as a hang; what happened is tallied (`Tally`). `reference` is the
same run left alone, to compare with."""
from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.chaos_faults import KINDS, inject
from bench.chaos_services import Services, descendants, group_kill

ROOT = Path(__file__).resolve().parents[1]


def run_cmd(out_dir: Path, cfg: dict) -> list[str]:
    sets = [f"out_dir={out_dir}", *(f"{k}={v}" for k, v in cfg.items())]
    return [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/tiny.yaml"),
            *[a for s in sets for a in ("--set", s)]]


def config(services: Services, seed: int, iterations: int) -> dict:
    return {"run_id": "chaos", "seed": seed, "iterations": iterations,
            "cluster.address": services.address, "rl.processes": 2}


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
    for p in [pid, *(c.pid for c in descendants(pid))]:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            out.append(subprocess.run([spy, "dump", "--pid", str(p)], capture_output=True,
                                      text=True, timeout=60).stdout)
    return "\n".join(out)


def _ranks_of(run_pid: int) -> set[int]:
    return {p.pid for p in descendants(run_pid)
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
        group_kill(run)
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
