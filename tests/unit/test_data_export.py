"""`rollforge data export`: verified trajectories of real stores as an SFT dataset (filters,
the no-leak split, dedup, the cap, atomic output, bad input)."""
from __future__ import annotations

import json
import os

import pandas as pd
import pyarrow.parquet as pq
import pytest

from flows.cli import main
from storage import sft_export
from storage.registry import write_run_config
from storage.sft_export import normalise_answer
from storage.synthetic import example_row
from storage.trajectories import write_shard


def _row(run: str, i: int, task: str, passed: int = 4, **kw) -> dict:
    """A graded single-turn row of `task`: `passed` of 4 tests, solved iff all pass."""
    row = example_row(run, 0, i, task_id=task, split="train", status="ok", infra_error=False,
                      error_type=None, hack_flags=[], tests_passed=passed, tests_total=4,
                      test_outcomes=["pass"] * passed + ["fail"] * (4 - passed),
                      reward=passed / 4, pass_fraction=passed / 4, solved=passed == 4,
                      prompt=f"def {task.replace('-', '_')}(x):\n    \"\"\"Task {task}.\"\"\"\n",
                      completion=f"    return x + {i}\n", kind="io", source="procedural",
                      turns=1, policy_version=3)
    row.update(kw)
    return row


def _export(tmp_path, stores, *extra, out="ds") -> tuple[int, str]:
    out_dir = str(tmp_path / out)
    argv = ["data", "export", "--out", out_dir, "--no-config-heldout", *extra]
    for s in stores:
        argv += ["--store", str(s)]
    return main(argv), out_dir


