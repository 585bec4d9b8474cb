"""The verdict on a chaos run's store: `check_store` says whether it holds every (iteration,
group, sample) exactly once with every visible file whole and metrics and checkpoints in
agreement with the rows; `compare` sets its rows and final weights against the uninterrupted
run of the same seed."""
from __future__ import annotations

import collections
from pathlib import Path

# Fields of a row that may differ between the chaos run and the uninterrupted one: seconds
# measured on the clock (also inside `reward_components`). Every other field must be equal, row
# by row, except on rows whose execution a sandbox fault hit (they are listed, not compared).
CLOCK_FIELDS = ("gen_time_s", "exec_time_s", "score_time_s", "turn_seconds")
KEY = ["iteration", "group_id", "sample_index"]


def check_store(run_dir: Path, iterations: int, group_size: int) -> dict:
    """Every (iteration, group, sample) once, every visible file whole, metrics and checkpoints
    in agreement with the rows."""
    import pyarrow.parquet as pq

    from storage.registry import finished_iterations, list_checkpoints, read_metrics
    from storage.trajectories import read_trajectories

    problems = []
    for f in (run_dir / "trajectories").rglob("*"):
        if f.is_file() and not any(part.startswith((".", "_")) for part in
                                   f.relative_to(run_dir).parts):
            try:
                pq.read_metadata(f)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"unreadable visible file {f}: {exc}")
    df = read_trajectories(str(run_dir))
    dup = int(df.duplicated(KEY).sum())
    sizes = df.groupby(["iteration", "group_id"]).size()
    if not sizes.eq(group_size).all():
        problems.append(f"groups without {group_size} samples: "
                        f"{sizes[sizes.ne(group_size)].to_dict()}")
    its = sorted(int(i) for i in df["iteration"].unique())
    if its != list(range(iterations)):
        problems.append(f"iterations in the rows {its}, expected 0..{iterations - 1}")
    if finished_iterations(str(run_dir)) != list(range(iterations)):
        problems.append(f"finished iterations {finished_iterations(str(run_dir))}")
    m = read_metrics(str(run_dir))
    if sorted(m["iteration"].tolist()) != list(range(iterations)):
        problems.append(f"metrics rows for iterations {sorted(m['iteration'].tolist())}")
    else:
        for it, count in zip(m["iteration"], m["rollout/count"]):
            if int(count) != int((df["iteration"] == it).sum()):
                problems.append(f"iteration {it}: metrics count {count} rollouts, the store "
                                f"{int((df['iteration'] == it).sum())}")
    cks = list_checkpoints(str(run_dir))
    if sorted(c["iteration"] for c in cks) != list(range(iterations)):
        problems.append(f"checkpoints registered for {sorted(c['iteration'] for c in cks)}")
    for c in cks:  # a registered checkpoint that still exists (older ones are pruned) is whole
        model = Path(c["path"]) / "model"
        if (model.exists() or c["iteration"] == iterations - 1) \
                and not any(model.glob("*.safetensors")):
            problems.append(f"checkpoint of iteration {c['iteration']} has no weights")
    for d in (run_dir / "checkpoints").glob(".tmp-*"):
        problems.append(f"staging folder left: {d.name}")
    return {"rows": len(df), "duplicated": dup, "problems": problems}


def compare(chaos_dir: Path, ref_dir: Path, iterations: int) -> dict:
    """Rows and final weights of the chaos run against the uninterrupted one."""
    import numpy as np
    import pandas as pd
    from safetensors.numpy import load_file

    from storage.trajectories import read_trajectories
    from training import checkpoints

    a = read_trajectories(str(chaos_dir)).set_index(KEY).sort_index()
    b = read_trajectories(str(ref_dir)).set_index(KEY).sort_index()
    lost = len(b.index.difference(a.index))
    extra = len(a.index.difference(b.index))
    common = a.index.intersection(b.index)
    cols = [c for c in b.columns if c not in CLOCK_FIELDS]
    a, b = a.loc[common, cols], b.loc[common, cols]

    def same(x, y) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return (x == y) or (np.isnan(x) and np.isnan(y))
        if isinstance(x, (list, np.ndarray)) or isinstance(y, (list, np.ndarray)):
            xs, ys = list(x if x is not None else []), list(y if y is not None else [])
            # element by element: a NaN in a list (a turn that ran no tests) equals a NaN
            return len(xs) == len(ys) and all(same(p, q) for p, q in zip(xs, ys))
        return bool(x == y) or (pd.isna(x) is True and pd.isna(y) is True)

    def unclocked(components):  # the components carry the execution's seconds too
        return None if components is None else repr([  # repr: NaN equals NaN
            tuple(kv) for kv in components if kv[0] not in CLOCK_FIELDS])

    differing_rows, differing_cols, examples = set(), collections.Counter(), []
    for c in cols:
        xs, ys = a[c].tolist(), b[c].tolist()
        if c == "reward_components":
            xs, ys = map(unclocked, xs), map(unclocked, ys)
        for k, x, y in zip(common, xs, ys):
            if not same(x, y):
                differing_rows.add(k)
                differing_cols[c] += 1
                if len(examples) < 5:
                    examples.append((k, c, str(x)[:120], str(y)[:120]))
    infra = int(a["infra_error"].fillna(False).astype(bool).sum())
    wa = checkpoints.checkpoint_dir(str(chaos_dir), iterations) / "model"
    wb = checkpoints.checkpoint_dir(str(ref_dir), iterations) / "model"
    ta = {k: v for f in sorted(wa.glob("*.safetensors")) for k, v in load_file(f).items()}
    tb = {k: v for f in sorted(wb.glob("*.safetensors")) for k, v in load_file(f).items()}
    max_diff = (max(float(np.abs(ta[k].astype(np.float64) - tb[k]).max()) for k in tb)
                if ta.keys() == tb.keys() and tb else float("inf"))
    return {"lost": lost, "extra": extra, "rows_compared": len(common),
            "rows_differing": len(differing_rows), "columns_differing": dict(differing_cols),
            "infra_error_rows": infra, "weights_max_abs_diff": max_diff,
            "examples": examples}
