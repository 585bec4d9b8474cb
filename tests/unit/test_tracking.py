"""The `tracking` config key (flows/config.py) and what flows/tracking.py sends a tracker. A real
run whose trackers' files hold the registry's metrics: tests/integration/test_tracking_run.py."""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flows import tracking
from flows.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"


def test_tracking_is_off_by_default():
    assert load_config(TINY).tracking == []


def test_named_trackers_validate_and_one_name_is_a_list_of_one():
    assert load_config(TINY, ["tracking=[tensorboard, mlflow, wandb]"]).tracking == [
        "tensorboard", "mlflow", "wandb"]
    assert load_config(TINY, ["tracking=tensorboard"]).tracking == ["tensorboard"]


def test_an_unknown_tracker_is_refused_naming_it_and_the_known_ones():
    with pytest.raises(ConfigError) as err:
        load_config(TINY, ["tracking=[tensorboard, neptune]"])
    msg = str(err.value)
    assert "tracking.1" in msg and "'neptune'" in msg
    assert all(name in msg for name in ("tensorboard", "mlflow", "wandb"))


def test_a_tracker_named_twice_is_refused():
    with pytest.raises(ConfigError, match="named twice"):
        load_config(TINY, ["tracking=[mlflow, mlflow]"])


def test_a_tracker_whose_package_is_missing_is_refused_naming_what_to_install(monkeypatch):
    monkeypatch.setitem(tracking.PACKAGES, "wandb", ("no_such_module_rollforge", "wandb==0.31.0"))
    with pytest.raises(ConfigError) as err:
        load_config(TINY, ["tracking=[wandb]"])
    assert "'wandb'" in str(err.value) and "pip install wandb==0.31.0" in str(err.value)
    with pytest.raises(tracking.TrackingUnavailable, match="pip install wandb==0.31.0"):
        tracking.open_tracker("wandb", load_config(TINY))


def test_tracking_changes_no_config_hash():
    # where metrics are also sent is not what the run computes: a resume may add a tracker
    assert load_config(TINY).hash() == load_config(TINY, ["tracking=[tensorboard]"]).hash()


def test_cli_unknown_tracker_exits_2_and_writes_nothing(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--config", str(TINY),
         "--set", f"out_dir={tmp_path}", "--set", "tracking=[tensorbord]"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "tracking.0" in proc.stderr and "'tensorbord'" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_trackers_get_finite_numbers_only():
    got = tracking.scalars({"a": 1, "b": 0.5, "c": math.nan, "d": "local", "e": True,
                            "f": np.float32(2.5), "g": None, "h": math.inf})
    assert got == {"a": 1.0, "b": 0.5, "e": 1.0, "f": 2.5}


def test_config_is_flattened_to_dotted_parameters():
    assert tracking.flatten({"run_id": "x", "rl": {"lr": 0.0001, "kl": None},
                             "tasks": {"families": ["add", "mul"]}, "empty": {}}) == {
        "run_id": "x", "rl.lr": "0.0001", "rl.kl": "null", "tasks.families": '["add", "mul"]',
        "empty": "{}"}
