"""Kind `verifiers`: environments written for the `verifiers` package, by id, unchanged, graded
by their own rubric in the sandbox. The kind: envs/verifiers/env.py; the venv and the sandbox
its code runs in: envs/verifiers/venv.py (built by envs/verifiers/setup_venv.sh); the
in-sandbox harness: envs/verifiers/harness.py; the reading of its records:
envs/verifiers/grading.py; the hack suite: envs/verifiers/hacks.py; an environment package
that builds offline: envs/verifiers/example_env/."""
from envs.verifiers.env import VerifiersEnv, VerifiersOptions

__all__ = ["VerifiersEnv", "VerifiersOptions"]
