"""Kind `testfile`: a module or function graded by the task's own test file (pytest or `assert`
lines) run in the sandbox. The kind: envs/testfile/env.py; the verifier, its payload and its
threat model: envs/testfile/grading.py; the grader's pytest plugin, shipped into the sandbox as
`conftest.py` (also run by the repo kind's grader): envs/testfile/plugin/; the hack suite:
envs/testfile/hacks.py; the shipped tasks: envs/testfile/data/ (basics.jsonl, written by
build_basics.py from basics.yaml)."""
from envs.testfile.env import TestFileEnv
from envs.testfile.grading import TestFilePayload

__all__ = ["TestFileEnv", "TestFilePayload"]
