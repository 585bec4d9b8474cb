"""The final grade of an agent episode: `solution.py` from its workspace, scored by the hidden
tests in a fresh sandbox with `envs.score.score`.

Only that one file's text is taken; every other file the agent wrote (a fake `harness.py`, an
`inputs.json`, a `conftest.py`) stays behind, because `score` builds its own sandbox files.
The flags the episode raised on the way (a forged visible count, a forged file manifest,
envs/agent/episode.py) join the grade's own: a flagged episode gets no credit, whatever its hidden
tests say, exactly as a flagged answer does (rewards/aggregate.py).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

from envs.score import score
from rewards import pyast
from rewards.aggregate import RewardConfig
from sandbox.base import Limits, Sandbox
from tasks.record import Task

SOLUTION = "solution.py"


def completion_from_file(task: Task, source: str) -> str:
    """The completion that, appended to `task.prompt`, gives the agent's `solution.py`.

    The agent writes a whole file. If it starts with the prompt, the rest is the completion;
    otherwise the whole file follows the prompt and its `def` replaces the prompt's stub (an
    indented `pass` first closes a prompt that ends at the signature).
    """
    if source.startswith(task.prompt):
        return source[len(task.prompt):]
    for candidate in (source, "    pass\n" + source):
        try:
            pyast.parse(task.prompt + candidate)
            return candidate
        except (SyntaxError, ValueError):
            continue
    return source  # does not parse: scored as the syntax error it is


def grade_files(task: Task, files: Mapping[str, str], sandbox: Sandbox, limits: Limits,
                cfg: RewardConfig, flags: Sequence[str] = ()) -> dict:
    """The `RewardBreakdown` of the workspace's solution.py as a plain dict (plus `solved`);
    `flags`: the episode's own hack flags (any: reward `-hack_penalty`, never solved)."""
    source = files.get(SOLUTION)
    if source is None:
        g = {"reward": 0.0, "pass_fraction": 0.0, "tests_passed": 0,
             "tests_total": len(task.tests), "status": "missing_solution", "solved": False,
             "infra_error": False, "hack_flags": ()}
    else:
        bd, _ = score(task, completion_from_file(task, source), sandbox, limits, cfg)
        g = dict(dataclasses.asdict(bd), solved=bd.solved)
    if flags:
        g.update(hack_flags=tuple(dict.fromkeys((*g["hack_flags"], *flags))), solved=False)
        if not g.get("infra_error"):  # an unscored grade stays NaN: not scored, never scored 0
            g["reward"] = -cfg.hack_penalty
    return g


def make_grader(sandbox: Sandbox, limits: Limits, cfg: RewardConfig | None = None
                ) -> Callable[[Task, Mapping[str, str], Sequence[str]], dict]:
    """A `grade(task, files, flags)` for `envs.agent.episode.EpisodeEnv`."""
    cfg = cfg or RewardConfig()
    return lambda task, files, flags=(): grade_files(task, files, sandbox, limits, cfg, flags)
