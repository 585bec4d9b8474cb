"""Episodes of the run's own tasks, played by an outside client through the gateway
(gateway/README.md "Episodes of the run's tasks").

The client opens an episode (`POST /v1/rollforge/episodes`): the gateway draws one of the run's
training tasks (its config's `tasks.sources`, each played by its source's environment, as the
loop plays it), resets the environment and answers with the episode id and the first
observation. The client asks the policy under that id (`X-Episode-Id`), as often as it likes, and
sends its actions (`POST /v1/rollforge/episodes/{id}/step`); the environment steps on them in the
sandbox, and when it says done, the kind's own grade is the episode's reward. The rows are the
episode's recorded turns (gateway/rows.py: the ids sent and sampled, never re-tokenised) with
that grade, written to the store beside the run (`<out_dir>/<run_id>-gateway`, iteration = the
policy version that sampled the episode's first turn, one shard per episode, each row keeping the
version that sampled it), where gateway/train.py updates on them.

What is graded is what the client sent, not what the policy sampled: an agent that edits the
policy's text (extracts a code block, retries) is credited for the answer it submitted, and the
policy's tokens of the episode carry that credit, as an agent framework's trainer credits them.

An open episode (its task, environment and state) is kept beside its turn records
(`<records>/<episode_id>/open.pkl`, written whole and replaced at each step, removed when the
episode is done), so a gateway restarted on the same records folder takes up the episodes that
were open when it stopped; a client steps them with the same id.
"""
from __future__ import annotations

import itertools
import logging
import math
import pickle
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.base import Environment, breakdown_of
from flows.config import RunConfig
from flows.episode_exec import step_episode
from gateway.openai_api import GatewayError
from gateway.records import EpisodeLog
from gateway.rows import episode_rows
from storage.fs import atomic_write_bytes, locate
from storage.schema import TrajectoryRow
from tasks.record import Task

SUFFIX = "-gateway"  # the store's run folder of the gateway's rows: <run_id>-gateway
OPEN_FILE = "open.pkl"  # an open episode's task, environment and state, beside its turns
log = logging.getLogger(__name__)


def store_dir(cfg: RunConfig) -> str:
    """Where the gateway writes graded rows: a run folder beside the run's own, so the loop's
    iterations (written whole, replacing what was there) never meet the gateway's shards."""
    return str(Path(cfg.out_dir) / f"{cfg.run_id}{SUFFIX}")


@dataclass
class Open:
    """An episode the gateway is playing: its task, environment and state."""

    task: Task
    env: Environment
    state: Any
    turns: int = 0  # environment steps taken
    busy: bool = False  # a step is running (a second one at once is refused)
    done: bool = False


