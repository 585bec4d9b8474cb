import os

# Before anything imports Prefect or DeepSpeed: nothing phones home, CPU DeepSpeed, offline HF.
from flows.env import apply_defaults

apply_defaults()
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import pytest  # noqa: E402

SLOW_ENV = "ROLLFORGE_SLOW_TESTS"


def pytest_collection_modifyitems(config, items):
    """`slow` tests (minutes each, a path that faster tests already cover in parts) run only with
    ROLLFORGE_SLOW_TESTS=1, so `make test` stays short; each says what it adds."""
    if os.environ.get(SLOW_ENV):
        return
    skip = pytest.mark.skip(reason=f"slow (minutes): set {SLOW_ENV}=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
