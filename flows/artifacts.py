"""What each iteration shows in the Prefect UI: a table of the run's metrics so far, the
reward curve (a PNG beside the run's files, rendered inline and linked), and for evaluation
runs a table of held-out pass rates; and what it sends to the experiment trackers the config
names (`tracking`, flows/tracking.py). Publishing never fails an iteration: a UI that cannot be
reached costs a warning, not the run."""
from __future__ import annotations

import base64
import io
import math
import re
import time
from pathlib import Path

from flows.config import RunConfig
from flows.tracking import log_iteration

TABLE_COLUMNS = [
    ("iteration", "iteration"), ("rollout/mean_reward", "reward"),
    ("rollout/pass_rate", "train pass"), ("heldout/pass_greedy", "held-out greedy"),
    ("heldout/pass_sampled", "held-out sampled"),
    ("curriculum/informative_share", "informative groups"), ("rollout/per_s", "rollouts/s"),
    ("sandbox/utilisation", "sandbox utilisation"), ("time/iteration_s", "iteration s"),
]
_SPARK = "▁▂▃▄▅▆▇█"


def artifact_key(run_id: str, what: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    slug = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-") or "run"
    return f"rollforge-{slug}-{what}"


def _clean(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return round(v, 4) if isinstance(v, float) else v


def metrics_table(metrics) -> list[dict]:
    """Rows of the metrics table (one per iteration), NaN as empty cells; with several task
    sources, their held-out pass rates too."""
    cols = [(k, h) for k, h in TABLE_COLUMNS if k in metrics.columns]
    per_source = sorted(k for k in metrics.columns
                        if k.startswith("heldout/source/") and k.endswith("/pass_greedy"))
    if len(per_source) > 1:
        cols += [(k, f"held-out greedy [{k.split('/')[2]}]") for k in per_source]
    return [{h: _clean(m[k].item() if hasattr(m[k], "item") else m[k]) for k, h in cols}
            for _, m in metrics.sort_values("iteration").iterrows()]


def sparkline(values: list[float]) -> str:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    return "".join(" " if v is None or math.isnan(v) else _SPARK[int((v - lo) / span * 7)]
                   for v in values)


CURVES = (("rollout/mean_reward", "mean reward"), ("rollout/pass_rate", "train pass"),
          ("heldout/pass_greedy", "held-out greedy"), ("heldout/pass_sampled", "held-out sampled"))


def curve_series(metrics, start: dict | None = None) -> dict[str, tuple[list, list]]:
    """label -> (x, y) of each curve the reward plot draws. A held-out figure at iteration i is
    of the policy its update published; `start` (the SFT start's evaluation, version 0) is
    drawn at iteration -1, before any update, so the held-out curves begin where RL began."""
    m = metrics.sort_values("iteration")
    out = {}
    for key, label in CURVES:
        x, y = [], []
        if start and key.startswith("heldout/") and start.get(key) is not None:
            x, y = [-1], [float(start[key])]
        if key in m.columns:
            s = m[["iteration", key]].dropna()
            x += [int(i) for i in s["iteration"]]
            y += [float(v) for v in s[key]]
        if x:
            out[label] = (x, y)
    return out


def reward_curve_png(metrics, path: Path, start: dict | None = None) -> bytes:
    """Mean reward and pass rates per iteration (held-out from the SFT start on, see
    `curve_series`); written atomically to `path`."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=80)
    for label, (x, y) in curve_series(metrics, start).items():
        ax.plot(x, y, marker="o", label=label, linestyle="--" if "held-out" in label else "-")
    ax.set_xlabel("iteration (held-out: the policy after it; -1: the SFT start)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return data


def reward_markdown(cfg: RunConfig, metrics, png: bytes, png_path: Path) -> str:
    m = metrics.sort_values("iteration")
    rewards = [float(x) for x in m.get("rollout/mean_reward", [])]
    lines = [f"# {cfg.run_id}: reward curve ({len(m)} iterations)", "",
             f"![reward curve](data:image/png;base64,{base64.b64encode(png).decode()})", "",
             f"mean reward per iteration: `{sparkline(rewards)}` "
             f"(last {rewards[-1]:.3f})" if rewards else "no iterations yet", "",
             f"Plot file: `{png_path}`"]
    return "\n".join(lines)


CURVE_EVERY_S = 30.0
_DRAWN: dict[str, float] = {}  # run dir -> when its reward curve was last drawn


def publish_iteration(cfg: RunConfig, iteration: int, metrics: dict, log,
                      start: dict | None = None) -> None:
    """The metrics table (every iteration) and the reward curve (with `start`, the SFT start's
    held-out evaluation; at most every CURVE_EVERY_S, and after the last iteration), as
    artifacts of the current flow run; and the metrics to the config's experiment trackers
    (flows/tracking.py)."""
    log_iteration(cfg, iteration, metrics, log)  # warns, never raises: as the artifacts
    try:
        from prefect.artifacts import (create_link_artifact, create_markdown_artifact,  # noqa: PLC0415
                                       create_table_artifact)

        from storage.registry import read_metrics  # noqa: PLC0415

        frame = read_metrics(cfg.run_dir)
        create_table_artifact(metrics_table(frame), key=artifact_key(cfg.run_id, "metrics"),
                              description=f"rollforge run {cfg.run_id}: metrics after iteration "
                                          f"{iteration}")
        # The curve is redrawn at most every CURVE_EVERY_S and after the last iteration: a
        # drawing is ~0.1 s of matplotlib, a few % of a short iteration, for a picture that a
        # person looks at every few minutes.
        last = _DRAWN.get(cfg.run_dir)
        if (iteration + 1 < cfg.iterations and last is not None
                and time.monotonic() - last < CURVE_EVERY_S):
            return
        _DRAWN[cfg.run_dir] = time.monotonic()
        png_path = (Path(cfg.run_dir) / "plots" / "reward_curve.png").resolve()
        png = reward_curve_png(frame, png_path, start)
        create_markdown_artifact(reward_markdown(cfg, frame, png, png_path),
                                 key=artifact_key(cfg.run_id, "reward-curve"),
                                 description=f"reward curve after iteration {iteration}")
        create_link_artifact(png_path.as_uri(), link_text="reward curve (PNG)",
                             key=artifact_key(cfg.run_id, "reward-curve-file"))
    except Exception as exc:  # the run goes on without its UI artifacts
        log.warning(f"iteration {iteration}: could not publish artifacts ({type(exc).__name__}: {exc})")


def publish_evaluation(cfg: RunConfig, version: int, result: dict, log) -> None:
    try:
        from prefect.artifacts import create_table_artifact  # noqa: PLC0415

        rows = [{"metric": k, "value": _clean(v)} for k, v in sorted(result.items())]
        create_table_artifact(rows, key=artifact_key(cfg.run_id, "evaluation"),
                              description=f"held-out evaluation of {cfg.run_id} v{version}")
    except Exception as exc:
        log.warning(f"could not publish the evaluation artifact ({type(exc).__name__}: {exc})")
