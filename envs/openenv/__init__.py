"""Kind `openenv`: environments served by an OpenEnv (`openenv-core`) environment server, at an
address or started by the run, played unchanged. The kind: envs/openenv/env.py; the server's
protocol: envs/openenv/client.py; starting and stopping a server: envs/openenv/server.py and
envs/openenv/launch.py, from the venv envs/openenv/setup_venv.sh builds."""
from envs.openenv.env import OpenEnvEnv, OpenEnvOptions

__all__ = ["OpenEnvEnv", "OpenEnvOptions"]
