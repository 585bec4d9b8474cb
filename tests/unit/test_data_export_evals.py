"""`rollforge data export --evaluations`: the graded samples of `rollforge eval --model` as an
SFT dataset. The rows are built by the evaluation's own row builder (flows.eval_model.rows_of,
from episodes of real tasks reset by their real environment) and written by the evaluations
table's writer, so the export reads what an evaluation writes."""
from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from envs.registry import env_for_task
from envs.sources import SourceConfig, build_pool
from flows.cli import main
from flows.episodes import Episode
from flows.eval_model import rows_of
from rewards.aggregate import RewardBreakdown
from storage import evaluations
from storage.query import query
from storage.sft_export import read_examples
from storage.synthetic import example_row
from storage.trajectories import write_shard
from training.episodes import EpisodeTokens

SOURCE = SourceConfig(kind="io", options={"families": ["add", "mul"], "difficulties": [1],
                                          "tasks_per_family": 6, "n_tests": 3})
BASE = {"model": "/runs/a:3", "version": 3, "config_hash": "beef0123", "code_version": "c0",
        "seed": 0}


def _tasks(split: str) -> list:
    return [t for t in build_pool([SOURCE]) if t.split == split]


def _grade(passed: int, hack: tuple[str, ...] = (), infra: bool = False) -> RewardBreakdown:
    return RewardBreakdown(reward=float("nan") if infra else passed / 3, pass_fraction=passed / 3,
                           tests_passed=passed, tests_total=3,
                           test_outcomes=("pass",) * passed + ("fail",) * (3 - passed),
                           status="ok", error_type=None, hack_flags=hack, infra_error=infra,
                           exec_time_s=0.1)


def _episode(task, index: int, answer: str, grade: RewardBreakdown | None) -> Episode:
    env = env_for_task(task)
    state, intro = env.reset(task)
    return Episode(task, env, index, state, intro, EpisodeTokens([1]), actions=[answer],
                   text=[answer], final={"grade": grade} if grade else {"end_reason": "error"})


def _write_eval(store, eval_id: str, chunks: list[list[tuple]], split: str = "heldout",
                model: str = BASE["model"]) -> None:
    """One evaluation of `chunks`, each a list of (task, mode, index, answer, grade)."""
    tasks = {t.task_id for c in chunks for t, *_ in c}
    evaluations.write_spec(str(store), eval_id, {"model": model, "version": BASE["version"],
                                                 "config_hash": BASE["config_hash"],
                                                 "seed": 0, "split": split, "n": 2,
                                                 "tasks": len(tasks), "chunk_size": 64})
    for k, items in enumerate(chunks):
        rows = []
        for task, mode, index, answer, grade in items:
            rows += rows_of([_episode(task, index, answer, grade)], mode,
                            {**BASE, "model": model, "eval_id": eval_id}, k, "2026-12-04T00:00")
        evaluations.write_chunk(str(store), eval_id, k, rows)


def _export(tmp_path, *argv, out="ds") -> tuple[int, str]:
    out_dir = str(tmp_path / out)
    return main(["data", "export", "--out", out_dir, *argv]), out_dir


def _examples(out_dir: str, split: str) -> list[dict]:
    """A split's examples, read as the warm start reads them (none: the split has no file)."""
    path = os.path.join(out_dir, f"{split}.parquet")
    return read_examples(path) if os.path.exists(path) else []


