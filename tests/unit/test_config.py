import subprocess
import sys
from pathlib import Path

import pytest

from flows.config import ConfigError, RunConfig, load_config, parse_override

ROOT = Path(__file__).resolve().parents[2]


def test_default_config_file_validates_and_matches_the_documented_defaults():
    cfg = load_config()
    assert cfg.sandbox.backend == "process"
    assert cfg.run_dir.endswith(cfg.run_id)


def test_override_sets_a_nested_field_with_a_yaml_value():
    cfg = load_config(None, ["rl.lr=1e-4", "tasks.families=[add, mul]", "run_id=x1"])
    assert cfg.rl.lr == 1e-4 and cfg.tasks.families == ["add", "mul"] and cfg.run_id == "x1"


@pytest.mark.parametrize("override, needle", [
    ("sandbox.backend=vm", "sandbox.backend"),
    ("rl.lr=-1", "rl.lr"),
    ("rl.nope=1", "rl.nope"),
    ("tasks.families=[add, bogus]", "bogus"),
    ("policy.n_head=5", "n_head"),
])
def test_invalid_values_name_the_field(override, needle):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert needle in str(err.value)


def test_literal_error_lists_the_allowed_values():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["sandbox.backend=vm"])
    assert "'process'" in str(err.value) and "'docker'" in str(err.value)


def test_override_without_equals_is_refused():
    with pytest.raises(ConfigError):
        parse_override("rl.lr")


def test_sft_steps_0_alone_turns_the_warm_start_off_under_a_config_with_a_criterion():
    """configs/default.yaml trains until a pass criterion; `--set sft.steps=0` alone is the run
    from the model as it is, the same config as one that also unsets the criterion."""
    assert load_config("configs/default.yaml", []).sft.until_pass is not None
    off = load_config("configs/default.yaml", ["sft.steps=0"])
    both = load_config("configs/default.yaml", ["sft.steps=0", "sft.until_pass=null"])
    assert off.sft.steps == 0 and off.sft.until_pass is None
    assert off.hash() == both.hash()


def test_config_hash_ignores_where_the_run_writes():
    a = RunConfig(out_dir="a")
    b = RunConfig(out_dir="b")
    c = RunConfig(rl={"lr": 1e-5})
    assert a.hash() == b.hash() != c.hash()


