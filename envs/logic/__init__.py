"""Kind `logic`: procedural logic problems answered by a numbered chain of steps, each step
checked by the z3 solver for entailment from what it cites. The kind: envs/logic/env.py; the
step syntax: envs/logic/syntax.py; the checks, the hack flags and the threat model:
envs/logic/checker.py (what a step rests on: envs/logic/accounting.py); the problem families:
envs/logic/families.py; the hack suite: envs/logic/hacks.py."""
from envs.logic.env import LogicEnv, LogicOptions, LogicPayload

__all__ = ["LogicEnv", "LogicOptions", "LogicPayload"]