def _manifest(out_dir: str) -> dict:
    with open(os.path.join(out_dir, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def test_an_evaluations_verified_samples_export_as_chat_examples_naming_the_model(tmp_path,
                                                                                     capsys):
    """An evaluation on training tasks (`--split train`): its solved samples become examples
    whose user turn is the task's first observation, with the evaluated model, version and
    config hash as provenance."""
    store = tmp_path / "store"
    a, b = _tasks("train")[:2]
    _write_eval(store, "e1", [[(a, "greedy", 0, "    return x + 2\n", _grade(3)),
                               (a, "sampled", 0, "    return x + 3\n", _grade(1)),
                               (b, "sampled", 1, "    return x * 2\n", _grade(3))]], split="train")
    rc, out = _export(tmp_path, "--evaluations", str(store))
    assert rc == 0
    train = _examples(out, "train")
    assert sorted(ex["task_id"] for ex in train) == sorted([a.task_id, b.task_id])
    ex = next(e for e in train if e["task_id"] == a.task_id)
    assert ex["messages"] == [{"role": "user", "content": env_for_task(a).reset(a)[1]},
                              {"role": "assistant", "content": "    return x + 2\n"}]
    assert (ex["origin"], ex["eval_id"], ex["model"], ex["policy_version"], ex["config_hash"],
            ex["mode"], ex["kind"], ex["task_split"], ex["run_id"]) == (
        "evaluation", "e1", "/runs/a:3", 3, "beef0123", "greedy", "io", "train", None)
    with open(os.path.join(out, "train.jsonl"), encoding="utf-8") as f:
        assert [json.loads(line) for line in f] == train  # the JSONL holds the same examples
    manifest = _manifest(out)
    (info,) = manifest["evaluations"]
    assert (info["eval_id"], info["model"], info["version"], info["config_hash"],
            info["code_versions"], info["rows"]) == ("e1", "/runs/a:3", 3, "beef0123", ["c0"], 3)
    assert manifest["dropped"]["below_threshold"] == 1 and manifest["rows_read"] == 3
    printed = capsys.readouterr().out
    assert "read 3 rows from 0 run(s) and 1 evaluation(s)" in printed
    assert "kept: train 2, validation 0, heldout 0" in printed


def test_an_evaluations_held_out_tasks_reach_train_only_when_released(tmp_path, capsys):
    """An evaluation on held-out tasks (the default of `rollforge eval`): by default none of
    its samples is a train example; --keep-heldout writes them to heldout.*; only
    --train-on-evaluated-heldout lets them in, and the manifest lists every such task."""
    store = tmp_path / "store"
    held = _tasks("heldout")[:2]
    _write_eval(store, "e1", [[(t, "greedy", 0, f"    return x + {i}\n", _grade(3))
                               for i, t in enumerate(held)]])
    rc, out = _export(tmp_path, "--evaluations", str(store))
    assert rc == 0 and _examples(out, "train") == []
    assert _manifest(out)["dropped"]["heldout_task"] == 2
    rc, out = _export(tmp_path, "--evaluations", str(store), "--keep-heldout", out="ds2")
    assert rc == 0 and _examples(out, "train") == []
    assert sorted(e["task_id"] for e in _examples(out, "heldout")) == sorted(
        t.task_id for t in held)
    capsys.readouterr()
    rc, out = _export(tmp_path, "--evaluations", str(store), "--train-on-evaluated-heldout",
                      out="ds3")
    assert rc == 0
    train = _examples(out, "train")
    assert sorted(e["task_id"] for e in train) == sorted(t.task_id for t in held)
    assert {e["task_split"] for e in train} == {"heldout"}
    assert _manifest(out)["heldout_tasks_released"] == sorted(t.task_id for t in held)
    assert "2 task(s) held out by the evaluations are in train" in capsys.readouterr().err


def test_a_task_a_run_holds_out_stays_out_of_train_even_when_evaluations_are_released(tmp_path):
    store = tmp_path / "store"
    x, y = _tasks("heldout")[:2]
    write_shard(str(store / "run-a"), 0, 0, [example_row(
        "run-a", 0, 0, task_id=x.task_id, split="heldout", status="ok", infra_error=False,
        hack_flags=[], tests_passed=0, tests_total=3, solved=False, reward=0.0, turns=1)])
    _write_eval(store, "e1", [[(x, "greedy", 0, "    return x + 1\n", _grade(3)),
                               (y, "greedy", 0, "    return x + 2\n", _grade(3))]])
    rc, out = _export(tmp_path, "--store", str(store), "--evaluations", str(store),
                      "--no-config-heldout", "--train-on-evaluated-heldout")
    assert rc == 0
    assert [e["task_id"] for e in _examples(out, "train")] == [y.task_id]
    assert _manifest(out)["heldout_tasks_released"] == [y.task_id]


def test_the_filters_apply_to_evaluation_rows_as_to_trajectories(tmp_path):
    """Hack-flagged, unscored and failed samples are dropped by their reason; dedup merges a
    greedy and a sampled answer that differ only in layout; the cap keeps the best."""
    store = tmp_path / "store"
    a, b, c = _tasks("train")[:3]
    _write_eval(store, "e1", [
        [(a, "greedy", 0, "    return x + 2\n", _grade(3)),
         (a, "sampled", 0, "    return x+2  # same\n", _grade(3)),
         (a, "sampled", 1, "    return 2 + x\n", _grade(3)),
         (a, "sampled", 2, "    return x - -2\n", _grade(3))],
        [(b, "greedy", 0, "    exit(0)\n", _grade(3, hack=("early_exit",))),
         (b, "sampled", 0, "    return x\n", None),
         (c, "sampled", 0, "    return x\n", _grade(3, infra=True))]], split="train")
    rc, out = _export(tmp_path, "--evaluations", str(store / evaluations.EVAL_DIR / "e1"),
                      "--dedup", "--per-task-cap", "2")
    assert rc == 0
    assert [e["task_id"] for e in _examples(out, "train")] == [a.task_id, a.task_id]
    dropped = {k: v for k, v in _manifest(out)["dropped"].items() if v}
    assert dropped == {"hack_flag": 1, "status_not_ok": 1, "infra_error": 1, "duplicate": 1,
                       "task_cap": 1}


def test_chunks_written_before_rows_carried_their_prompt_are_read_and_named(tmp_path, capsys):
    """A chunk file of the columns evaluations had before `prompt`, `kind` and
    `answer_executed`: read_evaluation and the query view read it with those columns null, and
    the export drops its rows as no_text, saying why."""
    store = tmp_path / "store"
    (a,) = _tasks("train")[:1]
    _write_eval(store, "e1", [[(a, "greedy", 0, "    return x + 2\n", _grade(3))]], split="train")
    chunk = store / evaluations.EVAL_DIR / "e1" / "rows" / "chunk-00000.parquet"
    new = {"prompt", "kind", "answer_executed"}
    old = pq.read_table(chunk)
    pq.write_table(old.select([n for n in old.column_names if n not in new]), chunk)
    assert evaluations.read_evaluation(str(store), "e1").column("prompt").to_pylist() == [None]
    assert query(str(store), "SELECT task_id, prompt, kind FROM evaluations").to_pylist() == [
        {"task_id": a.task_id, "prompt": None, "kind": None}]
    rc, out = _export(tmp_path, "--evaluations", str(store))
    assert rc == 0 and _manifest(out)["dropped"]["no_text"] == 1
    assert "1 rows were written before evaluation rows carried their prompt" in \
        capsys.readouterr().err


def test_bad_evaluation_inputs_exit_2_naming_them(tmp_path, capsys):
    rc, out = _export(tmp_path, "--evaluations", str(tmp_path / "nowhere"))
    assert rc == 2 and "nowhere' do not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    rc, _ = _export(tmp_path, "--evaluations", str(tmp_path / "empty"))
    assert rc == 2 and "hold no evaluation" in capsys.readouterr().err
    rc, _ = _export(tmp_path)
    assert rc == 2 and "nothing to export" in capsys.readouterr().err
    store = tmp_path / "store"
    (a,) = _tasks("train")[:1]
    _write_eval(store, "e1", [[(a, "greedy", 0, "    return x + 2\n", _grade(3))]], split="train")
    rc, _ = _export(tmp_path, "--store", str(store))
    assert rc == 2 and f"pass --evaluations {store} to export them" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_the_warm_start_trains_on_an_evaluations_export(tmp_path):
    """The export of an evaluation on training tasks is a warm start's `sft.dataset`: the real
    stage trains a tiny model on its examples."""
    from flows import pipeline
    from flows.config import load_config
    from training.checkpoints import checkpoint_dir

    cfg = load_config("configs/tiny.yaml")
    train = [t for t in build_pool([SOURCE]) if t.split == "train" and t.reference][:3]
    store = tmp_path / "store"
    _write_eval(store, "e1", [[(t, "greedy", 0, t.reference, _grade(3)) for t in train]],
                split="train")
    rc, ds = _export(tmp_path, "--evaluations", str(store))
    assert rc == 0 and len(_examples(ds, "train")) == 3
    cfg = cfg.model_copy(update={"out_dir": str(tmp_path / "out"), "sft": cfg.sft.model_copy(
        update={"dataset": ds, "steps": 2, "batch_size": 4})})
    out = pipeline.sft_stage.fn(cfg)
    assert out["sft/dataset_examples"] == 3
    assert (checkpoint_dir(cfg.run_dir, 0) / "meta.json").exists()
