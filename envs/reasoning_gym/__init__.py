"""Kind `reasoning_gym`: reasoning-gym's datasets by name, scored by their own `score_answer` in
the sandbox. The kind: envs/reasoning_gym/env.py; datasets, options and curriculum levels:
envs/reasoning_gym/datasets.py; the sandbox run and the reading of its score:
envs/reasoning_gym/grading.py; the in-sandbox harness: envs/reasoning_gym/harness.py; the hack
suite: envs/reasoning_gym/hacks.py."""
from envs.reasoning_gym.env import ReasoningGymEnv, ReasoningGymOptions

__all__ = ["ReasoningGymEnv", "ReasoningGymOptions"]
