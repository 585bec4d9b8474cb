"""The process environment every entry point sets first (the CLI, the benchmarks, the tests):
defined in training/env.py, below the layers that need it, since a rank process of the
trainer sets it too without importing the flows."""
from training.env import DEFAULTS, DISTRIBUTED_VARS, apply_defaults, standalone_env

__all__ = ["DEFAULTS", "DISTRIBUTED_VARS", "apply_defaults", "standalone_env"]