def _jsonl(out_dir: str, split: str) -> list[dict]:
    path = os.path.join(out_dir, f"{split}.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_only_verified_rows_are_kept_and_each_drop_has_its_reason(tmp_path, capsys):
    run = str(tmp_path / "runs" / "run-a")
    rows = [
        _row("run-a", 0, "t-ok"),
        _row("run-a", 1, "t-timeout", status="timeout"),
        _row("run-a", 2, "t-infra", infra_error=True, reward=float("nan"), solved=None),
        _row("run-a", 3, "t-hack", hack_flags=["pytest_tampering"], solved=False),
        _row("run-a", 4, "t-partial", passed=3),
        _row("run-a", 5, "t-multi", turns=2),
        _row("run-a", 6, "t-empty", completion="  \n"),
        _row("run-a", 7, "t-unscored", reward=float("nan"), solved=None),
    ]
    write_shard(run, 0, 0, rows)
    rc, out = _export(tmp_path, [run])
    assert rc == 0
    train = _jsonl(out, "train")
    assert [ex["task_id"] for ex in train] == ["t-ok"]
    ex = train[0]
    assert ex["messages"] == [{"role": "user", "content": rows[0]["prompt"]},
                              {"role": "assistant", "content": rows[0]["completion"]}]
    assert (ex["run_id"], ex["iteration"], ex["policy_version"], ex["kind"], ex["reward"],
            ex["config_hash"]) == ("run-a", 0, 3, "io", 1.0, "cafe0123")
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["kept"]["train"] == 1 and manifest["rows_read"] == 8
    assert {k: v for k, v in manifest["dropped"].items() if v} == {
        "status_not_ok": 1, "infra_error": 1, "hack_flag": 1, "below_threshold": 1,
        "multi_turn": 1, "no_text": 1, "unscored": 1}
    printed = capsys.readouterr().out
    assert "kept: train 1" in printed and "hack_flag 1" in printed


def test_a_reward_threshold_keeps_partial_rewards_but_never_a_flagged_row(tmp_path):
    run = str(tmp_path / "run-a")
    write_shard(run, 0, 0, [_row("run-a", 0, "t-a", passed=3), _row("run-a", 1, "t-b", passed=1),
                            _row("run-a", 2, "t-c", hack_flags=["exit_called"], solved=False)])
    rc, out = _export(tmp_path, [run], "--min-reward", "0.5")
    assert rc == 0
    assert [ex["task_id"] for ex in _jsonl(out, "train")] == ["t-a"]


def test_a_task_held_out_by_any_run_never_reaches_train(tmp_path):
    """run-a held t-x out (its rows say so); run-b trained on t-x: none of t-x goes to train,
    and with --keep-heldout t-x's verified examples are in heldout.* only."""
    store = tmp_path / "runs"
    write_shard(str(store / "run-a"), 0, 0, [_row("run-a", 0, "t-x", split="heldout", passed=1)])
    write_shard(str(store / "run-b"), 0, 0, [_row("run-b", i, t) for i, t in
                                             enumerate(["t-x", "t-x", "t-y"])])
    rc, out = _export(tmp_path, [store])
    assert rc == 0
    assert [ex["task_id"] for ex in _jsonl(out, "train")] == ["t-y"]
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["dropped"]["heldout_task"] == 2
    rc, out = _export(tmp_path, [store], "--keep-heldout", out="ds2")
    assert rc == 0
    assert [ex["task_id"] for ex in _jsonl(out, "train")] == ["t-y"]
    assert [ex["task_id"] for ex in _jsonl(out, "heldout")] == ["t-x", "t-x"]


def test_the_held_out_tasks_of_a_runs_config_are_rebuilt_and_kept_out_of_train(tmp_path, capsys):
    """run-a's config (the default procedural pool) holds tasks out; run-b (no config) has
    verified rows of one of them and of a training task: only the training task is exported."""
    from flows import stages
    from flows.config import validate_config

    store = tmp_path / "runs"
    cfg = validate_config({"out_dir": str(store), "run_id": "run-a"})
    write_run_config(cfg.run_dir, cfg.model_dump(mode="json"), cfg.hash())
    pool = stages.task_pool(cfg)
    held = next(t.task_id for t in pool if t.split == "heldout")
    train = next(t.task_id for t in pool if t.split == "train")
    write_shard(str(store / "run-b"), 0, 0, [_row("run-b", 0, held), _row("run-b", 1, train)])
    out = str(tmp_path / "ds")
    assert main(["data", "export", "--store", str(store), "--out", out]) == 0
    assert [ex["task_id"] for ex in _jsonl(out, "train")] == [train]
    assert "run-b: no config.yaml" in capsys.readouterr().err


def test_the_validation_split_is_by_task_and_never_shares_a_task_with_train(tmp_path):
    run = str(tmp_path / "run-a")
    write_shard(run, 0, 0, [_row("run-a", i, f"t-{i % 20}") for i in range(60)])
    rc, out = _export(tmp_path, [run], "--validation-fraction", "0.5", "--seed", "3")
    assert rc == 0
    train = {ex["task_id"] for ex in _jsonl(out, "train")}
    val = {ex["task_id"] for ex in _jsonl(out, "validation")}
    assert train and val and not train & val and len(train | val) == 20
    assert len(_jsonl(out, "train")) + len(_jsonl(out, "validation")) == 60


def test_dedup_ignores_comments_and_layout_per_task(tmp_path):
    run = str(tmp_path / "run-a")
    same = ["    return x + 1\n", "    return x+1  # add one\n", "\n    return (x + 1)\n"]
    rows = ([_row("run-a", i, "t-a", completion=c) for i, c in enumerate(same)]
            + [_row("run-a", 3, "t-a", completion="    return 1 + x\n"),
               _row("run-a", 4, "t-b", completion=same[0])])
    write_shard(run, 0, 0, rows)
    rc, out = _export(tmp_path, [run], "--dedup")
    assert rc == 0
    got = sorted((ex["task_id"], ex["messages"][1]["content"]) for ex in _jsonl(out, "train"))
    assert [t for t, _ in got] == ["t-a", "t-a", "t-b"]
    assert json.load(open(os.path.join(out, "manifest.json")))["dropped"]["duplicate"] == 2


def test_normalised_answers_of_code_fragments_and_prose():
    assert normalise_answer("    return x+1  # c\n") == normalise_answer("\treturn  x + 1\n")
    assert normalise_answer("    if x:\n        return 1  # c\n") == normalise_answer(
        "    if x:\n            return 1\n")
    assert normalise_answer("The answer  is\n 4") == normalise_answer("The answer is 4")
    assert normalise_answer("return x") != normalise_answer("return y")


def test_the_per_task_cap_keeps_the_highest_rewards(tmp_path):
    run = str(tmp_path / "run-a")
    write_shard(run, 0, 0, [_row("run-a", i, "t-a", passed=p) for i, p in enumerate([2, 4, 3, 4])])
    rc, out = _export(tmp_path, [run], "--min-reward", "0.5", "--per-task-cap", "2")
    assert rc == 0
    assert [ex["reward"] for ex in _jsonl(out, "train")] == [1.0, 1.0]
    assert json.load(open(os.path.join(out, "manifest.json")))["dropped"]["task_cap"] == 2


def test_jsonl_and_parquet_hold_the_same_examples_and_load_with_pandas(tmp_path):
    run = str(tmp_path / "run-a")
    write_shard(run, 0, 0, [_row("run-a", i, f"t-{i}") for i in range(3)])
    rc, out = _export(tmp_path, [run])
    assert rc == 0
    frame = pd.read_json(os.path.join(out, "train.jsonl"), lines=True)
    table = pq.read_table(os.path.join(out, "train.parquet"))
    assert table.to_pylist() == json.loads(frame.to_json(orient="records"))
    assert [m["role"] for m in table.column("messages")[0].as_py()] == ["user", "assistant"]


def test_datasets_loads_the_export_when_installed(tmp_path):
    datasets = pytest.importorskip("datasets")
    run = str(tmp_path / "run-a")
    write_shard(run, 0, 0, [_row("run-a", i, f"t-{i}") for i in range(3)])
    _, out = _export(tmp_path, [run])
    for ext, fmt in (("jsonl", "json"), ("parquet", "parquet")):
        ds = datasets.load_dataset(fmt, data_files={"train": os.path.join(out, f"train.{ext}")})
        assert ds["train"].num_rows == 3 and ds["train"][0]["messages"][0]["role"] == "user"


def test_a_failed_write_leaves_the_previous_dataset_and_no_partial_one(tmp_path, monkeypatch):
    run = str(tmp_path / "run-a")
    write_shard(run, 0, 0, [_row("run-a", 0, "t-a")])
    rc, out = _export(tmp_path, [run])
    assert rc == 0
    before = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
    write_shard(run, 0, 0, [_row("run-a", 0, "t-a"), _row("run-a", 1, "t-b")])

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sft_export.pq, "write_table", disk_full)  # after train.jsonl is written
    with pytest.raises(OSError, match="No space"):
        _export(tmp_path, [run], "--overwrite")
    with pytest.raises(OSError, match="No space"):
        _export(tmp_path, [run], out="fresh")
    assert {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)} == before
    assert sorted(os.listdir(tmp_path)) == ["ds", "run-a"]  # no temporary or fresh folder left


