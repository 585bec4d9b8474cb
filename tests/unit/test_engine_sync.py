"""flows/sampler.py's RunEngine bringing a vLLM server to each version of a full-weights
policy (`sampling.engine_full_sync`): a managed server loaded in place when the load takes,
restarted when it fails or changes nothing; a server at an address (engine_url) loaded in place
or the stage fails; never a completion of one version under another's weights. The server here
is a fake that serves whichever checkpoint folder it last loaded; the real load:
tests/integration/test_engine_vllm.py."""
import threading
from pathlib import Path

import pytest
import torch

from engine.boundary import Completion, SampleRequest
from engine.vllm_server import EngineError
from flows import sampler
from flows.config import load_config
from training import checkpoints
from training.config import PolicyConfig
from training.policy import build_policy, save_policy

ROOT = Path(__file__).resolve().parents[2]


class FakeServer:
    """Serves the checkpoint folder it was started on or last loaded; its probe log-probs are
    that folder's version's. `load` says what a reload does: "ok", "noop" or "error"."""

    load = "ok"
    started: list["FakeServer"] = []
    remote_serves = ""

    def __init__(self, settings):
        self.settings, self.managed, self.proc = settings, True, None
        self.base_url, self.log_path, self.model_name = "http://fake", None, "policy"
        self.serves = settings.model
        self.reloads: list[str] = []
        self.up = False

    @classmethod
    def connect(cls, base_url):  # a server someone else runs, on v0's folder already
        there = cls(type("S", (), {"model": FakeServer.remote_serves})())
        there.managed, there.base_url, there.up = False, base_url, True
        return there

    def start(self):
        self.up = True
        FakeServer.started.append(self)
        return self

    def alive(self):
        return self.up

    def stop(self):
        if self.managed:  # as the real one: a connected server is left running
            self.up = False

    def version(self) -> int:
        return int(Path(self.serves).parent.name[1:])  # .../checkpoints/v0001/model

    def reload_weights(self, path):
        self.reloads.append(str(path))
        if FakeServer.load == "error":
            raise EngineError("HTTP 404: no /collective_rpc")
        if FakeServer.load == "ok":
            self.serves = str(path)

    def prompt_logprobs(self, ids):
        return [-1.0 - 0.1 * self.version()] * (len(ids) - 1)


@pytest.fixture
def run(tmp_path, monkeypatch):
    cfg = load_config(ROOT / "configs/tiny.yaml")
    torch.manual_seed(0)
    model = build_policy(PolicyConfig()).eval()
    for v in range(3):
        save_policy(model, str(checkpoints.checkpoint_dir(str(tmp_path / cfg.run_id), v) / "model"))
    monkeypatch.setattr(sampler, "VLLMServer", FakeServer)
    FakeServer.load, FakeServer.started = "ok", []

    FakeServer.remote_serves = str(checkpoints.checkpoint_dir(str(tmp_path / cfg.run_id), 0)
                                   / "model")

    def engine(mode: str, url: str | None = None) -> sampler.RunEngine:
        s = cfg.sampling.model_copy(update={"engine": "vllm", "engine_full_sync": mode,
                                            "engine_url": url})
        return sampler.RunEngine(cfg.model_copy(update={"out_dir": str(tmp_path), "sampling": s}))
    return engine


def test_new_full_weights_are_loaded_into_the_running_server_and_counted(run):
    eng = run("auto")
    eng.sync(0)
    eng.sync(1)
    eng.sync(2)
    assert len(FakeServer.started) == 1 and eng.server.version() == 2 and eng.version == 2
    assert eng.server.settings.extra_env.get("VLLM_SERVER_DEV_MODE") == "1"
    m = eng.take_metrics()
    assert (m["engine/syncs"], m["engine/sync_in_place"], m["engine/sync_fallbacks"]) == (3, 2, 0)
    assert eng.take_metrics()["engine/sync_in_place"] == 0  # per iteration


