"""Environments: every kind of task reaches the loop through `envs.base.Environment`
(envs/README.md says how to write one)."""
from envs.base import (EnvError, Environment, NoOptions, SingleTurnEnv, StepContext,
                       StepResult)
from envs.registry import env_for_task, kind_class, known, make_env

__all__ = ["EnvError", "Environment", "NoOptions", "SingleTurnEnv", "StepContext", "StepResult",
           "env_for_task", "kind_class", "known", "make_env"]
