"""Kind `ops`: bash scripts judged by the state they leave (envs/ops/README.md)."""
from envs.ops.env import OpsEnv

__all__ = ["OpsEnv"]
