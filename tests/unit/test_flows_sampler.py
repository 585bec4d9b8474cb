"""flows/sampler.py, the layer that picks a run's engine: the local engine samples exactly what
the loop's own sampler drew for the same seed (the default's rows do not change), equal prompts
are grouped for an engine and their completions come back in the request's order, and the
engine settings are checked at the door. The vLLM engine itself: tests/integration/
test_engine_vllm.py and test_engine_run.py."""
from pathlib import Path

import pytest
import torch

from engine.boundary import Completion, SampleRequest
from flows import sampler, stages
from flows.config import load_config, validate_config
from training import checkpoints
from training.config import PolicyConfig
from training.episodes import sample_actions
from training.policy import build_policy, save_policy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfg = load_config(ROOT / "configs/tiny.yaml")
    cfg = cfg.model_copy(update={"out_dir": str(tmp_path_factory.mktemp("runs"))})
    torch.manual_seed(0)
    model = build_policy(PolicyConfig()).eval()
    save_policy(model, str(checkpoints.checkpoint_dir(cfg.run_dir, 0) / "model"))
    return cfg, model


def test_the_local_engine_draws_what_the_loops_sampler_drew_for_the_same_seed(run):
    cfg, model = run
    tok = model.rollforge_tokenizer
    contexts = [tok.encode_prompt(p) for p in ("def f(x):\n", "x = ") for _ in range(3)]
    seed = stages.sampling_seed(cfg.seed, 2, "rollout")
    req = SampleRequest(contexts, 1, 1.0, 1.0, 16, ("\n\n",), False, seed)
    got = sampler.sample(cfg, 0, req)
    want = sample_actions(model, contexts, 16, 1.0, 1.0, generator=stages.sampling_generator(
        cfg.seed, 2, "rollout"), stop=("\n\n",))
    assert [list(c.token_ids) for c in got] == [w.completion_ids for w in want]
    assert [list(c.logprobs) for c in got] == [w.logprobs for w in want]
    assert sampler.policy_tokenizer(cfg.run_dir, 0).encode_prompt("x") == tok.encode_prompt("x")


def test_equal_prompts_go_together_and_come_back_in_the_requests_order():
    req = SampleRequest([[1, 2], [3], [1, 2], [5], [3], [1, 2]], 1, 0.7, 0.9, 8, ("\n",))
    parts = sampler.grouped(req)
    assert [(sorted(set(r.prompts)), r.n) for _, r in parts] == [([(5,)], 1),
                                                                 ([(3,)], 2), ([(1, 2)], 3)]
    assert all((r.temperature, r.top_p, r.max_new_tokens, r.stop) == (0.7, 0.9, 8, ("\n",))
               for _, r in parts)
    # an engine's answer: each completion names its prompt by its last token
    answers = [(pos, [Completion(i // r.n, (r.prompts[i // r.n][-1], 9), (-1.0, -2.0), "stop", "")
                      for i in range(r.size)]) for pos, r in parts]
    out = sampler._scatter(req, answers)
    assert [c.prompt_index for c in out] == list(range(6))
    assert [c.token_ids[0] for c in out] == [p[-1] for p in req.prompts]


def test_a_request_of_groups_already_is_left_as_it_is():
    req = SampleRequest([[1], [1]], 4)
    assert sampler.grouped(req) == [(list(range(8)), req)]
    answer = [Completion(i // 4, (7,), (-1.0,), "length", "") for i in range(8)]
    out = sampler._scatter(req, [(list(range(8)), answer)])
    assert [c.prompt_index for c in out] == [0, 0, 0, 0, 1, 1, 1, 1]  # prompt-major, n each


@pytest.mark.parametrize("sampling,named", [
    ({"engine_url": "http://127.0.0.1:8000"}, "sampling.engine is 'local'"),
    ({"engine": "vllm", "engine_url": "127.0.0.1:8000"}, "expected http://host:port"),
    ({"engine": "sglang"}, "engine"),
    ({"engine": "vllm", "engine_url": "http://127.0.0.1:8000", "engine_full_sync": "restart"},
     "not rollforge's to restart"),
])
def test_engine_settings_are_checked_at_the_door(sampling, named):
    with pytest.raises(ValueError, match=named):
        validate_config({"sampling": sampling})


def test_a_server_at_an_address_takes_full_weights_and_merged_lora_versions():
    for sync in ({}, {"engine_lora_sync": "merged"}, {"engine_full_sync": "in_place"}):
        cfg = validate_config({"sampling": {"engine": "vllm", "engine_url": "http://h:8000",
                                            **sync}})
        assert cfg.sampling.engine_url == "http://h:8000"


def test_a_run_on_an_engine_that_is_not_built_exits_2_naming_what_to_run(tmp_path):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import os  # noqa: PLC0415

    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--set", f"out_dir={tmp_path}",
         "--set", "sampling.engine=vllm"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "ROLLFORGE_ENGINE_VENV": str(tmp_path / "no-engine")})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "sampling.engine is vllm" in proc.stderr and "make engine" in proc.stderr
    assert not (tmp_path / "default").exists()