def test_cli_bad_value_exits_2_and_writes_nothing(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--set", f"out_dir={tmp_path}",
         "--set", "sampling.temperature=0"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "sampling.temperature" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_missing_config_file_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--config",
                           str(tmp_path / "nope.yaml")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_settings_that_change_no_result_keep_the_hash_of_runs_made_before_them():
    # pinned: the default config's hash (since its warm start trains until a criterion);
    # settings that change no result (sandbox.fork_server, an unset tasks.function_name,
    # episodes while off) stay out of it, so a resumed run finds its finished stages
    assert load_config("configs/default.yaml").hash() == "359e281f5047"
    # the default before its probe left out generic-named tasks: a probe that may hold them is
    # how it ran
    assert load_config("configs/default.yaml",
                       ["sft.probe_generic_names=true"]).hash() == "a44a1f79a4c8"
    # without a criterion there is no probe, so the choice changes nothing
    fixed = ["sft.until_pass=null"]
    assert load_config("configs/default.yaml", [*fixed, "sft.probe_generic_names=true"]).hash() \
        == load_config("configs/default.yaml", fixed).hash()
    # the default before its SFT data held generic names: an unset share is how it ran
    before = ["tasks.sft_generic_names=0", "sft.probe_generic_names=true"]
    base = load_config("configs/default.yaml", before)
    assert base.hash() == "2d1cf792689b"
    assert load_config("configs/default.yaml", [*before, "tasks.balance_families=false"]).hash() != base.hash()
    assert load_config("configs/default.yaml", [*before, "sandbox.fork_server=false"]).hash() == base.hash()
    assert load_config("configs/default.yaml", [*before, "tasks.function_name=f"]).hash() != base.hash()
    fixed = load_config("configs/default.yaml", [*before, "sft.until_pass=null", "sft.steps=1200"])
    assert fixed.hash() == "8fdcdb25db67"  # the fixed-length warm start of runs made before it
    assert load_config("configs/default.yaml", [*before, "sft.until_pass=null", "sft.steps=1200",
                                                "sft.probe_every=50"]).hash() == fixed.hash()
    old_sft = ["sft.until_pass=null", "sft.steps=1200"]
    no_replay = load_config("configs/default.yaml", [*before, "rl.replay_coef=0", *old_sft])
    assert no_replay.hash() != fixed.hash()
    # replay off: its batch size changes nothing, and the hash is that of runs made before it
    assert load_config("configs/default.yaml", [*before, "rl.replay_coef=0", "rl.replay_per_step=4",
                                                *old_sft]).hash() \
        == no_replay.hash() == "cb90375253ed"


@pytest.mark.parametrize("path", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_every_shipped_config_validates(path):
    """A config in configs/ that no longer validates (a field renamed or moved) is found here,
    not by the user who runs it."""
    import re  # noqa: PLC0415

    try:
        cfg = load_config(ROOT / "configs" / path)
    except ConfigError as exc:  # a kind deleted from this tree (tests/unit/test_kind_folders.py)
        gone = re.search(r"unknown kind '(\w+)'", str(exc))
        if gone and not (ROOT / "envs" / gone[1]).is_dir():
            pytest.skip(f"{path} plays the kind {gone[1]!r}, whose folder this tree lacks")
        raise
    assert len(cfg.hash()) == 12


def test_a_pretrained_policys_prompts_are_measured_in_its_chat_tokens_before_a_run(smollm2_dir):
    """configs/smollm2-tools.yaml's agent episodes open with the tools in SmolLM2's system
    message: the check renders them as the loop will and names the first task that does not
    fit, with the count of its own tokens."""
    import re  # noqa: PLC0415

    from envs.chat import ChatRenderer  # noqa: PLC0415
    from envs.tools import schemas  # noqa: PLC0415
    from training.tokenizer import load_tokenizer  # noqa: PLC0415

    with pytest.raises(ConfigError, match=r"policy.max_len=300: task (\S+) of source "
                       r"'agent-tools' needs (\d+) tokens") as err:
        load_config(ROOT / "configs/smollm2-tools.yaml", ["policy.max_len=300"])
    task_id, need = re.search(r"task (\S+) of source 'agent-tools' needs (\d+)",
                              str(err.value)).groups()
    cfg = load_config(ROOT / "configs/smollm2-tools.yaml")
    src = next(s for s in cfg.tasks.sources if s.label == "agent-tools")
    env = src.environment()
    task = next(t for t in env.generate() if t.task_id == task_id)
    r = ChatRenderer(load_tokenizer(str(smollm2_dir)), tools=schemas(env.tool_kind))
    ids = r.ids(r.opening(env.reset(task)[1]), True)
    assert int(need) == len(ids) + env.action_tokens(cfg.sampling.max_new_tokens) > 300


def test_a_chat_template_file_must_exist_and_needs_a_pretrained_policy():
    with pytest.raises(ConfigError, match=r"policy.chat_template='nope.jinja': no such file"):
        load_config(ROOT / "configs/smollm2-tools.yaml", ["policy.chat_template=nope.jinja"])
    with pytest.raises(ConfigError, match=r"needs a policy with a Hugging Face tokenizer"):
        load_config(None, ["policy.chat_template=configs/chat_templates/qwen3.jinja"])
    cfg = load_config(ROOT / "configs/smollm2-tools.yaml",
                      ["policy.chat_template=configs/chat_templates/qwen3.jinja"])
    assert cfg.policy.chat_template == "configs/chat_templates/qwen3.jinja"
    for value, want in (("true", True), ("false", False)):
        assert load_config(None, [f"policy.chat_template={value}"]).policy.chat_template is want
