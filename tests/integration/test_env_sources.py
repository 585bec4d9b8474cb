"""One run on a mix of three task sources through the real loop: a temporary Prefect API, a
separately started `dask scheduler` with two `dask worker` processes (named by
`cluster.address`), the process sandbox and the DeepSpeed update. The sources are the
procedural functions (kind io), a JSONL task file of the test-file kind, and the example
plug-in kind `regex` (examples/rollforge-regex, installed into the venv by `make setup`), which
the worker processes import themselves to grade its tasks."""
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from dask_cluster import dask_cluster
from flows.env import standalone_env
from storage.registry import read_metrics
from storage.trajectories import read_trajectories

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
TESTFILE_TASKS = ROOT / "tests" / "unit" / "data" / "testfile_tasks.jsonl"


@pytest.fixture()
def cluster(tmp_path):
    # the workers start outside the repository, so they import rollforge and the plug-in from
    # the venv's installs, as workers on another host would
    with dask_cluster(tmp_path / "dask.log", tmp_path, workers=2,
                      env={**standalone_env(), "PYTHONPATH": ""}) as (address, client, _):
        yield address, client


def test_a_run_on_three_sources_stores_each_and_reports_each(cluster, tmp_path):
    assert "regex" in {ep.name for ep in entry_points(group="rollforge.environments")}, \
        "the example plug-in is not installed: run `make setup` (pip install -e examples/rollforge-regex)"
    address, client = cluster
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg.update(out_dir=str(tmp_path / "runs"), run_id="mix", iterations=1)
    cfg["cluster"]["address"] = address
    cfg["policy"]["max_len"] = 768  # the regex and test-file prompts are longer than io's
    cfg["tasks"].update(tasks_per_iteration=6, heldout_samples=1, sources=[
        {"name": "functions", "kind": "io",
         "options": {"families": ["add", "repeat"], "difficulties": [1, 2], "tasks_per_family": 6}},
        {"name": "testfiles", "file": str(TESTFILE_TASKS)},
        {"name": "regex", "kind": "regex", "options": {"families": ["digits", "prefix"],
                                                       "tasks_per_family": 5}},
    ])
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**standalone_env(), "PREFECT_HOME": str(tmp_path / "prefect-home")}
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--config", str(path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]

    run = tmp_path / "runs" / "mix"
    rows = read_trajectories(str(run))
    by_source = rows.groupby("source")["kind"].agg(lambda k: sorted(set(k))).to_dict()
    assert by_source == {"functions": ["io"], "regex": ["regex"], "testfiles": ["testfile"]}
    # 6 tasks shared out by equal weights, G=4 episodes each, refills may add more
    assert all(n >= 8 for n in rows.groupby("source").size())
    assert rows["reward"].notna().all() and not rows["infra_error"].any()
    named = rows[rows["source"] == "testfiles"]
    assert all(len(n) == len(o) > 0 for n, o in zip(named["test_names"], named["test_outcomes"]))
    assert (rows["source"] == "regex").sum() and all(
        n[0].startswith("match ") for n in rows[rows["source"] == "regex"]["test_names"])

    m = read_metrics(str(run)).iloc[-1]
    for src in ("functions", "testfiles", "regex"):
        assert m[f"heldout/source/{src}/tasks"] > 0
        assert 0.0 <= m[f"heldout/source/{src}/pass_greedy"] <= 1.0
        assert f"source {src} (" in out  # the end-of-run table has a line per source
    ran = [j for j in map(json.loads, (run / "stages.jsonl").read_text().splitlines())
           if j["stage"] == "update_policy" and j["event"] == "end"]
    assert len(ran) == 1 and (run / "checkpoints" / "v0001" / "model").is_dir()  # DeepSpeed

    # the separate worker processes graded the plug-in's tasks with the plug-in they imported
    loaded = client.run(lambda: "rollforge_regex" in sys.modules)
    assert any(loaded.values()), loaded
