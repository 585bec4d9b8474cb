"""The procedural suite: frozen original families, new families with a real difficulty knob."""
import ast
import hashlib
import json
import re
import statistics

import pytest

from envs.io.procedural import CATEGORIES, FAMILIES, generate_suite

ORIGINAL = ["add", "mul", "affine", "filter_gt", "sum_plus", "repeat", "count", "prefix"]
NEW = [f for f in FAMILIES if f not in ORIGINAL and not FAMILIES[f].verify_only]
VERIFY_ONLY = [f for f in FAMILIES if FAMILIES[f].verify_only]


_HISTORIC = ("task_id", "suite", "family", "difficulty", "split", "prompt", "entry_point",
             "tests", "examples", "reference")


def _digest(tasks):
    """Over the fields a procedural task had before the generic record (`kind` was `verifier`;
    `payload` and `source` are empty on generated tasks), so the pin still says the generator
    is unchanged."""
    recs = []
    for t in tasks:
        d = t.model_dump(mode="json")
        assert d["payload"] == {} and d["source"] is None
        recs.append({**{k: d[k] for k in _HISTORIC}, "verifier": d["kind"]})
    return hashlib.sha256(json.dumps(recs).encode()).hexdigest()


def test_original_families_generate_exactly_the_pinned_tasks():
    # Digest of generate_suite(ORIGINAL, [1, 2], 8) since function names became one per family
    # and the split stopped depending on difficulty;
    # the tiny model of the default run is trained on exactly these tasks, so a change to the
    # generator must be deliberate (update this digest in the same commit).
    tasks = generate_suite(ORIGINAL, [1, 2], 8)
    assert len(tasks) == 112
    assert _digest(tasks) == "f003597ad5f2e881457c894092abd7510edd0913b1262a68840a342920c5ec7c"
    add = next(t for t in tasks if t.task_id == "proc/add/017d07635c51")
    assert add.prompt == ('def add(x):\n    """Return x plus 2.\n    >>> add(100)\n'
                          '    102\n    """\n')
    assert add.reference == "    return x + 2\n" and add.split == "heldout"


def test_suite_is_reproducible_from_its_seed_and_changes_with_it():
    a = generate_suite(NEW, [1, 2, 3], 2, seed=5)
    assert _digest(a) == _digest(generate_suite(NEW, [1, 2, 3], 2, seed=5))
    assert _digest(a) != _digest(generate_suite(NEW, [1, 2, 3], 2, seed=6))


def test_families_cover_every_category_the_issue_names():
    assert {"arithmetic", "strings", "lists", "dicts", "control", "recursion",
            "algorithms"} <= set(CATEGORIES)
    assert all(len(CATEGORIES[c]) >= 3 for c in CATEGORIES if c != "basic")


def _size(task):
    """Syntax-tree nodes of the reference solution alone (the prompt's example excluded)."""
    return len(list(ast.walk(ast.parse("def f(*args):\n" + task.reference))))


@pytest.mark.parametrize("family", NEW)
def test_higher_difficulty_needs_a_longer_solution_not_just_bigger_numbers(family):
    tasks = generate_suite([family], [1, 2, 3], 4)
    by_level = {d: statistics.mean(_size(t) for t in tasks if t.difficulty == d) for d in (1, 2, 3)}
    assert by_level[1] < by_level[2] < by_level[3], by_level
    # and each level asks a different question, not the same one with other constants
    templates = {d: {re.sub(r"-?\d+|'[^']*'", "#", t.prompt.split('"""')[1].split("\n")[0])
                     for t in tasks if t.difficulty == d} for d in (1, 2, 3)}
    assert not (templates[1] & templates[2]) and not (templates[2] & templates[3]), templates


def test_prompts_stay_short_enough_for_a_tiny_model():
    tasks = generate_suite(NEW + VERIFY_ONLY, [1, 2, 3], 3)
    lengths = [len(t.prompt) for t in tasks]
    assert max(lengths) <= 240 and statistics.median(lengths) < 170


def test_expected_outputs_are_plain_json_and_hidden_answers_are_not_all_equal():
    for t in generate_suite(NEW + VERIFY_ONLY, [1, 2, 3, 4], 3):
        values = [c.expected for c in t.tests]
        assert json.loads(json.dumps(values)) == values, t.task_id  # no tuples, str keys only
        assert len({json.dumps(v, sort_keys=True) for v in values}) > 1, t.task_id


def test_recursive_family_reference_calls_its_own_function_name():
    t = generate_suite(["fib_like"], [1], 1)[0]
    assert f"{t.entry_point}(n - 1)" in t.reference and "__self__" not in t.reference


def test_unknown_family_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown task families \\['nope'\\]; expected"):
        generate_suite(["nope"], [1], 1)


def test_training_instances_never_contain_a_heldout_task_of_any_seed():
    from envs.io.procedural import training_instances

    fams = ["add", "mul", "affine", "repeat"]
    inst = training_instances(fams, [1, 2], 20, seed=0, variants=4)
    held = {(t.family, t.prompt.splitlines()[1]) for s in range(4)
            for t in generate_suite(fams, [1, 2], 20, seed=s) if t.split == "heldout"}
    assert inst and all(t.split == "train" for t in inst)
    assert not {(t.family, t.prompt.splitlines()[1]) for t in inst} & held
    assert len(inst) > len([t for t in generate_suite(fams, [1, 2], 20) if t.split == "train"])


