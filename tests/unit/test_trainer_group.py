"""The trainer group's pieces that need no process group: `rl.processes` at the door, its place
in the config hash, how the ranks' metrics make the step's, and a group whose rank dies at
start-up being reported and shut down (not waited on)."""
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flows.config import ConfigError, load_config
from flows.rollouts import launcher_vars
from training import group, rank_spawn
from training.config import RLConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", ["0", "-2", "many", "true", "1.5"])
def test_bad_process_count_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"rl.processes={value}"])
    assert "rl.processes" in str(err.value)


def test_cli_bad_process_count_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--set", f"out_dir={tmp_path}",
                           "--set", "rl.processes=0"], capture_output=True, text=True)
    assert proc.returncode == 2 and "rl.processes" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_process_count_is_where_the_update_runs_not_what_it_computes():
    base = load_config("configs/default.yaml")
    assert base.rl.processes == 1
    assert base.hash() == "359e281f5047"  # the pin in test_config.py, unchanged by the field
    assert load_config("configs/default.yaml", ["rl.processes=4"]).hash() == base.hash()
    assert load_config("configs/default.yaml", ["rl.processes=gpus"]).rl.processes == "gpus"


def test_gpus_means_one_rank_per_local_device_and_one_without():
    import torch

    assert group.resolve_processes("gpus") == max(1, torch.cuda.device_count())
    assert group.resolve_processes(3) == 3


def test_step_metrics_sum_the_tokens_of_every_rank_over_the_slowest_rank():
    def rank(tokens, seconds, peak, opt):
        return {"metrics": {"train/loss": 0.5, "train/tokens": tokens, "train/seconds": seconds,
                            "train/tokens_per_s": tokens / seconds, "train/processes": 2,
                            "train/peak_mem_mb": peak, "train/optimizer_mb": opt,
                            "train/params_mb": 1.0}}

    out = group.combine([rank(300, 2.0, 500.0, 0.6), rank(100, 4.0, 520.0, 0.5)])
    assert out["train/tokens"] == 400 and out["train/seconds"] == 4.0
    assert out["train/tokens_per_s"] == 100.0
    assert out["train/peak_mem_mb"] == 520.0 and out["train/optimizer_mb"] == 0.6
    assert out["train/rank0/peak_mem_mb"] == 500.0 and out["train/rank1/optimizer_mb"] == 0.5
    assert out["train/loss"] == 0.5  # one step: rank 0's figures


def test_a_rank_that_dies_at_start_is_reported_and_the_group_shut_down(monkeypatch):
    # A rank whose interpreter cannot start (a bad python) dies before its first reply.
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(group.RankFailure, match=r"rank \d of 2 died during the start"):
        group.TrainerGroup(2, start_timeout_s=60)


def test_one_process_runs_the_update_in_this_process(monkeypatch, tmp_path):
    called = {}

    def fake(*args):
        called["args"] = args
        return {"train/processes": 1}

    import training.trainer

    monkeypatch.setattr(training.trainer, "grpo_update", fake)
    monkeypatch.setattr(group, "TrainerGroup", None)  # a group would fail to start
    out = group.update(str(tmp_path), 0, [], None, RLConfig(), 1.0, 0)
    assert out == {"train/processes": 1} and called["args"][1] == 0


FAKE_RANK = '''
import os, pickle, sys
from training.rank import connect_supervisor
send = recv = connect_supervisor()
rank = int(os.environ["RANK"])
send.send({"rank": rank, "pid": os.getpid()})
while True:
    job = pickle.loads(recv.recv_bytes())
    if job is None:
        sys.exit(0)
    if job.get("fail") == rank:
        send.send({"error": "Traceback: ValueError: bad batch"})
        sys.exit(1)
    if job.get("die") == rank:
        os._exit(3)
    send.send({"rank": rank, "metrics": {"pid": os.getpid(), "version": job["version"]}})
'''


@pytest.fixture
def fake_ranks(tmp_path, monkeypatch):
    """Rank processes that speak the group's protocol without DeepSpeed: the supervisor alone."""
    script = tmp_path / "fake_rank.py"
    script.write_text(FAKE_RANK)
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(exe))


def test_the_group_stays_resident_across_jobs_and_reports_a_failing_rank(fake_ranks):
    g = group.TrainerGroup(2, start_timeout_s=60)
    try:
        first = g.run({"version": 0})
        second = g.run({"version": 1})
        assert [r["metrics"]["pid"] for r in first] == [r["metrics"]["pid"] for r in second]
        assert g.jobs == 2 and g.usable()
        with pytest.raises(group.RankFailure, match="(?s)rank 1 of 2 failed .*bad batch"):
            g.run({"version": 2, "fail": 1})
        assert not g.alive()  # the survivor was shut down with it
    finally:
        g.close(force=True)


