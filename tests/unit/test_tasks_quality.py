"""Task quality through the real sandbox and `envs.score.score`."""
import pytest

from envs.io import FunctionsEnv
from envs.io.procedural import FAMILIES, generate_suite
from envs.quality import check_task, check_tasks
from sandbox.config import SandboxConfig
from sandbox.registry import make_sandbox
from tasks.quality import check_tests_consistent, dedupe, find_split_leaks
from tasks.record import TestCase


@pytest.fixture(scope="module")
def sandbox():
    cfg = SandboxConfig()
    sb = make_sandbox(cfg)
    yield sb, cfg.limits()
    sb.close()


def test_every_family_and_level_reference_passes_and_trivial_solution_fails(sandbox):
    sb, limits = sandbox
    # one task per family and level; verification-only families get their checked solution
    # filled in here, and are checked as shipped (no reference) below
    tasks = generate_suite(list(FAMILIES), [1, 2, 3], 1, with_solutions=True)
    checks = check_tasks(tasks, sb, limits, workers=2)
    bad = [(c.task_id, c.problems) for c in checks if not c.ok]
    assert not bad
    assert all(c.reference_reward == 1.0 and c.trivial_rewards["pass"] < 1.0 for c in checks)
    shipped = generate_suite([f for f in FAMILIES if FAMILIES[f].verify_only], [1], 1)
    assert shipped and all(c.ok and c.reference_reward is None
                           for c in check_tasks(shipped, sb, limits, workers=2))


def test_a_wrong_reference_is_reported_with_its_pass_count(sandbox):
    sb, limits = sandbox
    t = generate_suite(["add"], [1], 1)[0]
    broken = t.model_copy(update={"reference": "    return x + 1000\n"})
    check = check_task(broken, sb, limits)
    assert not check.ok and check.reference_reward == 0.0
    assert any("reference fails its hidden tests (0/6 passed" in p for p in check.problems)


def test_tests_a_none_returning_stub_passes_are_reported(sandbox):
    sb, limits = sandbox
    t = generate_suite(["add"], [1], 1)[0]
    weak = t.model_copy(update={"tests": (TestCase(args=(1,), expected=None),
                                          TestCase(args=(2,), expected=None))})
    check = check_task(weak, sb, limits)
    assert "trivial solution 'pass' passes every hidden test" in check.problems
    assert any("a constant solution passes" in p for p in check.problems)


def test_verification_only_task_skips_the_reference_but_still_checks_tests(sandbox):
    sb, limits = sandbox
    t = generate_suite(["poly"], [2], 1)[0].model_copy(update={"reference": None})
    check = check_task(t, sb, limits)
    assert check.ok and check.reference_reward is None and check.trivial_rewards["pass"] == 0.0
    clash = t.model_copy(update={"tests": t.tests + (TestCase(args=t.tests[0].args,
                                                              expected="other"),)})
    problems = check_task(clash, sb, limits).problems
    assert any("already expect" in p for p in problems)


def test_consistency_flags_non_json_values_and_repeated_tests():
    t = generate_suite(["add"], [1], 1)[0]
    odd = t.model_copy(update={"tests": (TestCase(args=(1,), expected=float("nan")),
                                         TestCase(args=(1,), expected=float("nan")))})
    problems = check_tests_consistent(odd, compares_values=True)
    assert any("not plain JSON" in p for p in problems)


def test_dedupe_removes_renamed_copies_and_keeps_the_heldout_one():
    a = generate_suite(["add"], [1], 1)[0].model_copy(update={"split": "train"})
    renamed = a.model_copy(update={"task_id": "user/copy", "split": "heldout",
                                   "entry_point": "renamed_fn",
                                   "prompt": a.prompt.replace(a.entry_point, "renamed_fn")})
    kept, removed = dedupe([a, renamed])
    assert [t.task_id for t in kept] == ["user/copy"] and removed == [a.task_id]
    assert find_split_leaks([a, renamed]) == [
        f"held-out 'user/copy' has the same content as train {a.task_id!r}"]
    assert find_split_leaks(kept) == []


def test_generated_suite_has_no_duplicates_and_no_split_leaks():
    tasks = generate_suite(list(FAMILIES), [1, 2, 3, 4], 6, seed=3)
    assert dedupe(tasks)[1] == [] and find_split_leaks(tasks) == []
    assert {t.split for t in tasks} == {"train", "heldout"}


def test_only_a_kind_that_compares_values_refuses_one_answer_for_every_test():
    t = generate_suite(["add"], [1], 1)[0]
    same = t.model_copy(update={"tests": tuple(TestCase(args=(i,), expected=7) for i in range(3))})
    assert any("a constant solution passes" in p for p in FunctionsEnv().problems(same))

    class ChecksPrograms(FunctionsEnv):  # tests that are not values (HumanEval's check program)
        compares_values = False

    assert ChecksPrograms().problems(same) == []
