"""Rollout execution on Dask: what runs on the workers, and the client the flow holds.

Workers never load the policy: they receive (task, completion) pairs, run the tests in a
sandbox kept per worker process, and send back the `RewardBreakdown`.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rewards.aggregate import RewardBreakdown, RewardConfig
from rewards.score import score
from sandbox.base import Sandbox
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.record import Task

_SANDBOXES: dict[str, Sandbox] = {}
_SANDBOX_LOCK = threading.Lock()


def _sandbox(cfg: SandboxConfig) -> Sandbox:
    """One sandbox per worker process and config (warm pools live as long as the worker)."""
    key = cfg.model_dump_json()
    with _SANDBOX_LOCK:
        if key not in _SANDBOXES:
            _SANDBOXES[key] = make_sandbox(cfg)
        return _SANDBOXES[key]


@dataclass(frozen=True)
class Executed:
    breakdown: RewardBreakdown
    score_time_s: float  # wall time of the whole verification, sandbox start included
    backend: str
    image_digest: str | None


def execute_one(task: Task, completion: str, sandbox_cfg: SandboxConfig,
                reward_cfg: RewardConfig) -> Executed:
    t0 = time.perf_counter()
    sandbox = _sandbox(sandbox_cfg)
    breakdown, _ = score(task, completion, sandbox, sandbox_cfg.limits(), reward_cfg)
    return Executed(breakdown, time.perf_counter() - t0, sandbox.name,
                    getattr(sandbox, "image_digest", None))


_CLIENTS: dict[str, object] = {}
_CLUSTERS: dict[str, object] = {}
_CLIENT_LOCK = threading.Lock()


def dask_client(address: str | None, n_workers: int, threads_per_worker: int):
    """A Dask client for `address`, or for a LocalCluster started once per process."""
    from distributed import Client, LocalCluster

    key = address or f"local:{n_workers}x{threads_per_worker}"
    with _CLIENT_LOCK:
        client = _CLIENTS.get(key)
        if client is not None and client.status == "running":
            return client
        if address is None:
            cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                                   processes=True, dashboard_address="127.0.0.1:0",
                                   host="127.0.0.1")
            _CLUSTERS[key] = cluster
            client = Client(cluster)
        else:
            client = Client(address, timeout=30)
        _CLIENTS[key] = client
        return client


def close_clients() -> None:
    with _CLIENT_LOCK:
        for c in _CLIENTS.values():
            c.close()
        for cl in _CLUSTERS.values():
            cl.close()
        _CLIENTS.clear()
        _CLUSTERS.clear()


def execute_many(client, items: list[tuple[Task, str]], sandbox_cfg: SandboxConfig,
                 reward_cfg: RewardConfig) -> list[Executed]:
    """Fan `items` out over the cluster (one Dask task each) and gather them in order."""
    if not items:
        return []
    futures = client.map(execute_one, [t for t, _ in items], [c for _, c in items],
                         sandbox_cfg=sandbox_cfg, reward_cfg=reward_cfg, pure=False)
    return client.gather(futures)