@pytest.mark.parametrize("extra, message", [
    (["--min-reward", "nan"], "--min-reward nan: expected a finite number"),
    (["--per-task-cap", "0"], "--per-task-cap 0: expected an integer >= 1"),
    (["--validation-fraction", "1"], "--validation-fraction 1.0: expected 0 <= F < 1"),
])
def test_bad_options_exit_2_naming_the_option(tmp_path, capsys, extra, message):
    run = str(tmp_path / "run-a")
    write_shard(run, 0, 0, [_row("run-a", 0, "t-a")])
    rc, out = _export(tmp_path, [run], *extra)
    assert rc == 2 and message in capsys.readouterr().err
    assert not os.path.exists(out)


def test_a_bad_threshold_is_refused_by_argparse_with_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        _export(tmp_path, [tmp_path], "--min-reward", "high")
    assert exit_.value.code == 2 and "--min-reward" in capsys.readouterr().err


def test_a_missing_store_or_a_full_out_folder_exits_2(tmp_path, capsys):
    rc, _ = _export(tmp_path, [tmp_path / "nowhere"])
    assert rc == 2 and "nowhere' does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    rc, _ = _export(tmp_path, [tmp_path / "empty"])
    assert rc == 2 and "holds no run" in capsys.readouterr().err
    run = str(tmp_path / "run-a")
    write_shard(run, 0, 0, [_row("run-a", 0, "t-a")])
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "keep.txt").write_text("mine")
    rc, _ = _export(tmp_path, [run])
    assert rc == 2 and "is not empty; pass --overwrite" in capsys.readouterr().err
    assert os.listdir(tmp_path / "ds") == ["keep.txt"]


