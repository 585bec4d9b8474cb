"""The gateway in front of a run whose policy samples through a real vLLM server
(`sampling.engine: vllm`, started by flows/sampler.py for the run): the real `openai` client's
requests are answered by the engine, and the record and the rows are, token for token, what
the engine returned through the boundary. Skips without the engine's venv (`make engine`)."""
from pathlib import Path

import openai
import pytest
import torch

from engine.vllm_server import DEFAULT_VENV
from flows import sampler
from flows.config import load_config
from gateway.app import Gateway
from gateway.records import EpisodeLog
from gateway.rows import episode_rows
from gateway.server import Served
from training import checkpoints
from training.policy import build_policy, save_policy

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
KEY = "engine-test-key"

if not (DEFAULT_VENV / "bin" / "python").is_file():
    pytest.skip(f"no inference engine venv at {DEFAULT_VENV}: build it with `make engine`",
                allow_module_level=True)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    # head size 64 (vLLM's CPU attention takes 32 and up); one engine thread beside the tests
    cfg = load_config(ROOT / "configs/tiny.yaml", [
        "sampling.engine=vllm", "policy.n_embd=64", "policy.n_head=1",
        "sampling.engine_threads=1", f"out_dir={tmp_path_factory.mktemp('runs')}"])
    torch.manual_seed(0)
    staging = checkpoints.staging_dir(cfg.run_dir, 0)
    save_policy(build_policy(cfg.policy).eval(), str(staging / "model"))
    checkpoints.publish(staging, checkpoints.checkpoint_dir(cfg.run_dir, 0), {"version": 0})
    gw = Gateway(cfg, 0, KEY, EpisodeLog(Path(cfg.run_dir) / "gateway"))
    srv = Served(gw)
    try:
        yield srv, gw
    finally:
        srv.stop()
        sampler.close_engines()


def test_the_engines_answers_are_recorded_token_for_token(served, monkeypatch):
    srv, gw = served
    calls = []
    real = sampler.sample

    def spy(cfg, version, request, progress=None):
        out = real(cfg, version, request, progress)
        calls.append(out)
        return out
    monkeypatch.setattr(sampler, "sample", spy)
    client = openai.OpenAI(base_url=srv.url, api_key=KEY, max_retries=0, timeout=900,
                           default_headers={"X-Episode-Id": "engine-1"})
    p1 = gw.tok.encode("def add(a, b):\n")
    r1 = client.completions.create(model="tiny", prompt=p1, n=3, max_tokens=12, logprobs=0)
    s1 = r1.choices[0].model_extra["token_ids"]
    obs = gw.tok.encode("\n# again\n", bos=False)
    r2 = client.completions.create(model="tiny", prompt=p1 + s1 + obs, max_tokens=12, logprobs=0)
    assert sampler.engine_for(gw.cfg).server is not None  # the engine answered, not the local one
    turns = gw.records.turns("engine-1")
    for rec, sampled, resp in zip(turns, calls, (r1, r2)):
        assert [c["token_ids"] for c in rec["choices"]] == [list(c.token_ids) for c in sampled]
        assert [c["logprobs"] for c in rec["choices"]] == [list(c.logprobs) for c in sampled]
        assert [c.logprobs.token_logprobs for c in resp.choices] == [list(c.logprobs)
                                                                     for c in sampled]
    rows = episode_rows(turns, gw.tok, "tiny")
    conv = next(r for r in rows if r.turns == 2)  # choice 0 continued; 1 and 2 are branches
    s2 = list(calls[1][0].token_ids)
    assert conv.completion_token_ids == s1 + obs + s2
    assert conv.sampling_logprobs == list(calls[0][0].logprobs) + [0.0] * len(obs) + list(
        calls[1][0].logprobs)
    assert conv.completion_mask == [1] * len(s1) + [0] * len(obs) + [1] * len(s2)
    assert len(rows) == 3
