"""The run config: one typed object, built from one sub-config per stage, loaded from YAML."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from envs.agent import EpisodeConfig
from envs.sources import SourceConfig
from flows.tracking import TrackerName, unavailable
from rewards.aggregate import RewardConfig
from sandbox.config import SandboxConfig
from training.config import PolicyConfig, RLConfig, SamplingConfig, SFTConfig

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"


class TaskConfig(BaseModel):
    """Which problems the run trains and evaluates on, and how they are drawn.

    `sources` lists where tasks come from (envs/sources.py); without it, the run has one
    source named `procedural`: the procedural suite made from the fields below (played as
    agent episodes when `episodes.enabled`)."""

    model_config = ConfigDict(extra="forbid")

    sources: list[SourceConfig] | None = Field(
        None, description="task sources, each a kind's own tasks or a task file, with a weight "
        "in the draw, filters and an optional re-split (envs/sources.py); null: the procedural "
        "suite of the fields below")

    families: list[str] = Field(default_factory=lambda: ["add", "mul", "filter_gt", "repeat"],
                                min_length=1, description="procedural families in the pool")
    difficulties: list[int] = Field(default_factory=lambda: [1], min_length=1,
                                    description="procedural difficulty levels in the pool")
    tasks_per_family: int = Field(40, ge=1, description="distinct tasks per (family, difficulty)")
    n_tests: int = Field(6, ge=1, description="hidden tests per task")
    heldout_fraction: float = Field(0.2, gt=0, lt=1, description="share of tasks held out")
    tasks_per_iteration: int = Field(32, ge=1, description="training tasks sampled per iteration")
    heldout_samples: int = Field(4, ge=1, description="sampled completions per held-out task at eval")
    sft_variants: int = Field(8, ge=1, description="seeds whose training-split tasks make the SFT "
                              "data: more constants and fresh docstring examples per family, so the "
                              "warm start learns to read the docstring instead of memorising "
                              "examples (held-out tasks never appear, whatever the seed)")
    sft_generic_names: float = Field(
        0.0, ge=0, le=1, description="share of the SFT data shown under a generic function name "
        "(f, solve, compute, ...) instead of its family's: demonstrations whose name says "
        "nothing, so the warm start learns to write what the docstring asks under a name it has "
        "not seen (what the verification-only renamed families need); 0: every one under its "
        "family's name")
    seed: int = Field(0, description="seed of the procedural suite (its tasks and split)")
    function_name: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="one function name for every task (e.g. f), so the policy must tell the "
        "problem from the docstring's words; null: each family's own name")
    sampler: Literal["curriculum", "uniform"] = Field(
        "curriculum", description="curriculum: tasks weighted by the chance their group is "
        "informative, from this run's difficulty ledger (tasks/curriculum.py); uniform: every "
        "training task equally likely (the baseline)")
    balance_families: bool = Field(
        True, description="curriculum: a family's tasks share one weight (the mean of theirs), "
        "so families with many tasks do not crowd out those with few (e.g. the "
        "verification-only ones); false: each task weighted alone")
    dynamic_sampling: bool = Field(
        True, description="DAPO (Yu et al. 2025, arXiv:2503.14476): leave groups whose G rewards "
        "are all equal (zero advantage) out of the update; their rows stay in the store")
    refill_rounds: int = Field(
        1, ge=0, description="extra sample-and-execute rounds per iteration that replace the "
        "groups dynamic sampling dropped with fresh tasks (0: never refill)")


class ClusterConfig(BaseModel):
    """Where rollouts execute: a local Dask cluster, or an existing scheduler's address."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(None, description="tcp://host:port of a running Dask scheduler; "
                                "None starts a LocalCluster")
    n_workers: int = Field(2, ge=1, description="LocalCluster worker processes")
    threads_per_worker: int = Field(1, ge=1, description="threads (concurrent sandboxes) per worker")
    shard_size: int = Field(64, ge=1, description="rollouts per Prefect task (one shard)")