def test_a_rank_that_dies_mid_job_is_reported_with_its_exit_code(fake_ranks):
    g = group.TrainerGroup(2, start_timeout_s=60)
    try:
        with pytest.raises(group.RankFailure, match="rank 0 of 2 died during the update of "
                                                    "version 5 \\(exit code 3\\)"):
            g.run({"version": 5, "die": 0})
        assert not g.alive()
    finally:
        g.close(force=True)


def test_a_group_left_with_an_abandoned_job_is_replaced(fake_ranks):
    first = group.group_of(2)
    try:
        first.busy = True  # as when a stage deadline cut the wait short
        second = group.group_of(2)
        assert second is not first and not first.alive() and second.usable()
    finally:
        group.close_group()


class _Facts:
    """A client whose workers report these facts (what `plan` asks a cluster)."""

    def __init__(self, facts):
        self.facts = facts

    def run(self, fn, *args, **kwargs):
        assert fn is rank_spawn.worker_facts
        return self.facts


def test_ranks_spread_evenly_over_the_workers_numbered_within_each_host(monkeypatch):
    from training import threads

    monkeypatch.setattr(threads, "USER_OMP", "")
    facts = {"tcp://10.0.0.2:9001": {"host": "10.0.0.2", "cpus": 32, "gpus": 0},
             "tcp://10.0.0.1:9001": {"host": "10.0.0.1", "cpus": 16, "gpus": 0},
             "tcp://10.0.0.1:9002": {"host": "10.0.0.1", "cpus": 16, "gpus": 0}}
    slots = group.plan(6, _Facts(facts))
    assert [s.worker for s in slots] == ["tcp://10.0.0.1:9001", "tcp://10.0.0.1:9002",
                                         "tcp://10.0.0.2:9001"] * 2
    assert [(s.host, s.local_rank, s.local_world) for s in slots] == [
        ("10.0.0.1", 0, 4), ("10.0.0.1", 1, 4), ("10.0.0.2", 0, 2),
        ("10.0.0.1", 2, 4), ("10.0.0.1", 3, 4), ("10.0.0.2", 1, 2)]
    # the host's cores shared by its ranks, unless the user said how many threads
    assert [s.threads for s in slots] == [4, 4, 16, 4, 4, 16]
    monkeypatch.setattr(threads, "USER_OMP", "3")
    assert {s.threads for s in group.plan(6, _Facts(facts))} == {3}


def test_local_ranks_beside_the_sampler_take_their_share_of_the_cores(monkeypatch):
    from training import threads

    monkeypatch.setattr(threads, "USER_OMP", "")
    monkeypatch.setattr(group.os, "cpu_count", lambda: 2)
    assert [s.threads for s in group.plan(1)] == [2]
    assert [s.threads for s in group.plan(1, share=0.5)] == [1]  # rl.overlap on 2 cores
    monkeypatch.setattr(group.os, "cpu_count", lambda: 16)
    assert [s.threads for s in group.plan(2, share=0.5)] == [4, 4]


def test_gpus_on_a_cluster_counts_each_hosts_devices_once():
    # two workers on one 8-GPU host both see its 8 devices: 8 ranks there, not 16
    facts = {"tcp://a:1": {"host": "a", "cpus": 8, "gpus": 8},
             "tcp://a:2": {"host": "a", "cpus": 8, "gpus": 8},
             "tcp://b:1": {"host": "b", "cpus": 8, "gpus": 4}}
    assert group.resolve_processes("gpus", _Facts(facts)) == 12
    assert group.resolve_processes("gpus", _Facts({"tcp://c:1": {"host": "c", "cpus": 2,
                                                                 "gpus": 0}})) == 1


def test_a_cluster_without_workers_is_refused():
    with pytest.raises(group.RankFailure, match="no workers"):
        group.plan(2, _Facts({}))


