"""Task files: exact round trips, and bad records refused with file and line (or row)."""
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.dataframe import generate_dataframe_suite
from tasks.files import TaskFileError, load_tasks, save_tasks
from tasks.procedural import FAMILIES, generate_suite
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
    back = load_tasks(path)
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
        load_tasks(path)
    assert err.value.where == f"{path}:3"
    assert "field 'difficulty'" in str(err.value) and "42" in str(err.value)


def test_invalid_json_and_unknown_fields_are_refused_with_their_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    _write_jsonl(path, ["{not json"])
    with pytest.raises(TaskFileError, match=r"broken.jsonl:1: not valid JSON"):
        load_tasks(path)
    rec = generate_suite(["add"], [1], 1)[0].model_dump(mode="json") | {"answer": 1}
    _write_jsonl(path, [rec])
    with pytest.raises(TaskFileError, match=r"broken.jsonl:1: field 'answer': Extra inputs"):
        load_tasks(path)


def test_entry_point_missing_from_prompt_and_duplicate_ids_are_refused(tmp_path):
    a, b = generate_suite(["add"], [1], 2)
    path = tmp_path / "t.jsonl"
    _write_jsonl(path, [a.model_dump(mode="json") | {"entry_point": "other"}])
    with pytest.raises(TaskFileError, match=r"t.jsonl:1: field 'entry_point': 'other' is not"):
        load_tasks(path)
    _write_jsonl(path, [a.model_dump(mode="json"), b.model_dump(mode="json"),
                        a.model_dump(mode="json")])
    with pytest.raises(TaskFileError, match=r"t.jsonl:3: duplicate task_id .*first at .*t.jsonl:1"):
        load_tasks(path)


def test_bad_parquet_row_is_named_by_its_index(tmp_path):
    tasks = generate_suite(["add"], [1], 3)
    path = save_tasks(tasks, tmp_path / "t.parquet")
    table = pq.read_table(path)
    split = table.column("split").to_pylist()
    split[2] = "validation"
    table = table.set_column(table.schema.get_field_index("split"), "split", pa.array(split))
    pq.write_table(table, path)
    with pytest.raises(TaskFileError) as err:
        load_tasks(path)
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
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == len(load_tasks(out))
    shown = _cli("show", load_tasks(out)[0].task_id, "--file", str(out))
    assert "## prompt" in shown.stdout and "## hidden tests" in shown.stdout
    checked = _cli("check", "--file", str(out), "--no-exec")
    assert checked.returncode == 0 and "0 with problems" in checked.stdout


def test_task_record_from_user_file_without_reference_loads_as_verification_only(tmp_path):
    t = Task(task_id="u/1", suite="user", family="mine", difficulty=1, split="train",
             prompt="def f(x):\n    \"\"\"Double x.\"\"\"\n", entry_point="f",
             tests=(TestCase(args=(1,), expected=2), TestCase(args=(2,), expected=4)))
    path = save_tasks([t], tmp_path / "u.jsonl")
    assert load_tasks(path)[0].reference is None
