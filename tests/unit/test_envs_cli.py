"""The environment API at the door: `rollforge envs`, task sources in the run config and on the
command line, and bad input (an unknown kind, a plug-in that fails to import, a record that does
not fit its kind) refused with exit code 2, naming the source, the line and the field, before
anything is written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envs.io.procedural import generate_suite
from flows.cli import main
from flows.config import ConfigError, load_config, task_sources

ROOT = Path(__file__).resolve().parents[2]
TESTFILE_TASKS = ROOT / "tests" / "unit" / "data" / "testfile_tasks.jsonl"


def _cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_envs_lists_every_built_in_kind_with_its_options():
    out = _cli("envs", "--json")
    assert out.returncode == 0, out.stderr
    kinds = {k["kind"]: k for k in json.loads(out.stdout)}
    assert {"io", "dataframe", "humaneval", "testfile", "agent"} <= set(kinds)
    fields = {f["name"]: f for f in kinds["io"]["options"]}
    assert fields["families"]["description"] and fields["tasks_per_family"]["default"] == 40
    assert [f["name"] for f in kinds["testfile"]["payload"]][:2] == ["test_file", "format"]
    assert kinds["agent"]["multi_turn"] and not kinds["io"]["multi_turn"]


def test_without_sources_the_run_has_the_implicit_procedural_source_and_its_old_hash():
    cfg = load_config(None)
    (src,) = task_sources(cfg)
    assert (src.label, src.kind) == ("procedural", "io")
    assert src.options["families"] == cfg.tasks.families
    # the default run's hash, pinned before task sources existed (tests/unit/test_config.py)
    explicit = load_config(None, ["tasks.sources=[{kind: io, name: procedural}]"])
    assert explicit.hash() != cfg.hash()  # naming sources is a different config


def _tiny_with(tmp_path: Path, **tasks) -> Path:
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg.update(out_dir=str(tmp_path / "runs"))
    cfg["tasks"].update(tasks)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("source, expected", [
    ({"kind": "no_such_kind"}, "tasks.sources[no_such_kind]: unknown kind 'no_such_kind'"),
    ({"kind": "broken_env:Env", "name": "mine"},
     "tasks.sources[mine]: kind 'broken_env:Env': importing 'broken_env' failed: RuntimeError: "
     "boom at import"),
    ({"kind": "io", "options": {"families": ["nope"]}}, "options: families: Value error, unknown"),
])
def test_a_bad_source_exits_2_naming_it_and_writes_nothing(tmp_path, source, expected,
                                                           monkeypatch):
    (tmp_path / "broken_env.py").write_text('raise RuntimeError("boom at import")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _tiny_with(tmp_path, sources=[source])
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert expected in str(err.value)
    assert main(["run", "--config", str(path)]) == 2
    assert not (tmp_path / "runs").exists()  # nothing half-written


def test_a_record_that_does_not_fit_its_kind_names_the_file_line_and_field(tmp_path, capsys):
    good = [json.loads(line) for line in TESTFILE_TASKS.read_text().splitlines()]
    bad = dict(good[1], payload={**good[1]["payload"], "format": "unittest"})
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [good[0], bad]) + "\n")
    assert main(["run", "--tasks", str(path), "--set", f"out_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert f"tasks.sources[mine]: {path}:2: field 'payload.format'" in err, err
    assert not (tmp_path / "runs").exists()
    # a function task whose entry point the prompt does not define: the io kind's own check
    t = generate_suite(["add"], [1], 1)[0].model_dump(mode="json") | {"entry_point": "other"}
    path.write_text(json.dumps(t) + "\n")
    assert main(["tasks", "list", "--file", str(path)]) == 2
    assert f"{path}:1: field 'entry_point': 'other' is not defined" in capsys.readouterr().err


def test_tasks_check_and_list_take_any_kind(tmp_path):
    out = _cli("tasks", "check", "--file", str(TESTFILE_TASKS))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "8 tasks: 8 ok, 0 with problems" in out.stdout
    out = _cli("tasks", "list", "--kind", "humaneval", "--options", '{"limit": 3}')
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 3, out.stderr
    out = _cli("tasks", "list", "--kind", "humaneval", "--families", "add")
    assert out.returncode == 2 and "kind 'humaneval' has no option 'families'" in out.stderr


def test_eval_scores_a_samples_file_against_a_task_file(tmp_path):
    tasks = [json.loads(line) for line in TESTFILE_TASKS.read_text().splitlines()][:2]
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(json.dumps({"task_id": t["task_id"], "completion": c}) + "\n"
                               for t in tasks for c in (t["reference"], "    pass\n")))
    out = _cli("eval", "--tasks", str(TESTFILE_TASKS), "--samples", str(samples), "--workers", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "pass@1: 0.5000" in out.stdout
    results = [json.loads(line) for line in Path(str(samples) + "_results.jsonl").read_text().splitlines()]
    assert [r["passed"] for r in results] == [True, False, True, False]
