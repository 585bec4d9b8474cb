"""What one Prefect stage call costs with an iteration's rows as its argument, passed as they
are and quoted (`flows.staging.bulky`), side by side in one run. Prefect walks every argument
of a task call element by element (looking for futures to resolve and upstream inputs to
record); a quoted argument is handed over without the walk.

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

    @task
    def stage(rows):
        return len(rows)

    @flow
    def calls() -> dict:
        out = {}
        for name, wrap in (("as they are", lambda a: a), ("quoted", lambda a: bulky({"a": a})["a"])):
            ts = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                assert stage(wrap(rows)) == len(rows)
                ts.append(time.perf_counter() - t)
            out[name] = statistics.median(ts)
        return out

    res = calls()
    print(f"one stage call with {args.rows} rows, median of {args.repeats}:")
    for name, s in res.items():
        print(f"  {name:<12} {s * 1000:9.1f} ms")
    print(f"ratio quoted / as they are: {res['quoted'] / res['as they are']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
