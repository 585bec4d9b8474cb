"""The shipped test-file task set (envs/testfile/data/basics.jsonl, read by configs/smollm2.yaml):
the file is what its builder writes from its source (basics.yaml), every reference
passes its own test file and a trivial answer fails it in the real sandbox, and each family has
tasks on both sides of the split."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path

from flows.config import load_config
from flows.stages import task_pool

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "envs" / "testfile" / "data"


def _builder():
    spec = importlib.util.spec_from_file_location("build_basics", DATA / "build_basics.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_file_is_what_its_source_writes(tmp_path):
    from tasks.files import save_tasks

    fresh = save_tasks(_builder().tasks(), tmp_path / "basics.jsonl")
    assert fresh.read_bytes() == (DATA / "basics.jsonl").read_bytes(), \
        "envs/testfile/data/basics.jsonl differs from its source: run the builder"


def test_every_reference_passes_its_test_file_and_a_trivial_answer_fails_it():
    out = subprocess.run([sys.executable, "-m", "flows.cli", "tasks", "check", "--file",
                          str(DATA / "basics.jsonl"), "--workers", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "32 tasks: 32 ok, 0 with problems, 0 duplicates, 0 split leaks" in out.stdout, out.stdout


def test_the_real_model_config_trains_on_them_and_holds_some_out_in_every_family(monkeypatch):
    monkeypatch.chdir(ROOT)  # the config names the file from the repository root
    cfg = load_config(ROOT / "configs" / "smollm2.yaml", [])
    tasks = [t for t in task_pool(cfg) if t.source == "testfile"]
    assert {t.kind for t in tasks} == {"testfile"}
    split = Counter((t.family, t.split) for t in tasks)
    families = {t.family for t in tasks}
    assert families == {"strings", "lists", "math", "dicts"}
    for fam in families:
        assert split[(fam, "train")] >= 3 and split[(fam, "heldout")] >= 1, split
