"""Known pretrained models by short name (training/pretrained.py): what is said when the wheel is
missing, and that a converted folder in the cache is what `policy.model_path` resolves to."""
import importlib.util
import json

import pytest

from flows.cli import main
from training import pretrained


def test_an_unknown_name_is_left_as_a_path_and_a_missing_path_names_the_known_models(tmp_path):
    from training.policy import load_pretrained

    assert pretrained.resolve(str(tmp_path / "x")) == str(tmp_path / "x")
    with pytest.raises(FileNotFoundError, match="smollm2-135m-instruct"):
        load_pretrained(str(tmp_path / "nope"))


def test_a_missing_wheel_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="make model"):
        pretrained.gguf_path("smollm2-135m-instruct")


def test_a_finished_folder_in_the_cache_is_used_without_converting_again(monkeypatch, tmp_path):
    monkeypatch.setenv("ROLLFORGE_MODELS", str(tmp_path))
    out = tmp_path / "smollm2-135m-instruct"
    out.mkdir()
    (out / pretrained.MODEL_FILE).write_text(json.dumps({"name": "smollm2-135m-instruct"}))
    monkeypatch.setattr(pretrained, "_load_gguf", lambda src: pytest.fail("converted again"))
    assert pretrained.resolve("smollm2-135m-instruct") == str(out)


def test_convert_of_a_bad_argument_exits_2_naming_it(tmp_path, capsys):
    assert main(["model", "convert", str(tmp_path / "weights.bin")]) == 2
    err = capsys.readouterr().err
    assert "weights.bin" in err and "smollm2-135m-instruct" in err