def test_the_guides_export_commands_run(tmp_path, monkeypatch):
    """The `rollforge data export` lines of docs/analysts.md, on a store of two runs."""
    import re
    import shlex
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "analysts.md").read_text()
    lines = [shlex.split(line) for block in re.findall(r"```sh\n(.*?)```", guide, flags=re.S)
             for line in block.splitlines() if line.startswith("rollforge data export")]
    assert len(lines) >= 2
    for run in ("run-a", "run-b"):
        write_shard(str(tmp_path / "runs" / run), 0, 0,
                    [_row(run, i, f"t-{i % 5}") for i in range(10)])
    monkeypatch.chdir(tmp_path)
    for argv in lines:
        assert main(argv[1:]) == 0, argv
        assert _jsonl("data/round1", "train") or _jsonl("data/round1", "validation")


def _tiny_cfg(tmp_path, **sft):
    from flows.config import load_config

    cfg = load_config("configs/tiny.yaml")
    return cfg.model_copy(update={"out_dir": str(tmp_path / "out"),
                                  "sft": cfg.sft.model_copy(update=sft)})


def test_the_warm_start_trains_on_an_exported_dataset_less_the_runs_held_out_tasks(tmp_path):
    """An export from another run holds a task that this run holds out: the warm start (the
    real stage, a tiny model) trains on the other examples only and says how many it left."""
    from flows import pipeline, stages
    from training.checkpoints import checkpoint_dir

    probe_cfg = _tiny_cfg(tmp_path)
    pool = stages.task_pool(probe_cfg)
    held = [t for t in pool if t.split == "heldout"][:1]
    train = [t for t in pool if t.split == "train"][:3]
    write_shard(str(tmp_path / "runs" / "other"), 0, 0,
                [_row("other", i, t.task_id, prompt=t.prompt, completion=t.reference)
                 for i, t in enumerate(held + train)])
    rc, ds = _export(tmp_path, [tmp_path / "runs"])  # the other run held nothing out
    assert rc == 0 and len(_jsonl(ds, "train")) == 4
    cfg = _tiny_cfg(tmp_path, dataset=ds, steps=2, batch_size=4)
    out = pipeline.sft_stage.fn(cfg)
    assert out["sft/dataset_examples"] == 3 and out["sft/dataset_dropped_heldout"] == 1
    assert out["sft/examples"] == 3
    assert (checkpoint_dir(cfg.run_dir, 0) / "meta.json").exists()
    # a resumed run reuses version 0 and still says what made it (storage/registry.py)
    again = pipeline.sft_stage.fn(cfg)
    assert again["sft/reused"] is True and again["sft/dataset_dropped_heldout"] == 1
    assert {k: v for k, v in again.items() if k != "sft/reused"} == out


def test_a_warm_start_dataset_that_is_missing_or_not_messages_is_refused(tmp_path):
    from flows.warm_start import dataset_pairs

    with pytest.raises(ValueError, match=r"sft.dataset='.*nowhere'.*no SFT dataset"):
        dataset_pairs(_tiny_cfg(tmp_path, dataset=str(tmp_path / "nowhere")), [])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "t", "messages": [{"role": "assistant",
                                                             "content": "x"}]}) + "\n")
    with pytest.raises(ValueError, match=r"example 0: expected messages = \[user, assistant\]"):
        dataset_pairs(_tiny_cfg(tmp_path, dataset=str(bad)), [])


def test_a_run_without_a_warm_start_dataset_keeps_its_config_hash():
    from flows.config import load_config

    cfg = load_config("configs/default.yaml")
    assert "dataset" not in cfg.computed()["sft"]
    with_ds = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"dataset": "d"})})
    assert with_ds.hash() != cfg.hash()
