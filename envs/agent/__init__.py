"""Kind `agent`: multi-turn episodes over function tasks (write, run the visible tests, read,
fix, submit). The kind and its options (the run config's `episodes` section): envs/agent/env.py;
the episode itself, its workspace and action format: envs/agent/episode.py and
envs/agent/EPISODES.md; the helper programs it runs in the sandbox and the reading of their
output: envs/agent/scripts.py; the final grade of the workspace: envs/agent/grading.py; the hack
suite: envs/agent/hacks.py."""
from envs.agent.env import AgentEnv, AgentOptions, EpisodeConfig

__all__ = ["AgentEnv", "AgentOptions", "EpisodeConfig"]
