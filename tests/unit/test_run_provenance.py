"""What a run records about itself: one config hash on its rows and in the `runs` view (the join
examples of the analysts' guide, docs/analysts.md, run on a real store), and a resume is refused
under a config that computes something else."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from flows.cli import main
from flows.config import load_config
from flows.resume import ConfigChanged, begin_run
from storage.query import query
from storage.registry import read_run_config
from storage.synthetic import example_rows
from storage.trajectories import write_shard

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, run_id: str, **changes):
    cfg = load_config(ROOT / "configs" / "tiny.yaml",
                      [f"out_dir={tmp_path / 'store'}", f"run_id={run_id}",
                       *(f"{k}={v}" for k, v in changes.items())])
    begin_run(cfg)  # what train_flow records first
    rows = [dict(r, config_hash=cfg.hash()) for r in example_rows(6, run_id)]  # as episode_rows
    write_shard(cfg.run_dir, 0, 0, rows)
    return cfg


def test_rows_and_the_runs_view_carry_the_same_config_hash(tmp_path):
    a = _run(tmp_path, "a")
    b = _run(tmp_path, "b", seed=7)
    assert a.hash() != b.hash() and len(a.hash()) == 12
    got = query(str(tmp_path / "store"),
                "SELECT r.run_id, count(*) AS n FROM trajectories t JOIN runs r "
                "ON t.config_hash = r.config_hash GROUP BY ALL ORDER BY r.run_id").to_pylist()
    assert got == [{"run_id": "a", "n": 6}, {"run_id": "b", "n": 6}]


def test_the_guides_join_examples_run_on_a_store(tmp_path):
    _run(tmp_path, "a")
    _run(tmp_path, "b", seed=7)
    blocks = [b for b in re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "analysts.md").read_text(),
                                    re.S)
              if re.search(r"\bJOIN runs\b", b)]
    assert len(blocks) >= 2
    for sql in blocks:
        rows = query(str(tmp_path / "store"), sql).to_pylist()
        assert len(rows) == 2, (sql, rows)  # one per run
        assert all(r.get("rollouts_of_another", 0) == 0 for r in rows), (sql, rows)


def test_resuming_under_a_config_that_computes_something_else_is_refused_naming_the_fields(
        tmp_path):
    first = _run(tmp_path, "a")
    recorded = (Path(first.run_dir) / "config.yaml").read_text()
    with pytest.raises(ConfigChanged, match=r"changed rl\.lr, seed;.*run_id=a-2.*"
                                            r"resume_changed=true"):
        _run(tmp_path, "a", **{"rl.lr": 1e-4, "seed": 5})
    assert (Path(first.run_dir) / "config.yaml").read_text() == recorded  # left as it was


def test_what_does_not_change_the_computation_may_change_on_resume_and_a_forced_resume_is_kept(
        tmp_path):
    _run(tmp_path, "a")
    longer = _run(tmp_path, "a", iterations=40, eval_every=2, keep_checkpoints=5)
    assert read_run_config(longer.run_dir)["iterations"] == 40
    forced = _run(tmp_path, "a", **{"rl.lr": 1e-4, "resume_changed": "true"})
    assert read_run_config(forced.run_dir)["rl"]["lr"] == 1e-4
    _run(tmp_path, "a", **{"rl.lr": 1e-4})  # the forced config is now the run's own


def test_the_cli_refuses_a_changed_resume_with_exit_2_before_starting_anything(
        tmp_path, capsys):
    cfg = _run(tmp_path, "a")
    code = main(["run", "--config", str(ROOT / "configs" / "tiny.yaml"),
                 "--set", f"out_dir={cfg.out_dir}", "--set", "run_id=a", "--set", "seed=9"])
    assert code == 2
    assert "changed seed" in capsys.readouterr().err
