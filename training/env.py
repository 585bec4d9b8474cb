"""Process environment for Prefect, DeepSpeed and Hugging Face, set before any of them is
imported: the flows, the trainer's rank processes and the benchmarks call `apply_defaults`
first."""
from __future__ import annotations

import os
import sys

DEFAULTS = {
    "DO_NOT_TRACK": "1",  # nothing phones home
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # The temporary local API needs more than Prefect's 20 s default on a busy 2-core machine.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_LOGGING_LOG_PRINTS": "true",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # no tqdm bars for every checkpoint load/save
    "DASK_LOGGING__DISTRIBUTED": "warning",  # cluster start/stop chatter
    # A LocalCluster's scheduler runs on an event-loop thread of the flow's process, and its
    # periodic work takes the GIL from the main thread between the model's ops: at Dask's
    # defaults (a loop-health tick every 20 ms, a system monitor every 500 ms, each worker
    # sampling its own stack every 10 ms on the same cores) the flow's sampling of a batch
    # took 0.43-0.47 s against 0.40 in a process without a cluster; 0.40-0.42 with these
    # (bench/trl_workload.yaml's batch, 2 threads, quiet, alternated). The tick still finds a
    # blocked loop (its limit is 3 s); the dashboard's system plots and worker profiles are
    # what get coarser or go.
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "2s",
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    # Progress lines (training/progress.py) outside a flow run (a benchmark calling the trainer)
    # are terminal lines only, not a warning that they found no run to log to.
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
}
PROGRESS_LOGGER = "rollforge.progress"  # training.progress.LOGGER, without importing it here


def apply_defaults() -> None:
    for k, v in DEFAULTS.items():
        os.environ.setdefault(k, v)
    # DeepSpeed's CPU accelerator compiles a small C++ op at its first import, into one cache
    # shared by every interpreter of the user (~/.cache/torch_extensions), and builds it again
    # whenever the interpreter's path differs from the last build's: two checkouts with their own
    # venvs took turns rebuilding it (207 s at each start, measured). One cache per environment.
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))
    # Prefect attaches its API log handler to these loggers, so the progress lines of long work
    # are in the run's logs in the UI (Prefect reads this once, when it is first imported).
    extra = [x.strip() for x in os.environ.get("PREFECT_LOGGING_EXTRA_LOGGERS", "").split(",")
             if x.strip()]
    if PROGRESS_LOGGER not in extra:
        os.environ["PREFECT_LOGGING_EXTRA_LOGGERS"] = ",".join([*extra, PROGRESS_LOGGER])


DISTRIBUTED_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                    "TORCHELASTIC_USE_AGENT_STORE")


def standalone_env() -> dict[str, str]:
    """This process's environment for starting another rollforge process on its own: without
    the process-group variables a launcher gave this one (RANK, WORLD_SIZE, MASTER_PORT...):
    the child would join, or try to serve, this process's group instead of making its own. (A
    world of one made in-process sets none of them: training/engine.py.)"""
    return {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_VARS}
