"""bench/compare_runs.py: rows compared column by column, sorted by their key, with the columns
that differ between any two runs (times, inside map columns too) left out of the count."""
import pandas as pd
import torch
from safetensors.torch import save_file

from bench.compare_runs import compare_rows, compare_weights, main


def _rows(rewards, exec_times, order=(0, 1)):
    rows = [{"iteration": 0, "group_id": "g", "sample_index": i, "reward": rewards[i],
             "completion_token_ids": [1, 2, i], "exec_time_s": exec_times[i],
             "reward_components": [("pass_fraction", rewards[i]), ("exec_time_s", exec_times[i])]}
            for i in order]
    return pd.DataFrame(rows)


def test_rows_equal_but_for_their_times_and_order_are_equal():
    diffs, skipped, _ = compare_rows(_rows([0.0, 1.0], [0.1, 0.2]),
                                     _rows([0.0, 1.0], [0.3, 0.4], order=(1, 0)))
    assert diffs == {} and skipped == ["exec_time_s"]


def test_a_changed_reward_is_counted_in_its_column_and_its_components():
    diffs, _, _ = compare_rows(_rows([0.0, 1.0], [0.1, 0.2]), _rows([0.0, 0.5], [0.1, 0.2]))
    assert diffs == {"reward": 1, "reward_components": 1}


def _run(root, weight: float):
    model = root / "checkpoints" / "v0000" / "model"
    model.mkdir(parents=True)
    save_file({"w": torch.full((2, 2), weight)}, str(model / "model.safetensors"))
    return root


def test_weights_are_compared_per_version(tmp_path):
    a, b = _run(tmp_path / "a", 1.0), _run(tmp_path / "b", 1.25)
    assert compare_weights(a, a) == {"v0000": 0.0}
    assert compare_weights(a, b) == {"v0000": 0.25}


def test_a_folder_that_is_no_run_is_a_usage_error(tmp_path, capsys):
    assert main([str(tmp_path), str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err
