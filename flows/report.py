"""The end-of-run summary: one row per iteration, the SFT start against the end, and where
the run's files are."""
from __future__ import annotations

import math

import pandas as pd

COLUMNS = [
    ("iteration", "iter", "{:d}"),
    ("rollout/mean_reward", "reward", "{:.3f}"),
    ("rollout/pass_rate", "train pass", "{:.3f}"),
    ("heldout/pass_greedy", "held-out greedy", "{:.3f}"),
    ("heldout/pass_sampled", "held-out sampled", "{:.3f}"),
    ("rollout/per_s", "rollouts/s", "{:.0f}"),
    ("time/sample_s", "gen s", "{:.1f}"),
    ("time/run_rollouts_s", "exec s", "{:.1f}"),
    ("time/update_policy_s", "update s", "{:.1f}"),
    ("time/evaluate_s", "eval s", "{:.1f}"),
    ("time/iteration_s", "iter s", "{:.1f}"),
]


def _fmt(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(int(value) if fmt == "{:d}" else value)


def iteration_table(metrics: pd.DataFrame) -> str:
    cols = [(k, h, f) for k, h, f in COLUMNS if k in metrics.columns]
    rows = [[h for _, h, _ in cols]]
    for _, m in metrics.sort_values("iteration").iterrows():
        rows.append([_fmt(m[k], f) for k, _, f in cols])
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def family_groups(fams: list[str]) -> dict[str, list[str]]:
    """Verification-only families (no reference: only RL can teach them) against the rest, when
    a run has both."""
    from envs.io.procedural import FAMILIES

    vo = [f for f in fams if f in FAMILIES and FAMILIES[f].verify_only]
    rest = [f for f in fams if f not in vo]
    return {"verify-only": vo, "with reference": rest} if vo and rest else {}


def group_rate(ev: dict, group: list[str], mode: str, prefix: str = "heldout") -> float:
    """Task-weighted pass rate of several families (metrics `<prefix>/<family>/...`)."""
    pairs = [(ev.get(f"{prefix}/{f}/pass_{mode}", math.nan), ev.get(f"{prefix}/{f}/tasks", 0))
             for f in group]
    pairs = [(r, n) for r, n in pairs if n and not math.isnan(r)]
    total = sum(n for _, n in pairs)
    return sum(r * n for r, n in pairs) / total if total else math.nan


def summary(result: dict, metrics: pd.DataFrame) -> str:
    b, f = result["baseline"], result["final"]
    fams = sorted({k.split("/")[1] for k in b if k.count("/") == 2})
    rows = [("greedy", b["heldout/pass_greedy"], f["heldout/pass_greedy"]),
            ("sampled", b["heldout/pass_sampled"], f["heldout/pass_sampled"])]
    sources = sorted({k.split("/")[2] for k in b if k.startswith("heldout/source/")})
    if len(sources) > 1:  # one source is the whole table already
        for src in sources:
            key = f"heldout/source/{src}"
            rows.append((f"source {src} ({b.get(f'{key}/tasks')})",
                         (b[f"{key}/pass_greedy"], b[f"{key}/pass_sampled"]),
                         (f.get(f"{key}/pass_greedy", math.nan),
                          f.get(f"{key}/pass_sampled", math.nan))))
    for name, group in family_groups(fams).items():
        n = sum(b.get(f"heldout/{fam}/tasks", 0) for fam in group)
        rows.append((f"{name} ({n})", (group_rate(b, group, "greedy"), group_rate(b, group, "sampled")),
                     (group_rate(f, group, "greedy"), group_rate(f, group, "sampled"))))
    for fam in fams:
        n = b.get(f"heldout/{fam}/tasks")
        rows.append((f"{fam} ({n})" if n is not None else fam,
                     (b[f"heldout/{fam}/pass_greedy"], b[f"heldout/{fam}/pass_sampled"]),
                     (f[f"heldout/{fam}/pass_greedy"], f[f"heldout/{fam}/pass_sampled"])))

    def cell(v) -> str:
        return f"{v[0]:.3f} / {v[1]:.3f}" if isinstance(v, tuple) else f"{v:.3f}"

    width = max(len(r[0]) for r in rows) + 2
    out = [iteration_table(metrics), "",
           f"held-out pass rate ({b['heldout/tasks']} tasks; per source and family: greedy / "
           f"sampled)" if len(sources) > 1 else
           f"held-out pass rate ({b['heldout/tasks']} tasks; per family: greedy / sampled)",
           f"  {'':<{width}}{'SFT start (v0)':<17}after RL (v{result['iterations']})"]
    out += [f"  {label:<{width}}{cell(v0):<17}{cell(v1)}" for label, v0, v1 in rows]
    out += warm_start_line(result.get("sft") or {})
    return "\n".join(out)


def warm_start_line(sft: dict) -> list[str]:
    """How a warm start trained until a criterion ended (`sft.until_pass`), when it ran now."""
    if "sft/probe_pass" not in sft:
        return []
    met = sft.get("sft/criterion_met_at")
    when = (f"criterion met at step {int(met)}" if met is not None and not math.isnan(met)
            else f"criterion not met, decayed from step {sft['sft/decay_from']}")
    return [f"warm start: {sft['sft/steps']} steps ({when}); greedy pass of its "
            f"{sft['sft/probe_tasks']} probe tasks at the end {sft['sft/probe_pass']:.3f}"]