class ThreadsConfig(BaseModel):
    """The CPU budget of a run. The flow's process runs the model (warm start, sampling, the
    one-rank update) with `torch` threads; the Dask workers run `cluster.n_workers x
    cluster.threads_per_worker` sandboxes at a time, in the rollout stages, between the
    model's stages; a trainer group's ranks share their host's cores (training/group.py)."""

    model_config = ConfigDict(extra="forbid")

    torch: int | Literal["auto"] = Field(
        "auto", description="torch threads of the flow's process: 'auto' takes the cores other "
        "processes leave free, measured before each model stage and during the long ones (at "
        "most OMP_NUM_THREADS when set), so a busy neighbour costs a core instead of stalling "
        "every op (training/threads.py); N: always N (the same float rounding on any load)")

    @field_validator("torch", mode="before")
    @classmethod
    def _torch(cls, v):
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"threads.torch={v!r}: expected a thread count >= 1 or 'auto'")


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str = Field("default", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                        description="folder name of the run under out_dir")
    out_dir: str = Field("runs", description="store root; the run writes to `<out_dir>/<run_id>/`")
    iterations: int = Field(8, ge=1, description="RL iterations (policy updates) in the run")
    eval_every: int = Field(4, ge=1, description="evaluate held-out tasks every N iterations "
                            "(and always before the first and after the last)")
    keep_checkpoints: int = Field(3, ge=1, description="policy checkpoints kept (plus v0, the SFT start)")
    resume_changed: bool = Field(False, description="resume this run although what it computes "
                                 "changed since it started (its finished iterations and v0 were "
                                 "made under the old config; the rows keep their config_hash). "
                                 "Off: such a resume is refused, naming the changed fields")
    seed: int = Field(0, description="seed of sampling, the warm start and the policy updates")
    # One section per stage; each stage receives only its own.
    tasks: TaskConfig = Field(TaskConfig(), description="generate_tasks: which problems, and "
                              "how each iteration draws them")
    cluster: ClusterConfig = Field(ClusterConfig(), description="run_rollouts: the Dask "
                                   "cluster the sandboxes run on")
    sandbox: SandboxConfig = Field(SandboxConfig(), description="run_rollouts: the sandbox "
                                   "backend and the limits of one execution")
    rewards: RewardConfig = Field(RewardConfig(), description="score: the reward's components "
                                  "and their weights")
    policy: PolicyConfig = Field(PolicyConfig(), description="the policy model: its shape, or "
                                 "a local Hugging Face model")
    sampling: SamplingConfig = Field(SamplingConfig(), description="sample_completions: group "
                                     "size, temperature, lengths")
    sft: SFTConfig = Field(SFTConfig(), description="sft_warm_start: the supervised warm start "
                           "before the first iteration")
    rl: RLConfig = Field(RLConfig(), description="update_policy: the RL algorithm, learning "
                         "rate, clipping, KL penalty, DeepSpeed")
    episodes: EpisodeConfig = Field(EpisodeConfig(), description="multi-turn agent episodes "
                                    "(off by default)")
    threads: ThreadsConfig = Field(ThreadsConfig(), description="the CPU budget: torch "
                                   "threads of the flow's process")
    tracking: list[TrackerName] = Field(
        default_factory=list, description="experiment trackers that also receive each "
        "iteration's metrics and the resolved config, offline, in files under the run's folder "
        "(flows/tracking.py): tensorboard, mlflow (a local file store), wandb (offline mode); "
        "[]: the run's registry and the Prefect artifacts only")

    @field_validator("tracking", mode="before")
    @classmethod
    def _tracking(cls, v):
        if isinstance(v, str):  # `--set tracking=tensorboard`: one tracker
            v = [v]
        if isinstance(v, list) and len(set(map(str, v))) < len(v):
            raise ValueError(f"tracking={v!r}: a tracker is named twice")
        return v

    @model_validator(mode="after")
    def _cross_checks(self) -> "RunConfig":
        if self.episodes.enabled and self.episodes.action_tokens >= self.policy.max_len:
            raise ValueError(f"episodes.action_tokens={self.episodes.action_tokens} leaves no room "
                             f"for the prompt in policy.max_len={self.policy.max_len}")
        if self.tasks.sources is not None and not self.tasks.sources:
            raise ValueError("tasks.sources is empty: give at least one source, or null for "
                             "the procedural suite")
        if self.rl.overlap and self.keep_checkpoints < 3:
            raise ValueError(f"rl.overlap needs keep_checkpoints >= 3 (got "
                             f"{self.keep_checkpoints}): iteration i samples with version i-1 "
                             "while version i+1 is being written, and a resumed run needs "
                             "the version before its first unfinished iteration")
        if self.policy.n_embd % self.policy.n_head:
            raise ValueError(f"policy.n_embd={self.policy.n_embd} must be divisible by "
                             f"policy.n_head={self.policy.n_head}")
        return self

    @property
    def run_dir(self) -> str:
        return f"{self.out_dir.rstrip('/')}/{self.run_id}"

    def computed(self) -> dict:
        """Everything that changes what the run computes (not where it writes, nor for how
        long): what `hash()` hashes and a resume compares."""
        # `cluster` says where rollouts execute, not what they compute: resuming on another
        # Dask cluster must reuse the finished stages.
        # `episodes` while off changes nothing: single-turn runs keep their hash.
        # `tracking` says where metrics are also sent, not what is computed.
        # `sandbox.fork_server` changes how fast executions start, not their results.
        # `tasks.function_name` unset and `tasks.sft_generic_names` 0 are how runs before they
        # existed worked: same hash.
        off = () if self.episodes.enabled else ("episodes",)
        d = self.model_dump(mode="json", exclude={"out_dir", "iterations", "eval_every",
                                                   "keep_checkpoints", "cluster",
                                                   "resume_changed", "tracking", *off})
        d["sandbox"].pop("fork_server", None)
        if d["tasks"].get("function_name") is None:
            d["tasks"].pop("function_name", None)
        if not d["tasks"].get("sft_generic_names"):
            d["tasks"].pop("sft_generic_names", None)
        if d["tasks"].get("sources") is None:  # the implicit source: as before sources existed
            d["tasks"].pop("sources", None)
        # `rl.processes` says on how many ranks the update runs, not what it computes (the same
        # step within float rounding): a run moved to more ranks resumes its finished stages.
        d["rl"].pop("processes", None)
        d["rl"].pop("placement", None)
        # How many threads compute a step changes its float rounding only, like the rank count.
        d.pop("threads", None)
        # Which engine samples changes the samples; where it runs and how it batches do not,
        # and the local sampler (the default) is how runs before engines existed sampled.
        for k in ("engine_url", "engine_threads", "engine_kv_cache_gib", "engine_max_num_seqs",
                  "engine_lora_sync", "engine_full_sync"):
            d["sampling"].pop(k, None)
        if d["sampling"].get("engine") == "local":
            d["sampling"].pop("engine", None)
        # When each episode's turn is requested changes the order of the work, not what an
        # episode is drawn from.
        d["sampling"].pop("turns", None)
        d["rl"].pop("logprob_gap_warn", None)  # when to warn, not what is computed
        # `rl.replay_coef` 0 (off) is how runs before it existed worked: same hash.
        if not d["rl"].get("replay_coef"):
            d["rl"].pop("replay_coef", None)
            d["rl"].pop("replay_per_step", None)
        # A warm start of a fixed length (no `sft.until_pass`) is how runs before the
        # criterion existed worked: same hash.
        if d["sft"].get("until_pass") is None:
            for k in ("until_pass", "probe_tasks", "probe_every", "decay_steps",
                      "probe_generic_names"):
                d["sft"].pop(k, None)
        _pop_later_options_at_defaults(d)
        return d

    def hash(self) -> str:
        """12 hex digits of `computed()`: in the stages' cache keys, on every row, in `runs`."""
        return hashlib.sha256(json.dumps(self.computed(), sort_keys=True).encode()).hexdigest()[:12]


