"""pass@k, its intervals, the evaluations table's chunks and its query view, and what
`rollforge eval --model` refuses before anything starts."""
import math
import os

import pytest

from flows.cli import main
from flows.eval_stats import bootstrap_mean, format_table, summarize, wilson
from storage import evaluations
from storage.query import query


def test_wilson_interval_matches_the_hand_worked_values():
    # 0 of 3: centre = (0 + z^2/6) / (1 + z^2/3), half = z * sqrt(z^2/36) / (1 + z^2/3), with
    # z = 1.96: z^2 = 3.8415, centre = 0.6402/2.2805 = 0.2807, half = 1.96*0.3267/2.2805 = 0.2808
    lo, hi = wilson(0, 3)
    assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(0.5615, abs=1e-3)
    # 5 of 10: symmetric about 0.5; half = z*sqrt(0.025 + z^2/400)/(1 + z^2/10) = 0.2632
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-3), pytest.approx(0.7634, abs=1e-3))
    assert all(math.isnan(x) for x in wilson(0, 0))


def test_bootstrap_interval_is_seeded_and_holds_the_mean():
    vals = [0.0, 0.25, 0.5, 1.0, 1.0, 0.0, 0.75, 0.5]
    a, b = bootstrap_mean(vals, seed=3), bootstrap_mean(vals, seed=3)
    assert a == b and a[0] < sum(vals) / len(vals) < a[1]
    assert bootstrap_mean([1.0] * 5) == (1.0, 1.0)


def _row(task, mode, idx, passed, source="s1", family="f1", flags=()):
    return {"task_id": task, "mode": mode, "sample_index": idx, "passed": passed,
            "source": source, "family": family, "hack_flags": list(flags)}


def test_summary_uses_the_unbiased_estimator_per_task_and_leaves_unscored_out():
    rows = [
        _row("a", "greedy", 0, True), _row("b", "greedy", 0, False, family="f2"),
        # task a: 1 of 3 sampled right -> pass@1 1/3, pass@2 = 1 - C(2,2)/C(3,2) = 2/3
        _row("a", "sampled", 0, True), _row("a", "sampled", 1, False),
        _row("a", "sampled", 2, False),
        # task b: 0 of 3 scored, one sample unscored (left out, not a failure), one flagged
        _row("b", "sampled", 0, False, family="f2", flags=("early_exit",)),
        _row("b", "sampled", 1, False, family="f2"), _row("b", "sampled", 2, False, family="f2"),
        _row("b", "sampled", 3, None, family="f2"),
    ]
    table = {r.group: r for r in summarize(rows, ks=(1, 2, 4))}
    assert set(table) == {"all", "source=s1", "family=f1", "family=f2"}
    everything = table["all"]
    assert everything.tasks == 2 and everything.greedy == 0.5
    assert everything.pass_k[1][0] == pytest.approx((1 / 3 + 0) / 2)
    assert everything.pass_k[2][0] == pytest.approx((2 / 3 + 0) / 2)
    assert 4 not in everything.pass_k  # task a has 3 scored samples: no pass@4
    assert everything.unscored == 1 and everything.hack_flagged == 1 and everything.samples == 6
    assert table["family=f1"].pass_k[2][0] == pytest.approx(2 / 3)
    text = format_table(list(table.values()), (1, 2, 4))
    assert "pass@2 [bootstrap 95%]" in text and "pass@4" not in text
    assert "| family=f2 | 1 | 0.000 [0.000, 0.793] |" in text  # Wilson of 0 of 1



def test_rows_read_through_pandas_are_summarised_as_the_lists_are():
    """Rows from a DataFrame (`rollforge query` or pandas over the store) carry hack_flags as
    numpy arrays: counted as lists are, not refused for an array's truth."""
    import numpy as np

    rows = [_row("a", "greedy", 0, True), _row("a", "sampled", 0, True, flags=("early_exit",)),
            _row("a", "sampled", 1, False)]
    as_pandas = [{**r, "hack_flags": np.asarray(r["hack_flags"], dtype=object)} for r in rows]
    assert summarize(as_pandas)[0] == summarize(rows)[0]
    assert summarize(as_pandas)[0].hack_flagged == 1

