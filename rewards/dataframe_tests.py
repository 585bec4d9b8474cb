"""Data-analysis tasks: the candidate writes a pandas function of a DataFrame; its result on
generated frames is compared outside the sandbox, exactly like input/output tests.

Each test input is a dict of columns (plain JSON); inside the sandbox a small adapter turns it
into a `pandas.DataFrame`, calls the candidate, and turns the result back into plain JSON: numpy
scalars become Python numbers, a Series with a default index a list and any other Series a dict
keyed by its labels (as strings), a DataFrame a list of row dicts, an Index or array a list. The
grading, threat model and outcomes are those of `rewards.io_tests` (the adapter runs inside the
sandbox, so nothing it does is trusted: only the returned values are compared).

Needs pandas importable by the sandbox's interpreter; where it is not, every run is reported as
`infra_error` (NaN reward), never as the candidate's failure.
"""
from __future__ import annotations

import dataclasses

from rewards.io_tests import TestReport, run_io_tests
from sandbox.base import Limits, Sandbox
from tasks.record import Task

ADAPTER_ENTRY = "_rf_dataframe_call"

_ADAPTER = '''import pandas as _rf_pd
import numpy as _rf_np


def _rf_plain(v):
    if isinstance(v, _rf_pd.DataFrame):
        return [_rf_plain(r) for r in v.to_dict("records")]
    if isinstance(v, _rf_pd.Series):
        if isinstance(v.index, _rf_pd.RangeIndex) and v.index.start == 0 and v.index.step == 1:
            return [_rf_plain(x) for x in v.tolist()]
        return {{str(k): _rf_plain(x) for k, x in v.items()}}
    if isinstance(v, (_rf_pd.Index, _rf_np.ndarray)):
        return [_rf_plain(x) for x in v.tolist()]
    if isinstance(v, _rf_np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_rf_plain(x) for x in v]
    if isinstance(v, dict):
        return {{(str(k) if isinstance(k, _rf_np.generic) else k): _rf_plain(x)
                for k, x in v.items()}}
    return v


def {entry}(*args):
    frames = [_rf_pd.DataFrame(a) if isinstance(a, dict) else a for a in args]
    return _rf_plain(globals()[{name!r}](*frames))


'''


def adapter_source(entry_point: str) -> str:
    return _ADAPTER.format(entry=ADAPTER_ENTRY, name=entry_point)


def run_dataframe_tests(task: Task, completion: str, sandbox: Sandbox, limits: Limits,
                        per_test_timeout_s: float = 1.0) -> TestReport:
    """Same contract as `run_io_tests`; the candidate's function receives DataFrames."""
    # The adapter goes before the task's prompt, so the completion is graded exactly as written.
    adapted = task.model_copy(update={"prompt": adapter_source(task.entry_point) + task.prompt,
                                      "entry_point": ADAPTER_ENTRY})
    report = run_io_tests(adapted, completion, sandbox, limits, per_test_timeout_s)
    if report.load_error and any(f"No module named '{m}'" in report.load_error
                                 for m in ("pandas", "numpy")):
        # The sandbox cannot import pandas: a failure of the infrastructure, not of the model.
        return dataclasses.replace(report, status="infra_error",
                                   outcomes=("missing",) * len(task.tests))
    return report
