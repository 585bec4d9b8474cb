"""Data-analysis tasks: the candidate writes a pandas function of a DataFrame; its result on
generated frames is compared outside the sandbox, exactly like input/output tests.

Each test input is a dict of columns (plain JSON). The io harness's `frames:` mode
(envs/io/harness.py) turns it into a `pandas.DataFrame`, calls the candidate, and turns the
result back into plain JSON with pandas' and numpy's own methods, taken before the candidate ran:
numpy scalars become Python numbers, a Series with a default index a list and any other Series a
dict keyed by its labels (as strings), a DataFrame a list of row dicts, an Index or array a list.
A subclass of any of these (which could lie through its own methods) is refused as not plain
data. The conversion runs in the harness, never in the candidate's namespace, so a completion
cannot redefine it. The grading, threat model and outcomes are those of the io kind (envs/io/grading.py).

Needs pandas importable by the sandbox's interpreter; where it is not, every run is reported as
`infra_error` (NaN reward), never as the candidate's failure.
"""
from __future__ import annotations

import dataclasses

from envs.io.grading import run_io_tests
from envs.io.harness import PLAIN_SOURCE
from rewards.reports import TestReport
from sandbox.base import Limits, Sandbox
from tasks.record import Task

ADAPTER_ENTRY = "_rf_dataframe_call"

_ADAPTER = '''import numpy as _rf_np
import pandas as _rf_pd

_rf_call_of, _rf_wire_of, _ = _frames(_rf_pd, _rf_np)


def {entry}(*args):
    frames, _ = _rf_call_of(list(args))
    return _rf_wire_of(globals()[{name!r}](*frames))


'''


def adapter_source(entry_point: str) -> str:
    """The harness's `frames:` conversion as module code that defines `_rf_dataframe_call`, to
    run a task in-process with the host's pandas (the task checks; the sandbox never runs it)."""
    return PLAIN_SOURCE + "\n" + _ADAPTER.format(entry=ADAPTER_ENTRY, name=entry_point)


def run_dataframe_tests(task: Task, completion: str, sandbox: Sandbox, limits: Limits,
                        per_test_timeout_s: float = 1.0) -> TestReport:
    """Same contract as `run_io_tests`; the candidate's function receives DataFrames."""
    framed = task.model_copy(update={"entry_point": f"frames:{task.entry_point}"})
    report = run_io_tests(framed, completion, sandbox, limits, per_test_timeout_s)
    if report.load_error and any(f"No module named '{m}'" in report.load_error
                                 for m in ("pandas", "numpy")):
        # The sandbox cannot import pandas: a failure of the infrastructure, not of the model.
        return dataclasses.replace(report, status="infra_error",
                                   outcomes=("missing",) * len(task.tests))
    return report
