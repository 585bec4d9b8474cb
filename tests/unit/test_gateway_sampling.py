"""How the gateway calls the sampler (flows/sampler.py): requests queued while a call is running
are sampled together in the next one, never across policy versions (gateway/batching.py); a
gateway started with `--follow` answers with each new version of the run from the moment it is
published, and records which version sampled each turn."""
import threading
import time
from pathlib import Path

import openai
import pytest
import torch

from flows import sampler
from gateway.app import Gateway
from gateway.records import EpisodeLog
from gateway.rows import episode_rows
from gateway.server import Served
from training import checkpoints
from training.config import PolicyConfig
from training.policy import build_policy, save_policy

# served: a fixture, imported so that the tests can request it by name
from gateway_common import KEY, connect, run_at_v0, served  # noqa: F401


def _wait_for(cond):
    """Until `cond()` (synchronisation between the test's threads, not a timing assertion)."""
    while not cond():
        time.sleep(0.01)


def test_requests_queued_while_the_boundary_is_busy_are_sampled_in_one_call(served, monkeypatch):
    srv, gw = served
    gate, calls, outs = threading.Event(), [], []
    real = sampler.sample

    def gated(cfg, version, request, progress=None):
        calls.append(request)
        if len(calls) == 1:
            gate.wait(120)  # the first call holds the boundary until the others have queued
        outs.append(real(cfg, version, request, progress))
        return outs[-1]
    monkeypatch.setattr(sampler, "sample", gated)

    def ask(episode, prompt, **kw):
        connect(srv, episode=episode).completions.create(model="gw", prompt=prompt, n=2,
                                                         max_tokens=3, **kw)
    threads = [threading.Thread(target=ask, args=("q-first", "first = "))]
    threads[0].start()
    _wait_for(lambda: len(calls) == 1)
    for i, p in enumerate(["a = ", "bb = ", "ccc = "]):
        threads.append(threading.Thread(target=ask, args=(f"q-{i}", p)))
        threads[-1].start()
    _wait_for(lambda: len(gw.batcher.queue) == 3)
    threads.append(threading.Thread(target=ask, args=("q-other", "d = "),
                                    kwargs={"temperature": 0.5}))  # other settings: its own call
    threads[-1].start()
    _wait_for(lambda: len(gw.batcher.queue) == 4)
    gate.set()
    for t in threads:
        t.join()
    assert len(calls) == 3
    merged, out, other = calls[1], outs[1], calls[2]
    assert len(merged.prompts) == 3 and merged.n == 2 and other.temperature == 0.5
    for i, p in enumerate(["a = ", "bb = ", "ccc = "]):
        rec, = gw.records.turns(f"q-{i}")
        assert rec["prompts"] == [gw.tok.encode(p)]
        k = merged.prompts.index(tuple(gw.tok.encode(p)))  # its place in the merged call
        assert [c["token_ids"] for c in rec["choices"]] == [list(c.token_ids)
                                                             for c in out[2 * k:2 * k + 2]]
        assert [c["logprobs"] for c in rec["choices"]] == [list(c.logprobs)
                                                           for c in out[2 * k:2 * k + 2]]
        assert [c["prompt_index"] for c in rec["choices"]] == [0, 0]


def _publish(cfg, version: int, seed: int) -> None:
    torch.manual_seed(seed)
    staging = checkpoints.staging_dir(cfg.run_dir, version)
    save_policy(build_policy(PolicyConfig()).eval(), str(staging / "model"))
    checkpoints.publish(staging, checkpoints.checkpoint_dir(cfg.run_dir, version),
                        {"version": version})


def test_a_following_gateway_answers_with_each_new_version_from_the_moment_it_appears(
        tmp_path_factory, monkeypatch):
    """`--follow`: v1 published while an episode is open; the episode's next turn, and the
    listing, are v1's; each turn is recorded with the version that sampled it (a row each,
    gateway/rows.py). A gateway that does not follow keeps v0."""
    from gateway import app as gateway_app

    monkeypatch.setattr(gateway_app, "FOLLOW_CHECK_S", 0.0)
    versions, real = [], sampler.sample

    def spied(cfg, version, request, progress=None):
        versions.append(version)
        return real(cfg, version, request, progress)
    monkeypatch.setattr(sampler, "sample", spied)
    cfg = run_at_v0(tmp_path_factory, "gwf", None)
    records = EpisodeLog(Path(cfg.run_dir) / "gateway")
    following, fixed = Gateway(cfg, 0, KEY, records, follow=True), Gateway(cfg, 0, KEY, records)
    srv, srv_fixed = Served(following), Served(fixed)
    try:
        client = connect(srv, episode="f-1")
        first = client.completions.create(model="gwf", prompt="x = ", max_tokens=4)
        assert first.model_extra["rollforge"]["policy_version"] == 0
        _publish(cfg, 1, seed=1)
        bos = len(following.tok.encode(""))
        prompt = (first.model_extra["prompt_token_ids"][0] + first.choices[0].model_extra[
            "token_ids"] + following.tok.encode(" + 1")[bos:])
        second = client.completions.create(model="gwf", prompt=prompt, max_tokens=4)
        assert second.model_extra["rollforge"]["policy_version"] == 1
        assert versions == [0, 1]
        assert [m.id for m in connect(srv).models.list().data] == ["gwf", "gwf-v1"]
        with pytest.raises(openai.BadRequestError, match="follows the run's newest version"):
            client.completions.create(model="gwf-v0", prompt="x = ", max_tokens=2)
        turns = records.turns("f-1")
        assert [t["policy_version"] for t in turns] == [0, 1]
        rows = episode_rows(turns, following.tok, "gwf")
        assert [(r.policy_version, r.end_reason) for r in rows] == [(0, "split"),
                                                                          (1, "client")]
        still = connect(srv_fixed, episode="f-2").completions.create(
            model="gwf-v0", prompt="x = ", max_tokens=2)
        assert still.model_extra["rollforge"]["policy_version"] == 0 and versions[-1] == 0
    finally:
        srv.stop()
        srv_fixed.stop()


def test_the_batcher_never_merges_requests_for_different_versions():
    from engine.boundary import Completion, SampleRequest
    from gateway.batching import Batcher

    gate, calls = threading.Event(), []

    def call(request, version):
        calls.append((version, len(request.prompts)))
        if len(calls) == 1:
            gate.wait(120)
        return [Completion(i, (1,), (-0.1,), "length", "a") for i in range(request.size)]

    b = Batcher(call)
    req = lambda p: SampleRequest([[p]], 1, 1.0, 1.0, 1)  # noqa: E731
    threads = [threading.Thread(target=b.submit, args=(req(1), 0))]
    threads[0].start()
    _wait_for(lambda: len(calls) == 1)
    for p, v in [(2, 0), (3, 1), (4, 0)]:
        threads.append(threading.Thread(target=b.submit, args=(req(p), v)))
        threads[-1].start()
        _wait_for(lambda n=len(threads) - 1: len(b.queue) == n)
    gate.set()
    for t in threads:
        t.join()
    assert calls == [(0, 1), (0, 2), (1, 1)]