def _eval_rows(chunk, n):
    base = {f.name: None for f in evaluations.EVALUATION_SCHEMA}
    return [{**base, "eval_id": "e1", "model": "m", "version": 0, "task_id": f"t{chunk}-{i}",
             "mode": "sampled", "sample_index": i, "passed": i % 2 == 0, "hack_flags": [],
             "chunk": chunk, "source": "s", "family": "f"} for i in range(n)]


def test_chunks_are_written_once_whole_and_seen_by_the_query_view(tmp_path):
    store = str(tmp_path / "store")
    evaluations.write_spec(store, "e1", {"model": "m"})
    evaluations.write_chunk(store, "e1", 0, _eval_rows(0, 3))
    evaluations.write_chunk(store, "e1", 1, _eval_rows(1, 2))
    with pytest.raises(FileExistsError, match="chunk 1 is already written"):
        evaluations.write_chunk(store, "e1", 1, _eval_rows(1, 2))
    assert evaluations.chunks_written(store, "e1") == {0, 1}
    assert evaluations.read_evaluation(store, "e1").num_rows == 5
    rows = query(store, "SELECT chunk, count(*) AS n, sum(passed::int) AS ok FROM evaluations "
                        "GROUP BY chunk ORDER BY chunk").to_pylist()
    assert rows == [{"chunk": 0, "n": 3, "ok": 2}, {"chunk": 1, "n": 2, "ok": 1}]
    leftovers = [f for _, _, fs in os.walk(tmp_path) for f in fs if ".tmp" in f]
    assert leftovers == []


def test_rows_missing_a_column_are_refused(tmp_path):
    rows = _eval_rows(0, 1)
    del rows[0]["completion"]
    with pytest.raises(ValueError, match="completion"):
        evaluations.write_chunk(str(tmp_path), "e1", 0, rows)
    assert evaluations.chunks_written(str(tmp_path), "e1") == set()


def test_an_empty_store_has_an_empty_evaluations_view(tmp_path):
    assert query(str(tmp_path), "SELECT count(*) AS n FROM evaluations").to_pylist() == [{"n": 0}]


@pytest.mark.parametrize("args, message", [
    (["--model", "no/such/dir"], "not a model rollforge can load"),
    (["--model", "smollm2-135m-instruct", "--n", "0"], "--n 0"),
    (["--model", "no/such/dir", "--sources", "no_such_kind"], "not a model"),
])
def test_bad_model_eval_input_exits_2_naming_it(tmp_path, capsys, args, message):
    code = main(["eval", *args, "--store", str(tmp_path)])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / evaluations.EVAL_DIR).exists()


def test_model_and_samples_together_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--model", "x", "--samples", "y"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_tool_calls_are_stored_per_sample_and_summarised_and_older_chunks_read_null(tmp_path):
    from flows.eval_stats import tool_call_summary  # noqa: PLC0415

    def call(turn, status, passed=None):
        return {"turn": turn, "name": "run_tests", "status": status, "detail": "",
                "tests_passed": passed, "tests_total": 2 if passed is not None else None}

    store = str(tmp_path / "store")
    rows = _eval_rows(0, 3)
    rows[0].update(turns=2, tool_calls=[call(1, "ran", 1), call(2, "malformed")])
    rows[1].update(turns=1, tool_calls=[call(1, "malformed")])
    rows[2].update(turns=3, tool_calls=[call(1, "ran", 2), call(2, "failed"), call(3, "ran")])
    evaluations.write_chunk(store, "e1", 0, rows)
    back = evaluations.read_evaluation(store, "e1").to_pylist()
    assert back[0]["tool_calls"] == rows[0]["tool_calls"]
    assert tool_call_summary(back) == (
        "tools: 3 episodes, 2.00 calls and 2.00 turns an episode; valid calls 66.7% (4/6); "
        "episodes with a valid call 66.7%")
    assert tool_call_summary(_eval_rows(1, 2)) is None  # no episode used tools
    # a chunk written before the column existed reads it as null
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    old = pa.schema([f for f in evaluations.EVALUATION_SCHEMA if f.name != "tool_calls"])
    path = tmp_path / "store" / "_evaluations" / "e1" / "rows" / "chunk-00001.parquet"
    pq.write_table(pa.Table.from_pylist([{f.name: r[f.name] for f in old}
                                         for r in _eval_rows(1, 2)], schema=old), path)
    again = evaluations.read_evaluation(store, "e1").to_pylist()
    assert len(again) == 5 and again[3]["tool_calls"] is None
