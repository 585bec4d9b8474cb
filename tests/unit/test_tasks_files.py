"""Task files: exact round trips, and bad records refused with file and line (or row)."""
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from envs.dataframe.families import generate_dataframe_suite
from envs.io.procedural import FAMILIES, generate_suite
from envs.registry import validate_by_kind
from tasks.files import TaskFileError, load_tasks, save_tasks
from tasks.record import Task, TestCase


def _mixed_tasks():
    tasks = generate_suite(list(FAMILIES), [1, 3], 1) + generate_dataframe_suite(tasks_per_family=1)
    vonly = tasks[0].model_copy(update={"task_id": "user/verification-only", "reference": None,
                                        "suite": "user"})
    return tasks + [vonly]


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_export_then_import_gives_back_equal_tasks(tmp_path, ext):
    tasks = _mixed_tasks()
    path = save_tasks(tasks, tmp_path / f"t.{ext}")
    back = load_tasks(path, validate_by_kind)
    assert back == tasks
    assert [t.model_dump(mode="json") for t in back] == [t.model_dump(mode="json") for t in tasks]


def test_jsonl_lines_are_the_task_model_dump(tmp_path):
    tasks = generate_suite(["add"], [1], 2)
    path = save_tasks(tasks, tmp_path / "t.jsonl")
    lines = path.read_text().splitlines()
    assert [json.loads(x) for x in lines] == [t.model_dump(mode="json") for t in tasks]