class Episodes:
    """The run's training tasks as episodes for outside clients (module docstring)."""

    def __init__(self, cfg: RunConfig, records: EpisodeLog, tok):
        from flows.stages import env_of, task_pool  # noqa: PLC0415 - builds the run's tasks

        self.cfg, self.records, self.tok = cfg, records, tok
        self.tasks = {t.task_id: t for t in task_pool(cfg) if t.split == "train"}
        if not self.tasks:
            raise ValueError(f"run {cfg.run_id!r}: its task sources hold no training task")
        self.env_of = env_of(cfg)
        self._order = itertools.cycle(sorted(self.tasks))  # the next task when none is asked
        self._lock = threading.Lock()
        self.run_dir = store_dir(cfg)
        self._open: dict[str, Open] = self._reopened()

    # -- the two calls ---------------------------------------------------------------------
    def open(self, body: dict) -> dict:
        """A new episode on `body["task_id"]` (else the next training task in turn)."""
        task_id = body.get("task_id")
        if task_id is not None and not isinstance(task_id, str):
            raise GatewayError(400, f"task_id={task_id!r}: expected a string", "invalid_type",
                               "task_id")
        with self._lock:
            task_id = task_id if task_id is not None else next(self._order)
        task = self.tasks.get(task_id)
        if task is None:
            raise GatewayError(404, f"task_id={task_id!r}: not a training task of run "
                               f"{self.cfg.run_id!r} (e.g. {next(iter(sorted(self.tasks)))!r})",
                               "task_not_found", "task_id")
        env = self.env_of(task)
        state, observation = env.reset(task)
        episode = f"ep-{uuid.uuid4().hex[:16]}"
        ep = Open(task, env, state)
        self._keep(episode, ep)
        with self._lock:
            self._open[episode] = ep
        return {"episode_id": episode, "task_id": task.task_id, "kind": env.name,
                "source": task.source, "observation": observation,
                "max_turns": env.max_turns}

    def step(self, episode: str, body: dict) -> dict:
        """Step the episode's environment on `body["action"]`; when it is done, the grade and
        the rows written."""
        action = body.get("action")
        if not isinstance(action, str):
            raise GatewayError(400, f"action: expected a string, got {type(action).__name__}",
                               "invalid_action", "action")
        ep = self._claim(episode)
        try:  # the loop's own step: the kind's sandbox (its packages where it needs them)
            result = step_episode(ep.env, ep.state, action, self.cfg.sandbox, self.cfg.rewards)
        finally:
            ep.busy = False
        ep.state, ep.turns = result.state, ep.turns + 1
        if not result.done:
            self._keep(episode, ep)
            return {"episode_id": episode, "done": False, "observation": result.observation}
        ep.done = True
        out = self._finish(episode, ep, {**result.info, "backend": result.backend})
        self._open_file(episode).unlink(missing_ok=True)  # its rows are written: not open
        return {"episode_id": episode, "done": True, **out}

    # -- open episodes on disk ---------------------------------------------------------------
    def _open_file(self, episode: str) -> Path:
        return self.records.episode_dir(episode) / OPEN_FILE

    def _keep(self, episode: str, ep: Open) -> None:
        """Write the open episode beside its turns, whole (storage/fs.py `atomic_write`)."""
        try:
            data = pickle.dumps((ep.task, ep.env, ep.state, ep.turns))
            atomic_write_bytes(locate(str(self._open_file(episode))), data)
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
            log.warning("gateway: episode %s is not kept on disk (a restart forgets it): %s",
                        episode, exc)

    def _reopened(self) -> dict[str, Open]:
        """The episodes a gateway on these records left open (their tasks still the run's)."""
        found: dict[str, Open] = {}
        root = self.records.root
        for path in sorted(root.glob(f"*/{OPEN_FILE}")) if root.is_dir() else []:
            try:
                with open(path, "rb") as fh:
                    task, env, state, turns = pickle.load(fh)
            except Exception as exc:  # noqa: BLE001 -- a file this gateway cannot read
                log.warning("gateway: cannot take up the open episode in %s: %s", path, exc)
                continue
            if task.task_id in self.tasks:
                found[path.parent.name] = Open(task, env, state, turns)
        if found:
            log.info("gateway: took up %d episodes left open on %s", len(found), root)
        return found

    def _claim(self, episode: str) -> Open:
        """The open episode, marked busy; a named error when it is not one to step now."""
        with self._lock:
            ep = self._open.get(episode)
            if ep is None:
                raise GatewayError(404, f"episode {episode[:80]!r}: no such episode is open at "
                                   "this gateway (open one with POST /v1/rollforge/episodes; "
                                   "one finished, or opened at a gateway on other records, is "
                                   "not)", "episode_not_found", "episode_id")
            if ep.done or ep.busy:
                raise GatewayError(409, f"episode {episode!r} is "
                                   f"{'finished' if ep.done else 'stepping already'}",
                                   "episode_finished" if ep.done else "episode_busy",
                                   "episode_id")
            if not self.records.turns(episode):
                raise GatewayError(409, f"episode {episode!r}: the policy was never asked under "
                                   f"it (send `X-Episode-Id: {episode}` with the completions "
                                   "requests of this episode); nothing to train on",
                                   "no_policy_turns", "episode_id")
            ep.busy = True
            return ep

    # -- rows ------------------------------------------------------------------------------
    def _finish(self, episode: str, ep: Open, info: dict) -> dict:
        grade = breakdown_of(info)
        turns = self.records.turns(episode)
        # the whole episode in one shard (a take is by episode), under the version that began
        # it: a gateway that follows new versions may have answered its later turns with newer
        first = min(int(t["policy_version"]) for t in turns)
        rows = [r.replace(**graded_columns(ep, grade, info))
                for r in episode_rows(turns, self.tok, Path(self.run_dir).name, first,
                                      self.cfg.hash())]
        path = self._write(rows, first)
        reward = grade.reward if grade is not None else math.nan
        return {"reward": None if math.isnan(reward) else reward,
                "status": grade.status if grade else "not_graded",
                "solved": bool(grade.solved) if grade and not grade.infra_error else None,
                "test_outcomes": list(grade.test_outcomes) if grade else [],
                "end_reason": info.get("end_reason"), "rows": len(rows), "written": path}

    def _write(self, rows: list[TrajectoryRow], version: int) -> str:
        """The episode's rows as the next shard of iteration `version` (taken under a lock
        other gateways on this run take too: storage/trajectories.py `append_shard`)."""
        from storage import trajectories  # noqa: PLC0415

        with self._lock:
            return trajectories.append_shard(self.run_dir, version, rows)


def graded_columns(ep: Open, grade, info: dict) -> dict:
    """The columns that say what the task was and how the kind graded the episode (the rest
    of the row is the recorded tokens, gateway/rows.py). Every row of the episode (a split
    conversation makes several) carries its grade. The GRPO group is the task, so episodes
    of one task are compared with each other; the advantage is the update's to compute
    (gateway/train.py), since the group fills up over time."""
    t = ep.task
    g = grade
    return {
        "task_id": t.task_id, "suite": t.suite, "family": t.family, "difficulty": t.difficulty,
        "split": t.split, "source": t.source, "kind": ep.env.name,
        "group_id": f"gateway:{t.task_id}",
        "reward": g.reward if g else math.nan, "reward_components": g.components() if g else {},
        "advantage": None,
        "pass_fraction": g.pass_fraction if g else None,
        "tests_passed": g.tests_passed if g else None,
        "tests_total": g.tests_total if g else None,
        "test_outcomes": list(g.test_outcomes) if g else [],
        "test_names": list(g.test_names) if g else [],
        "status": g.status if g else "not_graded", "error_type": g.error_type if g else None,
        "hack_flags": list(g.hack_flags) if g else [],
        "infra_error": bool(g.infra_error) if g else False,
        "solved": (bool(g.solved) if g and not g.infra_error else None),
        "sandbox_backend": info.get("backend"), "exec_time_s": float(info.get("seconds", 0.0)),
        "end_reason": info.get("end_reason"),
    }
