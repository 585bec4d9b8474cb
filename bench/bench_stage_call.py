"""What one Prefect stage call costs with the run's config and an iteration's rows as its
arguments (what a stage receives), passed as they are, with the rows alone quoted, and with
both quoted (`flows.staging.bulky`), side by side in one run. Prefect walks every argument of a
task call element by element and field by field (looking for futures to resolve and upstream
inputs to record); a quoted argument is handed over without the walk.

    .venv/bin/python bench/bench_stage_call.py              # 320 rows (default: 40 groups of 8)
    .venv/bin/python bench/bench_stage_call.py --rows 1024
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flows.env import apply_defaults  # noqa: E402

apply_defaults()


def main() -> int:
    from prefect import flow, task

    from flows.config import load_config
    from flows.staging import bulky

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=320)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    # the shape of a trajectory row the update stage receives: prompt and completion token ids
    rows = [{"prompt_token_ids": list(range(150)), "completion_token_ids": list(range(40)),
             "sampling_logprobs": [-0.5] * 40, "reward": 0.5, "advantage": 0.1}
            for _ in range(args.rows)]

    cfg = load_config(None, [])

    @task
    def stage(cfg, rows):
        return len(rows)

    ways = {"as they are": lambda: {"cfg": cfg, "rows": rows},
            "rows quoted": lambda: {"cfg": cfg, "rows": bulky({"a": rows})["a"]},
            "all quoted": lambda: bulky({"cfg": cfg, "rows": rows})}

    @flow
    def calls() -> dict:
        out = {}
        for name, inputs in ways.items():
            ts = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                assert stage(**inputs()) == len(rows)
                ts.append(time.perf_counter() - t)
            out[name] = statistics.median(ts)
        return out

    res = calls()
    print(f"one stage call with the default config and {args.rows} rows, median of "
          f"{args.repeats}:")
    for name, s in res.items():
        print(f"  {name:<12} {s * 1000:9.1f} ms")
    print(f"ratio rows quoted / as they are: {res['rows quoted'] / res['as they are']:.3f}; "
          f"all quoted / rows quoted: {res['all quoted'] / res['rows quoted']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
