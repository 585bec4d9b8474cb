"""The Dask side of execution: the client the flow holds, the sandbox each worker keeps, and a
bounded `Client.map`. Workers never load the policy: they receive episode steps
(flows/episode_exec.py), run them in their sandbox and send back the results.
"""
from __future__ import annotations

import threading
from collections import Counter

from sandbox.base import Sandbox
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox

_SANDBOXES: dict[str, Sandbox] = {}
_SANDBOX_LOCK = threading.Lock()


def sandbox_for(cfg: SandboxConfig) -> Sandbox:
    """One sandbox per worker process and config (warm pools live as long as the worker)."""
    key = cfg.model_dump_json()
    with _SANDBOX_LOCK:
        if key not in _SANDBOXES:
            _SANDBOXES[key] = make_sandbox(cfg)
        return _SANDBOXES[key]


_CLIENTS: dict[str, object] = {}
_CLUSTERS: dict[str, object] = {}
_CLIENT_LOCK = threading.Lock()


def dask_client(address: str | None, n_workers: int, threads_per_worker: int):
    """A Dask client for `address`, or for a LocalCluster started once per process (on
    loopback, dashboard on a free loopback port)."""
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


def launcher_vars() -> tuple[str, ...]:
    """The variables a Dask nanny sets for its worker's tasks (BLAS threads, malloc trimming):
    the trainer group's ranks on the workers are started without them."""
    import dask

    return tuple(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})


def cluster_description(client) -> str:
    """One line for the logs: scheduler, workers x threads, and the dashboard link."""
    info = client.scheduler_info()
    workers = info.get("workers", {})
    threads = sum(w.get("nthreads", 0) for w in workers.values())
    link = client.dashboard_link or "(no dashboard)"
    return (f"Dask scheduler {client.scheduler.address}: {len(workers)} workers, {threads} "
            f"threads; dashboard {link}")


def total_threads(client) -> int:
    return sum(client.nthreads().values())


def queue_snapshot(client) -> dict:
    """The scheduler's queue lengths now: tasks queued (not yet sent to a worker), processing
    (sent to a worker, running or waiting there), unrunnable (no worker can take them)."""

    def snap(dask_scheduler):  # nested: pickled by value, so the scheduler needs no rollforge
        s = dask_scheduler
        return {"queued": len(s.queued), "unrunnable": len(s.unrunnable),
                "processing": sum(len(ws.processing) for ws in s.workers.values()),
                "workers": len(s.workers), "threads": s.total_nthreads}

    return client.run_on_scheduler(snap)


def close_clients() -> None:
    with _CLIENT_LOCK:
        for c in _CLIENTS.values():
            c.close()
        for cl in _CLUSTERS.values():
            cl.close()
        _CLIENTS.clear()
        _CLUSTERS.clear()


class ShardTimeout(TimeoutError):
    """A shard's executions did not all finish within its deadline (a hung worker or sandbox)."""


def map_within(client, fn, *iterables, timeout_s: float | None, what: str, **kwargs) -> list:
    """`client.map(fn, *iterables, **kwargs)` gathered in order; past `timeout_s` the tasks are
    cancelled and `ShardTimeout` raised, naming how many `what` were unfinished."""
    from distributed import wait

    futures = client.map(fn, *iterables, pure=False, **kwargs)
    try:
        wait(futures, timeout=timeout_s)
    except TimeoutError:
        done = sum(f.done() for f in futures)
        where = where_tasks_are(client, [f.key for f in futures if not f.done()])
        client.cancel(futures)
        raise ShardTimeout(f"{len(futures) - done} of {len(futures)} {what} unfinished after "
                           f"{timeout_s:.0f}s ({where})") from None
    return client.gather(futures)


def where_tasks_are(client, keys: list) -> str:
    """What the scheduler says of unfinished tasks, for the message of a shard that hung: each
    one's state and, when a worker holds it, that worker's status (a worker paused for memory
    runs nothing) and how long it has gone without a heartbeat."""

    def ask(dask_scheduler, keys):  # nested: pickled by value, so the scheduler needs no rollforge
        import time as _time

        out = []
        for k in keys:
            ts = dask_scheduler.tasks.get(k)
            if ts is None:
                out.append("unknown to the scheduler")
                continue
            ws = ts.processing_on
            if ws is None:
                out.append(ts.state)
                continue
            quiet = _time.time() - ws.last_seen
            out.append(f"{ts.state} on {ws.address} ({ws.status.name}, last heard "
                       f"{quiet:.0f}s ago, {len(ws.processing)} tasks there)")
        return out

    try:
        states = client.run_on_scheduler(ask, keys=keys)
    except Exception as exc:  # the message must still be raised without the scheduler
        return f"the scheduler did not say where they are: {type(exc).__name__}: {exc}"
    return "; ".join(f"{n} x {st}" for st, n in Counter(states).most_common())

