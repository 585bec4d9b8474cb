"""Kind `repo`: bug-fix tasks synthesized into real Python packages (envs/repo/env.py; the
builder envs/repo/build.py; the grader envs/repo/grading.py)."""
from envs.repo.env import RepoEnv

__all__ = ["RepoEnv"]
