"""Kind `dataframe`: write a pandas function of a DataFrame; its results on generated frames are
compared outside the sandbox. The kind: envs/dataframe/env.py; the task families (seeded frames,
expected results computed in plain Python, a difficulty knob per family):
envs/dataframe/families.py; the verifier (the io harness's `frames:` mode, envs/io/harness.py,
and its in-process adapter for the task checks): envs/dataframe/grading.py; the hack suite:
envs/dataframe/hacks.py."""
from envs.dataframe.env import DataFrameEnv, DataFrameOptions

__all__ = ["DataFrameEnv", "DataFrameOptions"]
