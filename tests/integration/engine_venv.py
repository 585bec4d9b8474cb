"""The engine tests' precondition: vLLM's venv (`make engine`)."""
import os

import pytest

from engine.vllm_server import DEFAULT_VENV

REQUIRE_ENV = "ROLLFORGE_REQUIRE_ENGINE"  # `make test` sets it: CI must run the engine tests


def need_engine_venv() -> None:
    """Skip the calling test module when the engine's venv is missing, or fail its collection
    when ROLLFORGE_REQUIRE_ENGINE is set, so a CI whose engine did not build cannot pass by
    skipping the engine's tests."""
    if (DEFAULT_VENV / "bin" / "python").is_file():
        return
    why = f"no inference engine venv at {DEFAULT_VENV}: build it with `make engine` (about 6 minutes)"
    if os.environ.get(REQUIRE_ENV):
        raise RuntimeError(f"{why}; {REQUIRE_ENV} is set, so the engine's tests may not skip")
    pytest.skip(why, allow_module_level=True)
