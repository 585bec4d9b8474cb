"""What the tests of training/trainer.py's update and warm start share: a tiny policy, prompts
with reference answers, and reading a published version's weights."""
import torch

from training import checkpoints
from training.config import PolicyConfig
from training.policy import load_policy

POLICY = PolicyConfig(n_layer=1, n_embd=32, n_head=2, max_len=64)
PROMPTS = [f"def f{i}(x):\n" for i in range(4)]
REFS = [f"    return x * {i}\n" for i in range(4)]


def weights(run_dir, version) -> dict[str, torch.Tensor]:
    return load_policy(str(checkpoints.checkpoint_dir(run_dir, version) / "model")).state_dict()


def max_diff(a, b) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)
