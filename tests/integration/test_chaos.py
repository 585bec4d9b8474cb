"""The chaos run (bench/chaos.py) in short: a real run against separately started services (a
Prefect server, a `dask scheduler` and nannied `dask worker`s, the process sandbox, 2 trainer
ranks, the store on its own tmpfs) hit by faults of different kinds at seeded moments, resumed
with the same command until it completes; the store then holds every (iteration, group,
sample) exactly once, no visible file is half-written, metrics and checkpoints agree with the
rows, and no wait hung."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from chaos import Services, chaos, check_store, compare, reference, small_fs  # noqa: E402

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs for the store")]


def _run(tmp_path: Path, kinds: tuple[str, ...], seed: int, iterations: int):
    services = Services(tmp_path)
    try:
        with small_fs(tmp_path / "store", 96) as store:
            tally, runs = chaos(services, store, seed, len(kinds), iterations, stall_s=240,
                                kinds=kinds, gap_s=(10.0, 40.0))
            ref = reference(services, store, seed, iterations)
            return tally, [(check_store(r, iterations, 4), compare(r, ref, iterations))
                           for r in runs]
    finally:
        services.close()


def _assert_survived(tally, checked_runs, kinds):
    assert sorted(tally.injected.elements()) == sorted(kinds), (tally.injected, tally.skipped)
    assert tally.hangs == [], tally.hangs
    assert tally.left_behind == [], f"ranks outlived their flow: {tally.left_behind}"
    for checked, compared in checked_runs:
        assert checked["duplicated"] == 0 and checked["problems"] == [], str(checked)
        assert compared["lost"] == 0 and compared["extra"] == 0, str(compared)


def _store(run_dir: Path, groups: int) -> None:
    """One finished iteration of `groups` groups of 4, as the loop leaves it."""
    from storage import registry
    from storage.synthetic import example_row
    from storage.trajectories import write_shard

    rows = [example_row("chaos", 0, i, infra_error=False) for i in range(4 * groups)]
    write_shard(str(run_dir), 0, 0, rows)
    registry.record_metrics(str(run_dir), 0, {"rollout/count": len(rows)})
    model = run_dir / "checkpoints" / "v0001" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights")
    registry.record_checkpoint(str(run_dir), 0, str(model.parent), {})
    registry.mark_iteration_done(str(run_dir), 0)


def test_the_check_after_the_chaos_run_names_a_duplicate_a_torn_file_and_a_wrong_count(
        tmp_path):
    """The check that judges the chaos run: silent on a whole store, and each way a store can
    be wrong is named (a check that cannot fail would pass any run)."""
    from storage.synthetic import example_row
    from storage.trajectories import write_shard

    run_dir = tmp_path / "chaos"
    _store(run_dir, groups=2)
    assert check_store(run_dir, 1, 4) == {"rows": 8, "duplicated": 0, "problems": []}

    write_shard(str(run_dir), 0, 1, [example_row("chaos", 0, 3, infra_error=False)])
    torn = run_dir / "trajectories" / "iteration=0" / "torn.parquet"
    torn.write_bytes(b"PAR1 cut short")
    got = check_store(run_dir, 1, 4)
    assert got["duplicated"] == 1
    assert any("unreadable visible file" in p and "torn.parquet" in p for p in got["problems"])
    assert any("groups without 4 samples" in p for p in got["problems"])
    assert any("metrics count 8 rollouts, the store 9" in p for p in got["problems"])


def test_the_equality_check_holds_a_nan_in_a_list_equal_and_names_a_changed_value(tmp_path):
    """`compare`, which says a chaos run's rows equal the undisturbed run's: a turn that ran no
    tests (NaN in `turn_progress`) is the same on both sides; a changed value is named."""
    import numpy as np
    from safetensors.numpy import save_file

    from storage.synthetic import example_row
    from storage.trajectories import write_shard

    def run(name: str, completion_of_row_2: str) -> Path:
        rows = [example_row("chaos", 0, i, infra_error=False, turn_progress=[0.5, None])
                for i in range(4)]
        rows[2]["completion"] = completion_of_row_2
        write_shard(str(tmp_path / name), 0, 0, rows)
        model = tmp_path / name / "checkpoints" / "v0001" / "model"
        model.mkdir(parents=True)
        save_file({"w": np.ones(3, np.float32)}, str(model / "model.safetensors"))
        return tmp_path / name

    ref = run("ref", "x")
    assert compare(run("same", "x"), ref, 1)["rows_differing"] == 0
    got = compare(run("changed", "y"), ref, 1)
    assert got["rows_differing"] == 1 and got["columns_differing"] == {"completion": 1}
    assert got["weights_max_abs_diff"] == 0.0


@pytest.mark.slow  # minutes: the services' start and a run resumed twice, then its reference
@pytest.mark.timeout(1200)
def test_a_run_killed_at_the_flow_with_its_result_deleted_and_its_disk_full_loses_nothing(
        tmp_path):
    """The faults that end the flow's process or its stage, and need the operator's resume."""
    kinds = ("flow", "result_deleted", "disk_full")
    tally, checked_runs = _run(tmp_path, kinds, seed=0, iterations=1)
    _assert_survived(tally, checked_runs, kinds)
    # No sandbox fault hit an execution: the rows and the weights are the uninterrupted run's.
    for _, compared in checked_runs:
        assert compared["rows_differing"] == 0, str(compared)
        assert compared["weights_max_abs_diff"] == 0.0, str(compared)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_kind_of_fault_once_loses_and_duplicates_no_row(tmp_path):
    from chaos import KINDS

    tally, checked_runs = _run(tmp_path, KINDS, seed=1, iterations=2)
    _assert_survived(tally, checked_runs, KINDS)