def _pop_later_options_at_defaults(d: dict) -> None:
    """Leave out of `d` (a computed config) the options added after runs existed while they are
    at their defaults: those runs computed exactly that, so they keep their hash."""
    # A probe that may hold generic-named tasks is how runs before the choice worked.
    _pop_defaults(d["sft"], SFTConfig, ("probe_generic_names",))
    _pop_defaults(d["sft"], SFTConfig, ("dataset",))  # the sources' references, as before
    # LoRA, gradient checkpointing and autocast at their defaults (off, none) are how runs before
    # them worked: same hash.
    _pop_defaults(d["policy"], PolicyConfig, ("lora_rank", "lora_alpha", "lora_dropout",
                                              "lora_targets", "gradient_checkpointing"))
    _pop_defaults(d["rl"], RLConfig, ("autocast",))
    # Overlap off, episode credit and no gateway rows are how runs before them worked:
    # same hash.
    _pop_defaults(d["rl"], RLConfig, ("overlap", "off_policy_is_cap"))
    _pop_defaults(d["rl"], RLConfig, ("turn_credit", "turn_credit_coef"))
    _pop_defaults(d["rl"], RLConfig, ("gateway_rows", "gateway_max_lag"))


def _pop_defaults(section: dict, model, names: tuple[str, ...]) -> None:
    """Leave the fields `names` out of `section` while every one is at its default."""
    defaults = model().model_dump(mode="json")
    if all(section.get(n) == defaults[n] for n in names):
        for n in names:
            section.pop(n, None)


class ConfigError(ValueError):
    """A config that does not validate; the message names every bad field."""


def format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(config)"
        got = e.get("input")
        got_s = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{loc}: {e['msg']}{got_s}")
    return "invalid config:\n  " + "\n  ".join(lines)