def _write_jsonl(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")


def test_bad_field_in_jsonl_names_file_line_and_field(tmp_path):
    good = generate_suite(["add"], [1], 2)
    bad = good[1].model_dump(mode="json") | {"difficulty": 42}
    path = tmp_path / "mine.jsonl"
    _write_jsonl(path, [good[0].model_dump(mode="json"), "", bad])
    with pytest.raises(TaskFileError) as err:
        load_tasks(path, validate_by_kind)
    assert err.value.where == f"{path}:3"
    assert "field 'difficulty'" in str(err.value) and "42" in str(err.value)


def test_invalid_json_and_unknown_fields_are_refused_with_their_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    _write_jsonl(path, ["{not json"])
    with pytest.raises(TaskFileError, match=r"broken.jsonl:1: not valid JSON"):
        load_tasks(path, validate_by_kind)
    rec = generate_suite(["add"], [1], 1)[0].model_dump(mode="json") | {"answer": 1}
    _write_jsonl(path, [rec])
    with pytest.raises(TaskFileError, match=r"broken.jsonl:1: field 'answer': Extra inputs"):
        load_tasks(path, validate_by_kind)


def test_entry_point_missing_from_prompt_and_duplicate_ids_are_refused(tmp_path):
    a, b = generate_suite(["add"], [1], 2)
    path = tmp_path / "t.jsonl"
    _write_jsonl(path, [a.model_dump(mode="json") | {"entry_point": "other"}])
    with pytest.raises(TaskFileError, match=r"t.jsonl:1: field 'entry_point': 'other' is not"):
        load_tasks(path, validate_by_kind)
    _write_jsonl(path, [a.model_dump(mode="json"), b.model_dump(mode="json"),
                        a.model_dump(mode="json")])
    with pytest.raises(TaskFileError, match=r"t.jsonl:3: duplicate task_id .*first at .*t.jsonl:1"):
        load_tasks(path, validate_by_kind)


def test_bad_parquet_row_is_named_by_its_index(tmp_path):
    tasks = generate_suite(["add"], [1], 3)
    path = save_tasks(tasks, tmp_path / "t.parquet")
    table = pq.read_table(path)
    split = table.column("split").to_pylist()
    split[2] = "validation"
    table = table.set_column(table.schema.get_field_index("split"), "split", pa.array(split))
    pq.write_table(table, path)
    with pytest.raises(TaskFileError) as err:
        load_tasks(path, validate_by_kind)
    assert err.value.where == f"{path}: row 2" and "field 'split'" in str(err.value)


def _cli(*args):
    env = dict(os.environ, DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    return subprocess.run([sys.executable, "-m", "flows.cli", "tasks", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_cli_check_exits_nonzero_naming_file_and_line_of_a_bad_record(tmp_path):
    good = generate_suite(["add"], [1], 2)
    path = tmp_path / "user.jsonl"
    _write_jsonl(path, [good[0].model_dump(mode="json"),
                        good[1].model_dump(mode="json") | {"tests": []}])
    res = _cli("check", "--file", str(path), "--no-exec")
    assert res.returncode == 1
    assert f"{path}:2: field 'tests'" in res.stderr


def test_cli_export_list_and_check_a_good_file(tmp_path):
    out = tmp_path / "suite.parquet"
    res = _cli("export", "--families", "add,poly", "--difficulties", "1,2", "--per-family", "2",
               "--out", str(out))
    assert res.returncode == 0, res.stderr
    listed = _cli("list", "--file", str(out))
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == len(load_tasks(out, validate_by_kind))
    shown = _cli("show", load_tasks(out, validate_by_kind)[0].task_id, "--file", str(out))
    assert "## prompt" in shown.stdout and "## hidden tests" in shown.stdout
    checked = _cli("check", "--file", str(out), "--no-exec")
    assert checked.returncode == 0 and "0 with problems" in checked.stdout


def test_task_record_from_user_file_without_reference_loads_as_verification_only(tmp_path):
    t = Task(task_id="u/1", suite="user", family="mine", difficulty=1, split="train",
             prompt="def f(x):\n    \"\"\"Double x.\"\"\"\n", entry_point="f",
             tests=(TestCase(args=(1,), expected=2), TestCase(args=(2,), expected=4)))
    path = save_tasks([t], tmp_path / "u.jsonl")
    assert load_tasks(path, validate_by_kind)[0].reference is None


def _rollforge(*args, pythonpath):
    """The real CLI, with `pythonpath` importable (where a task file's author put a module)."""
    env = dict(os.environ, DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PYTHONPATH=os.pathsep.join([str(pythonpath), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def _module_that_leaves_a_marker(folder, name, body=""):
    marker = folder / f"{name}.imported"
    (folder / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran at import')\n{body}")
    return marker


def test_a_task_files_import_path_kind_is_refused_naming_kind_and_never_imported(tmp_path):
    # A task file is data from outside: its `kind` names a registered kind, never code to run.
    marker = _module_that_leaves_a_marker(tmp_path, "evilmod")
    task = generate_suite(["add"], [1], 1)[0]
    path = tmp_path / "evil.jsonl"
    _write_jsonl(path, [task.model_dump(mode="json") | {"kind": "evilmod:X"}])
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": task.task_id, "completion": "    pass\n"}) + "\n")

    checked = _rollforge("tasks", "check", "--file", str(path), "--no-exec", pythonpath=tmp_path)
    assert checked.returncode == 1  # a bad record, as any other
    assert f"{path}:1: field 'kind': 'evilmod:X' is an import path" in checked.stderr
    assert "registered kind" in checked.stderr and "'io'" in checked.stderr
    evaluated = _rollforge("eval", "--tasks", str(path), "--samples", str(samples),
                           "--workers", "1", pythonpath=tmp_path)
    assert evaluated.returncode == 2  # the eval CLI's bad input
    assert f"{path}:1: field 'kind': 'evilmod:X'" in evaluated.stderr
    assert not marker.exists(), "loading a task file ran the code its `kind` names"
    assert not os.path.exists(str(samples) + "_results.jsonl")


def test_an_import_path_kind_in_a_file_loads_only_when_the_user_names_it(tmp_path, monkeypatch):
    marker = _module_that_leaves_a_marker(
        tmp_path, "userkind", "from envs.io import FunctionsEnv\n\n"
        "class Env(FunctionsEnv):\n    name = 'userkind'\n")
    path = tmp_path / "mine.jsonl"
    _write_jsonl(path, [t.model_dump(mode="json") | {"kind": "userkind:Env"}
                        for t in generate_suite(["add"], [1], 2)])
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TaskFileError, match=r"mine.jsonl:1: field 'kind': 'userkind:Env'"):
        load_tasks(path, validate_by_kind)
    assert not marker.exists()
    # the user's own choice on the command line (or a source's `kind:` in the run config)
    listed = _rollforge("tasks", "list", "--file", str(path), "--kind", "userkind:Env",
                        pythonpath=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 2 and marker.exists()


def test_a_record_with_the_old_field_name_verifier_is_told_to_rename_it(tmp_path):
    rec = generate_suite(["add"], [1], 1)[0].model_dump(mode="json")
    rec["verifier"] = rec.pop("kind")
    path = tmp_path / "old.jsonl"
    _write_jsonl(path, [rec])
    with pytest.raises(TaskFileError, match=r"old.jsonl:1: field 'verifier' is the old name of "
                                            r"'kind': rename it"):
        load_tasks(path, validate_by_kind)
