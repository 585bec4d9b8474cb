"""`threads.torch`: the flow's torch thread count, fixed or following what other processes
leave free."""
import os
import signal
import subprocess
import sys
import time

import pytest

from flows.config import ConfigError, load_config
from training import threads


@pytest.mark.parametrize("others,expected", [(0.0, 4), (0.2, 4), (0.5, 3), (1.0, 3),
                                             (1.4, 2), (3.9, 1), (9.0, 1), (None, 4)])
def test_auto_takes_the_cores_others_leave_at_least_one(others, expected, monkeypatch):
    monkeypatch.setattr(threads, "USER_OMP", "")
    assert threads.choose("auto", others, n_cores=4) == expected


def test_auto_never_exceeds_omp_num_threads_and_a_count_is_kept(monkeypatch):
    monkeypatch.setattr(threads, "USER_OMP", "2")
    assert threads.choose("auto", 0.0, n_cores=8) == 2
    assert threads.choose("auto", 7.0, n_cores=8) == 1
    assert threads.choose(3, 7.0, n_cores=8) == 3  # a fixed count ignores the load


def test_auto_leaves_out_the_cores_the_runs_own_ranks_hold(monkeypatch):
    # An overlapped update's rank is this process's child, so not a neighbour to the monitor:
    # its cores are subtracted by `reserved` instead, and given back when the update ends.
    monkeypatch.setattr(threads, "USER_OMP", "")
    with threads.reserved(2):
        assert threads.choose("auto", 0.0, n_cores=4) == 2
        assert threads.choose("auto", None, n_cores=4) == 2
        assert threads.choose("auto", 1.0, n_cores=4) == 1
        with threads.reserved(3):
            assert threads.choose("auto", 0.0, n_cores=4) == 1  # at least one
        assert threads.choose(3, 0.0, n_cores=4) == 3  # a fixed count is the user's
    assert threads.choose("auto", 0.0, n_cores=4) == 4


def test_bad_thread_settings_are_refused_naming_the_field():
    for bad in ("0", "many", "true"):
        with pytest.raises(ConfigError, match="threads.torch"):
            load_config(None, [f"threads.torch={bad}"])
    assert load_config(None, ["threads.torch=2"]).threads.torch == 2


def test_the_thread_budget_is_not_part_of_what_a_run_computes():
    assert load_config(None, ["threads.torch=1"]).hash() == load_config(None, []).hash()


def _neighbour() -> int:
    """A busy process that is not under this one (its shell parent exits: it is adopted)."""
    out = subprocess.run(["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & "
                          "echo $!"], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_a_busy_neighbour_is_seen_and_costs_a_core():
    pid = _neighbour()
    try:
        monitor = threads._Monitor()
        time.sleep(1.6)
        # a lower bound: anything else running on the machine only adds to it
        others = monitor.others_busy()
        assert others is not None and others > 0.6, others
        assert threads.choose("auto", others, n_cores=2) == 1
    finally:
        os.kill(pid, signal.SIGKILL)


def test_the_runs_own_processes_are_not_neighbours():
    """A busy descendant (a Dask worker, a sandbox) counts as this run's own CPU."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        start = threads.busy_seconds()
        # the child's CPU seconds are in the tree's: half a second of them shows up however
        # loaded the machine is (this process only sleeps); without the child counted it never
        # would, and the wait ends at its bound
        deadline = time.monotonic() + 60
        while (end := threads.busy_seconds())[1] - start[1] <= 0.5 and time.monotonic() < deadline:
            time.sleep(0.25)
        assert end[1] - start[1] > 0.5, (start, end)
    finally:
        child.kill()
        child.wait()


def test_retune_does_nothing_until_a_setting_was_applied(monkeypatch):
    monkeypatch.setattr(threads, "_SETTING", {})
    called = []
    monkeypatch.setattr(threads, "apply", lambda s: called.append(s))
    threads.retune()
    assert called == []
    threads._SETTING["value"] = "auto"
    threads.retune()
    assert called == ["auto"]


def test_a_budget_holds_only_inside_its_stage():
    import torch

    before = torch.get_num_threads()
    with threads.budget(1) as chosen:
        assert chosen["threads/torch"] == 1 == torch.get_num_threads()
        assert threads._SETTING == {"value": 1}
    assert torch.get_num_threads() == before and threads._SETTING == {}
