import os

# Before anything imports Prefect or DeepSpeed: nothing phones home, CPU DeepSpeed, offline HF.
from flows.env import apply_defaults

apply_defaults()
os.environ.setdefault("DS_ACCELERATOR", "cpu")
