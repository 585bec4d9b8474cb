"""The data-analysis suite: pandas snippets on generated DataFrames, checked on hidden frames."""

import pytest

from envs.dataframe.families import DF_FAMILIES, generate_dataframe_suite
from envs.dataframe.grading import ADAPTER_ENTRY, adapter_source, run_dataframe_tests
from rewards.aggregate import RewardConfig
from rewards.reports import values_equal
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.quality import check_tests_consistent


def _call_in_process(task, completion):
    """The program the sandbox would run (adapter + prompt + completion), run here with the
    host's pandas: checks the tasks and the adapter, not the isolation."""
    ns = {"__name__": "solution"}
    exec(compile(adapter_source(task.entry_point) + task.prompt + completion, "s.py", "exec"), ns)
    return [ns[ADAPTER_ENTRY](*c.args) for c in task.tests]


def test_pandas_reference_matches_the_plain_python_answers_on_every_hidden_frame():
    tasks = generate_dataframe_suite(difficulties=[1, 2, 3, 4], tasks_per_family=3)
    assert {t.family for t in tasks} == set(DF_FAMILIES)
    for t in tasks:
        got = _call_in_process(t, t.reference)
        assert all(values_equal(c.expected, g) for c, g in zip(t.tests, got)), t.task_id
        assert check_tests_consistent(t, compares_values=True) == [], t.task_id


def test_a_wrong_snippet_and_a_stub_do_not_match():
    t = generate_dataframe_suite(["df_group"], [2], 1)[0]
    wrong = "    return df.groupby('city').price.median().to_dict()\n"
    assert not all(values_equal(c.expected, g) for c, g in zip(t.tests, _call_in_process(t, wrong)))
    assert all(g is None for g in _call_in_process(t, "    pass\n"))


def test_difficulty_changes_the_question_and_the_frames_grow():
    tasks = generate_dataframe_suite(["df_filter"], [1, 3], 2)
    asks = {d: {t.prompt.split('"""')[1].split(". ")[1][:20] for t in tasks if t.difficulty == d}
            for d in (1, 3)}
    assert not asks[1] & asks[3]
    rows = {d: max(len(c.args[0]["price"]) for t in tasks if t.difficulty == d for c in t.tests)
            for d in (1, 3)}
    assert rows[3] > rows[1]


@pytest.mark.parametrize("completion,solved", [("reference", True), ("    pass\n", False)])
def test_sandbox_grades_it_or_reports_infra_error_never_a_false_zero(completion, solved):
    t = generate_dataframe_suite(["df_rank"], [1], 1)[0]
    cfg = SandboxConfig()
    sb = make_sandbox(cfg)
    try:
        report = run_dataframe_tests(t, t.reference if completion == "reference" else completion,
                                     sb, cfg.limits(), RewardConfig().per_test_timeout_s)
    finally:
        sb.close()
    if report.infra_error:  # this sandbox cannot import pandas: not the candidate's failure
        assert "pandas" in (report.load_error or "") and set(report.outcomes) == {"missing"}
    else:
        assert (report.passed == len(t.tests)) is solved


@pytest.mark.parametrize("completion,solved", [("reference", True), ("    pass\n", False)])
def test_sandbox_with_site_packages_grades_pandas_solutions(completion, solved):
    from envs.score import score

    t = generate_dataframe_suite(["df_rank"], [1], 1)[0]
    # generous limits: each execution imports pandas afresh, slow on a loaded 2-CPU machine
    cfg = SandboxConfig(site_packages=True, timeout_s=30)
    sb = make_sandbox(cfg)
    try:
        b, report = score(t, t.reference if completion == "reference" else completion, sb,
                          cfg.limits(), RewardConfig(per_test_timeout_s=5))
    finally:
        sb.close()
    assert not report.infra_error, report.load_error
    assert b.solved is solved and b.hack_flags == ()