def test_generic_names_rename_a_share_of_the_demonstrations_and_their_references_pass():
    from envs.io.procedural import FAMILIES, GENERIC_NAMES, training_instances

    fams = ["add", "mul", "filter_gt", "repeat", "count", "prefix"]
    plain = training_instances(fams, [1, 2], 20, seed=0, variants=2)
    mixed = training_instances(fams, [1, 2], 20, seed=0, variants=2, generic_names=0.3)
    assert mixed == training_instances(fams, [1, 2], 20, seed=0, variants=2, generic_names=0.3)
    assert [t.task_id for t in mixed] == [t.task_id for t in plain]
    renamed = [t for t in mixed if t.entry_point != t.family]
    assert 0.2 < len(renamed) / len(mixed) < 0.4
    assert {t.entry_point for t in renamed} <= set(GENERIC_NAMES)
    assert len({t.entry_point for t in renamed}) > len(GENERIC_NAMES) // 2
    # The same task, word for word, under another name: a program the docstring asks for.
    by_id = {(t.task_id, t.tests[0].model_dump_json()): t for t in plain}
    for t in renamed:
        p = by_id[(t.task_id, t.tests[0].model_dump_json())]
        assert t.prompt.replace(f"{t.entry_point}(", "#(") == p.prompt.replace(f"{p.entry_point}(", "#(")
        scope: dict = {}
        exec(t.prompt + t.reference, scope)
        for case in (*t.examples, *t.tests):
            assert scope[t.entry_point](*case.args) == case.expected
    # A generic name must never be one a family is asked for under (the renamed families').
    asked = {f.function_name or f.name for f in FAMILIES.values()}
    assert not asked & set(GENERIC_NAMES)
    with pytest.raises(ValueError, match="generic_names=1.5"):
        training_instances(fams, [1], 2, generic_names=1.5)


def test_verification_only_families_ship_tests_but_no_reference():
    assert len(VERIFY_ONLY) >= 4
    tasks = generate_suite(VERIFY_ONLY, [1, 2], 6)
    assert {t.family for t in tasks} == set(VERIFY_ONLY)
    assert all(t.reference is None and t.tests and t.examples for t in tasks)
    # and the same constants in a family that has references would ship one
    assert all(t.reference for t in generate_suite(ORIGINAL, [1], 2))


def test_verification_only_solution_passes_its_hidden_tests_and_nothing_leaks_it():
    """The family keeps its solution only to check the suite: it must pass every hidden test
    (run in-process here; tests/unit/test_tasks_quality.py runs the sandboxed checks), and it
    must not appear in what a policy is shown."""
    shipped = generate_suite(VERIFY_ONLY, [1, 2], 4)
    checked = generate_suite(VERIFY_ONLY, [1, 2], 4, with_solutions=True)
    assert [t.task_id for t in shipped] == [t.task_id for t in checked]
    for s, t in zip(shipped, checked):
        assert s == t.model_copy(update={"reference": None})
        scope: dict = {}
        exec(t.prompt + t.reference, scope)
        for case in (*t.examples, *t.tests):
            assert scope[t.entry_point](*case.args) == case.expected, (t.task_id, case)
        assert t.reference.strip().removeprefix("return ") not in t.prompt


def test_one_function_name_for_every_family_changes_only_the_name():
    own = generate_suite(["add", "fib_like", "sum_times"], [1, 3], 2)
    shared = generate_suite(["add", "fib_like", "sum_times"], [1, 3], 2, function_name="f")
    assert [t.task_id for t in own] == [t.task_id for t in shared]  # same tasks, same split
    for a, b in zip(own, shared):
        assert b.entry_point == "f" and b.prompt.startswith("def f(")
        assert b.prompt == a.prompt.replace(a.entry_point + "(", "f(")
        assert b.split == a.split and b.tests == a.tests
    fib = next(t for t in shared if t.family == "fib_like" and t.reference)
    assert "f(n - 1)" in fib.reference  # the recursive reference calls the shared name
    with pytest.raises(ValueError, match="function_name='no good'"):
        generate_suite(["add"], [1], 1, function_name="no good")


def test_a_mirror_family_puts_the_same_constants_on_the_same_side_as_its_base():
    """Reworded and renamed families ask for a basic family's programs: a constant held out in
    one must not be trained on in the other (RL on `plus` with k=37 would lift `add`'s held-out
    k=37, and SFT on `add` with k=37 would show `plus`'s held-out answer)."""
    mirrors = [f for f in FAMILIES.values() if f.split_as]
    assert {f.name for f in mirrors} >= {"plus", "times", "keep", "written", "leading"}
    for fam in mirrors:
        side: dict = {}
        for t in generate_suite([fam.split_as, fam.name], [1, 2], 60):
            body = t.prompt.splitlines()[1]
            consts = tuple(re.findall(r"-?\d+|'\w'", body))  # in order: affine's a and b
            side.setdefault(consts, set()).add(t.split)
        assert all(len(s) == 1 for s in side.values()), fam.name


def test_a_longer_family_asks_for_its_base_program_under_the_base_name_with_three_digits():
    """long_add is add's task word for word, under the name add, with a constant of three digits
    (add's references show at most two): only the constant's length is new, and no reference
    shows it."""
    base = {t.prompt.splitlines()[1] for t in generate_suite(["add"], [1, 2], 60)}
    for t in generate_suite(["long_add", "long_affine"], [1, 2], 20, with_solutions=True):
        assert FAMILIES[t.family].verify_only and t.entry_point == FAMILIES[t.family].split_as
        assert t.prompt.startswith(f"def {t.entry_point}(")
        k = int(re.findall(r"\d+", t.prompt.splitlines()[1])[-1])
        assert 100 <= k <= 999 and f"{k}" in t.reference
    assert all(t.reference is None for t in generate_suite(["long_add"], [1], 5))
    assert all(len(re.findall(r"\d+", b)[-1]) <= 2 for b in base)