def set_dotted(d: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    cur = d
    for p in parts[:-1]:
        nxt = cur.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: {p!r} is not a section")
        cur = nxt
    cur[parts[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_.]*)=(.*)", item, re.S)
    if not m:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set rl.lr=1e-4")
    try:
        value = yaml.safe_load(m.group(2)) if m.group(2) != "" else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {item!r}: value is not valid YAML: {exc}") from None
    return m.group(1), value


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """Load YAML (default: configs/default.yaml), apply `key=value` overrides, validate."""
    path = Path(path) if path else DEFAULT_CONFIG
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping, got {type(raw).__name__}")
    for item in overrides:
        key, value = parse_override(item)
        set_dotted(raw, key, value)
    return validate_config(raw)


def validate_config(raw: dict) -> RunConfig:
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_errors(err)) from None
    from envs.base import EnvError  # noqa: PLC0415
    from envs.io.procedural import FAMILIES  # noqa: PLC0415
    from envs.sources import build_pool  # noqa: PLC0415

    missing = unavailable(cfg.tracking)  # before a run starts, not at its first iteration's end
    if missing:
        raise ConfigError("\n".join(missing))
    unknown = sorted(set(cfg.tasks.families) - set(FAMILIES))
    if unknown:
        raise ConfigError(f"tasks.families: unknown {unknown}; expected some of {sorted(FAMILIES)}")
    try:  # every source loads (kinds import, options and records validate) before a run starts
        pool = build_pool(task_sources(cfg))
    except EnvError as exc:
        raise ConfigError(str(exc)) from None
    if not any(t.split == "train" for t in pool):
        raise ConfigError("tasks: the sources hold no training tasks")
    check_prompts_fit(cfg, pool)
    return cfg


def check_prompts_fit(cfg: RunConfig, pool) -> None:
    """Refuse a pool whose longest first observation leaves no room for an action in
    policy.max_len (the run would stop at its first turn on that task), measured in the
    policy's own tokens as the loop renders its prompts (flows/episodes.py `first_misfit`):
    the byte tokenizer's, or a pretrained model's where its folder is there already (a known
    model not converted yet, or a .gguf file, is measured when the run plays)."""
    from envs.registry import env_for_task  # noqa: PLC0415

    tok = _policy_tokenizer(cfg)
    if tok is None:
        return
    from flows.episodes import first_misfit  # noqa: PLC0415

    played_by = {s.label: s.environment() for s in task_sources(cfg)}
    misfit = first_misfit(list(pool), [played_by.get(t.source) or env_for_task(t) for t in pool],
                          cfg.policy.max_len, tok, cfg.sampling.max_new_tokens)
    if misfit is not None:
        t, need, action = misfit
        raise ConfigError(f"policy.max_len={cfg.policy.max_len}: task {t.task_id} of source "
                          f"{t.source!r} needs {need} tokens (its prompt and an action of "
                          f"{action}); raise policy.max_len or leave the task out")


def _policy_tokenizer(cfg: RunConfig):
    """The tokenizer the run's policy will have, where it can be had without converting or
    loading a model; None otherwise."""
    from training.tokenizer import ByteTokenizer, load_tokenizer  # noqa: PLC0415

    path = cfg.policy.model_path
    if path is None:
        return ByteTokenizer()
    from training import pretrained  # noqa: PLC0415

    folder = pretrained.converted_dir(path) if pretrained.is_known(path) else Path(path)
    if not folder.is_dir() or (pretrained.is_known(path)
                               and not (folder / pretrained.MODEL_FILE).is_file()):
        return None
    return load_tokenizer(str(folder), chat_template=cfg.policy.chat_template)


def task_sources(cfg: RunConfig) -> list[SourceConfig]:
    """The run's sources: `tasks.sources`, or the implicit procedural one."""
    if cfg.tasks.sources is not None:
        return list(cfg.tasks.sources)
    t = cfg.tasks
    procedural = dict(families=t.families, difficulties=t.difficulties,
                      tasks_per_family=t.tasks_per_family, n_tests=t.n_tests,
                      heldout_fraction=t.heldout_fraction, seed=t.seed,
                      function_name=t.function_name, sft_variants=t.sft_variants,
                      sft_generic_names=t.sft_generic_names)
    if cfg.episodes.enabled:
        options = {**cfg.episodes.model_dump(mode="json"), "procedural": procedural}
        return [SourceConfig(name="procedural", kind="agent", options=options)]
    return [SourceConfig(name="procedural", kind="io", options=procedural)]
