"""Tasks the tiny policy earns rewards on: functions that must return None, which a sampled
body passes whenever it parses (a warm start at a high rate makes that a coin flip), so groups
have reward spread and the update takes a real step. (On the procedural suite the tiny policy
never earns a reward, and its update is a copy of the checkpoint.)"""
import json
from pathlib import Path

SETS = ["eval_every=10", "sft.steps=20", "sft.warmup_steps=0", "sft.lr=0.03"]


def none_tasks(path: Path) -> Path:
    with path.open("w") as f:
        for i in range(12):
            f.write(json.dumps({
                "task_id": f"none/{i}", "suite": "none", "family": "none", "difficulty": 1,
                "split": "heldout" if i >= 10 else "train", "kind": "io", "entry_point": f"f{i}",
                "prompt": f'def f{i}(x):\n    """Return nothing."""\n',
                "tests": [{"args": [k], "expected": None} for k in range(3)],
                "reference": "    pass\n"}) + "\n")
    return path
