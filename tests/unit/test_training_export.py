"""`rollforge export`: a checkpoint becomes a directory plain transformers loads as is."""
import json

import pytest
import torch

from flows.cli import main
from training.config import PolicyConfig, RLConfig, SFTConfig
from training.generate import sample
from training.tokenizer import ByteTokenizer, HFTokenizer
from training.trainer import policy_for_sampling, sft_warm_start


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = tmp_path_factory.mktemp("exp") / "run"
    sft_warm_start(str(run), ["def f(x):\n"] * 2, ["    return x\n"] * 2,
                   PolicyConfig(n_layer=1, n_embd=32, n_head=2, max_len=64),
                   SFTConfig(steps=2, batch_size=2), RLConfig(), 0)
    return run


def test_export_writes_a_directory_automodel_and_autotokenizer_load_and_generate_the_same(run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "hf"
    assert main(["export", str(run), "--out", str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tok = AutoTokenizer.from_pretrained(str(out))
    text = "def f(x):\n  ü"
    assert tok(text, add_special_tokens=False)["input_ids"] == ByteTokenizer().encode(text, bos=False)
    ours = sample(policy_for_sampling(str(run), 0), ["def g(y):\n"], 10, greedy=True)[0]
    theirs = sample(model, ["def g(y):\n"], 10, greedy=True, tokenizer=HFTokenizer(tok, chat_template=False))[0]
    assert theirs.completion_ids == ours.completion_ids
    assert json.loads((out / "rollforge_export.json").read_text())["version"] == 0


def test_export_from_engine_state_matches_the_model_folder_for_fp32(run, tmp_path):
    from transformers import AutoModelForCausalLM

    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["export", str(run), "--out", str(a)]) == 0
    assert main(["export", str(run), "--out", str(b), "--from-engine", "--version", "0"]) == 0
    sa = AutoModelForCausalLM.from_pretrained(str(a)).state_dict()
    sb = AutoModelForCausalLM.from_pretrained(str(b)).state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_export_refuses_an_unknown_version_or_a_non_empty_target_with_exit_2(run, tmp_path, capsys):
    assert main(["export", str(run), "--out", str(tmp_path / "x"), "--version", "7"]) == 2
    assert "version '7'" in capsys.readouterr().err
    full = tmp_path / "full"
    full.mkdir()
    (full / "f").write_text("x")
    assert main(["export", str(run), "--out", str(full)]) == 2
    assert main(["export", str(tmp_path / "nothing"), "--out", str(tmp_path / "y")]) == 2


def test_overwrite_replaces_the_old_export_whole_and_leaves_nothing_beside_it(run, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "hf"
    out.mkdir()
    (out / "stale.txt").write_text("from an older export")
    assert main(["export", str(run), "--out", str(out), "--overwrite"]) == 0
    assert not (out / "stale.txt").exists()  # the old folder is gone, not merged into
    assert (out / "rollforge_export.json").is_file()
    AutoModelForCausalLM.from_pretrained(str(out))
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no staging or old copy left