@pytest.fixture
def threads_cluster():
    """Two Dask workers in this process (so they start the fake ranks too), over TCP on
    loopback like a cluster's."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


def test_ranks_on_dask_workers_run_jobs_and_a_death_shuts_the_group(fake_ranks, threads_cluster):
    client = threads_cluster
    g = group.TrainerGroup(2, client, start_timeout_s=60, launcher_vars=launcher_vars())
    try:
        assert g.placement == "dask" and not g.procs
        assert sorted(g.remote) == sorted(client.scheduler_info()["workers"])
        first = g.run({"version": 0})
        second = g.run({"version": 1})
        assert [r["metrics"]["pid"] for r in first] == [r["metrics"]["pid"] for r in second]
        pids = [r["metrics"]["pid"] for r in first]
        assert set(pids) == set(rank_spawn.SPAWNED)  # started by the workers, in their process
        with pytest.raises(group.RankFailure, match="rank 1 of 2 died during the update of "
                                                    "version 2 .*Dask worker tcp://"):
            g.run({"version": 2, "die": 1})
        assert not g.alive() and not rank_spawn.SPAWNED  # the survivor killed, both reaped
    finally:
        g.close(force=True)


def test_a_stranger_without_the_key_cannot_join_the_group(fake_ranks, monkeypatch):
    """The listener takes only connections that prove the group's key."""
    from multiprocessing.connection import Client

    real_popen = rank_spawn.popen

    refused = []

    def knock(host, port):
        try:
            Client((host, int(port)), authkey=b"not the key")
        except Exception as exc:  # refused by the handshake
            refused.append(exc)

    def popen_and_knock(env):
        # the stranger knocks first, while the supervisor is still starting the ranks
        t = threading.Thread(target=knock, args=env[group.ADDR_ENV].rsplit(":", 1))
        t.start()
        knockers.append(t)
        return real_popen(env)

    knockers = []

    monkeypatch.setattr(rank_spawn, "popen", popen_and_knock)
    g = group.TrainerGroup(2, start_timeout_s=60)
    try:
        assert [r["metrics"]["version"] for r in g.run({"version": 7})] == [7, 7]
        for t in knockers:
            t.join(timeout=30)
        assert len(refused) == 2, refused
    finally:
        g.close(force=True)


def _silent_client_first(monkeypatch, held: list):
    """Before the ranks start, a stranger connects to the group's listener and says nothing
    (as anything on the network could with `rl.placement: dask`): the first in the backlog."""
    import socket

    real_popen = rank_spawn.popen

    def popen_after_a_silent_client(env):
        if not held:
            host, port = env[group.ADDR_ENV].rsplit(":", 1)
            held.append(socket.create_connection((host, int(port))))
        return real_popen(env)

    monkeypatch.setattr(rank_spawn, "popen", popen_after_a_silent_client)


def _start_in_thread(*args, **kwargs) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def start():
        try:
            out["group"] = group.TrainerGroup(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            out["error"] = exc

    t = threading.Thread(target=start, daemon=True)
    t.start()
    return t, out


def test_a_silent_client_on_the_listener_does_not_stall_the_start(fake_ranks, monkeypatch):
    held: list = []
    _silent_client_first(monkeypatch, held)
    t, out = _start_in_thread(2, start_timeout_s=60)
    try:
        t.join(timeout=45)  # the handshake's own limit is seconds; the start's is 60 s
        stalled = t.is_alive()
    finally:
        for s in held:
            s.close()  # the stranger leaves: a stalled start (the old code) goes on
        t.join(timeout=60)
        if "group" in out:
            out["group"].close(force=True)
    assert held, "the stranger never connected"
    assert not stalled, "the group's start waited on a client that said nothing"
    assert "error" not in out, out.get("error")


def test_a_silent_client_does_not_stretch_the_start_deadline(tmp_path, monkeypatch):
    # ranks that never connect (they only sleep), and a stranger holding the listener: the
    # start still gives up at its deadline, not when the stranger leaves
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\nexec sleep 120\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(exe))
    held: list = []
    _silent_client_first(monkeypatch, held)
    t, out = _start_in_thread(2, start_timeout_s=3)
    try:
        t.join(timeout=30)
        stalled = t.is_alive()
    finally:
        for s in held:
            s.close()
        t.join(timeout=60)
    assert not stalled, "the start outlived its deadline behind a silent client"
    assert isinstance(out.get("error"), group.RankFailure), out
    assert "did not connect within 3s" in str(out["error"])


def test_a_world_of_one_leaves_no_rendezvous_port_for_its_children_to_inherit():
    """The process holds its group's port until it exits; a child that inherited MASTER_PORT
    would try to bind the same port (EADDRINUSE) instead of taking a free one."""
    script = (
        "import os, subprocess, sys\n"
        "from training.engine import setup_distributed, world_size\n"
        "setup_distributed()\n"
        "assert world_size() == 1\n"
        "print('@', 'MASTER_PORT' in os.environ, 'MASTER_ADDR' in os.environ)\n"
        "child = subprocess.run([sys.executable, '-c', 'from training.engine import "
        "setup_distributed, rank; setup_distributed(); print(\"@\", rank())'], capture_output=True,"
        " text=True, timeout=300)\n"
        "print('@', child.returncode, *[l for l in child.stdout.splitlines() if l[:1] == '@'],"
        " child.stderr[-2000:])\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("@")]  # not DeepSpeed's
    assert lines[0] == "@ False False"
    assert lines[1].startswith("@ 0 @ 0"), proc.stdout