@pytest.mark.parametrize("load", ["noop", "error"])
def test_a_load_that_fails_or_changes_nothing_becomes_a_restart_on_the_new_version(run, load):
    eng = run("auto")
    eng.sync(0)
    FakeServer.load = load
    eng.sync(1)
    first, second = FakeServer.started
    assert first.reloads and not first.alive()
    assert second.alive() and eng.server is second and second.version() == 1 and eng.version == 1
    m = eng.take_metrics()
    assert (m["engine/sync_in_place"], m["engine/sync_fallbacks"]) == (0, 1)
    FakeServer.load = "ok"  # the new server is probed afresh: its next load is checked against v1
    eng.sync(2)
    assert eng.server is second and second.version() == 2
    assert eng.take_metrics()["engine/sync_in_place"] == 1


def test_in_place_mode_fails_the_sync_instead_of_restarting(run):
    eng = run("in_place")
    eng.sync(0)
    FakeServer.load = "noop"
    with pytest.raises(EngineError, match="changed nothing"):
        eng.sync(1)
    assert len(FakeServer.started) == 1 and eng.take_metrics()["engine/sync_fallbacks"] == 0
    eng.sync(1)  # the stage's retry: what the server holds is unknown, so a fresh one serves v1
    assert len(FakeServer.started) == 2 and eng.server.version() == 1 and eng.version == 1


def test_restart_mode_never_loads_in_place_nor_opens_the_development_routes(run):
    eng = run("restart")
    eng.sync(0)
    eng.sync(1)
    assert len(FakeServer.started) == 2 and not FakeServer.started[0].reloads
    assert "VLLM_SERVER_DEV_MODE" not in eng.server.settings.extra_env
    assert eng.server.version() == 1 and eng.take_metrics()["engine/sync_in_place"] == 0


def test_a_version_change_waits_for_the_requests_in_flight_at_the_old_one(run, monkeypatch):
    eng = run("auto")
    entered, release = threading.Event(), threading.Event()
    seen: dict[int, list[int]] = {}

    class Sampler:  # records the version the server holds while each request samples
        def __init__(self, server, banned, model_name=None):
            self.server = server

        def sample(self, req, progress=None):
            want = req.prompts[0][0]  # the test's prompt is the version it asks for
            seen[want] = [self.server.version()]
            if want == 0:
                entered.set()
                release.wait(10)
            seen[want].append(self.server.version())
            return [Completion(i // req.n, (1,), (-0.5,), "stop", "") for i in range(req.size)]

    monkeypatch.setattr(sampler, "VLLMSampler", Sampler)
    eng.sync(0)
    first = threading.Thread(target=eng.sample, args=(0, SampleRequest([[0]], 1)))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=eng.sample, args=(1, SampleRequest([[1]], 1)))
    second.start()
    second.join(0.5)
    assert second.is_alive() and eng.server.version() == 0  # the load waits for v0's request
    release.set()
    first.join(10)
    second.join(10)
    assert seen == {0: [0, 0], 1: [1, 1]}


def test_full_weights_reach_a_server_at_an_address_in_place_and_a_bad_load_fails_the_stage(run):
    eng = run("auto", "http://elsewhere:8000")
    eng.sync(0)  # the first load: the server holds v0 already, so an unchanged probe is right
    eng.sync(1)
    there = eng.server
    assert not FakeServer.started and not there.managed and there.version() == 1
    assert all(Path(p).is_absolute() for p in there.reloads) and len(there.reloads) == 2
    assert eng.take_metrics()["engine/sync_in_place"] == 2
    FakeServer.load = "noop"
    for _ in range(2):  # the retry is checked against v1's probe too, never restarts
        with pytest.raises(EngineError, match="changed nothing"):
            eng.sync(2)
        assert eng.version is None and not FakeServer.started
    FakeServer.load = "ok"
    eng.sync(2)
    assert eng.server is there and there.version() == 2 and eng.version == 2
    eng.close()
    assert there.alive()  # someone else's: left running


def test_closing_the_engine_deletes_its_merged_copies_and_keeps_the_server_log(run, tmp_path):
    eng = run("auto")
    scratch = Path(eng.cfg.run_dir) / "engine"
    (scratch / "merged-v0002").mkdir(parents=True)
    (scratch / "merged-v0002" / "model.safetensors").write_bytes(b"\0" * 64)
    (scratch / "server-1.log").write_text("served\n")
    eng.sync(0)
    eng.close()
    assert not list(scratch.glob("merged-v*")) and (scratch / "server-1.log").is_file()
    assert not eng.server
