"""The policy and its training: model shape, sampling, SFT warm start, RL update, DeepSpeed.

Every field added after the first loop is opt-in: its default keeps the loop's original choices
(byte-level GPT-2, GRPO, `seq_mean`). The step is the mean over the whole iteration's samples,
zero-advantage ones included, whatever the micro-batch split (training/rl_steps.py `_units`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class PolicyConfig(BaseModel):
    """The default policy is a small GPT-2-shaped causal LM over bytes, built from a config.
    With `model_path` set, any local Hugging Face causal LM (and its tokenizer) is used instead,
    and the shape fields (n_layer, n_embd, n_head) are ignored."""

    model_config = ConfigDict(extra="forbid")

    n_layer: int = Field(4, ge=1, description="transformer blocks")
    n_embd: int = Field(192, ge=16, description="hidden size")
    n_head: int = Field(6, ge=1, description="attention heads (must divide n_embd)")
    max_len: int = Field(320, ge=32, description="longest prompt + completion, in tokens")
    seed: int = Field(0, description="initial weights")
    model_path: str | None = Field(
        None, description="local Hugging Face model directory (AutoModelForCausalLM + its "
        "tokenizer), or a .gguf file (loaded through transformers' `gguf_file`); None: the tiny "
        "byte-level GPT-2 built from the fields above. Never downloaded: local files only.")
    chat_template: bool | str = Field(
        True, description="wrap prompts in the tokenizer's chat template (one user turn plus the "
        "generation prompt) when the tokenizer has one; the byte tokenizer has none. A path: a "
        "Jinja chat template file used instead of the tokenizer's own (e.g. "
        "configs/chat_templates/qwen3.jinja); checkpoints and exports then carry it")
    lora_rank: int = Field(
        0, ge=0, description="rank r of LoRA adapters (Hu et al. 2021, through peft) trained "
        "instead of the whole model; checkpoints then hold the adapter, the KL reference is the "
        "base with the adapters disabled (no second copy), and `rollforge export` merges it. "
        "0: full fine-tuning")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA scale: the update is B A * alpha / r")
    lora_dropout: float = Field(
        0.0, ge=0, lt=1, description="dropout on the LoRA input; 0 keeps the update's "
        "importance ratio exactly 1 on-policy (dropout would make it noise)")
    lora_targets: list[str] = Field(
        default_factory=lambda: ["all-linear"], min_length=1,
        description="module names the adapters wrap (e.g. q_proj, v_proj); ['all-linear']: "
        "every linear layer but the output head (QLoRA's choice, Dettmers et al. 2023)")
    gradient_checkpointing: bool = Field(
        False, description="recompute each block's activations in the backward pass instead of "
        "keeping them (less memory, about a third more compute); Hugging Face models only")

    @model_validator(mode="after")
    def _template_file(self):
        if isinstance(self.chat_template, str):
            if self.model_path is None:
                raise ValueError(f"policy.chat_template={self.chat_template!r} needs a policy with a "
                                 "Hugging Face tokenizer (policy.model_path); the byte-level "
                                 "default has no chat")
            if not Path(self.chat_template).is_file():
                raise ValueError(f"policy.chat_template={self.chat_template!r}: no such file (a "
                                 "Jinja chat template; a relative path is read from the working "
                                 "directory)")
        return self


class SamplingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_size: int = Field(8, ge=2, description="G: completions sampled per task (GRPO group)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of rollouts")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass")
    max_new_tokens: int = Field(48, ge=1, description="longest completion, in tokens")
    batch_size: int = Field(64, ge=1, description="sequences generated together")
    stop: list[str] = Field(default_factory=list, description="stop sequences: a completion ends "
                            "at the token that completes one (its text is cut before it)")
    engine: Literal["local", "vllm"] = Field(
        "local", description="who samples: `local`, the policy in the flow's own process "
        "(training/generate.py's KV-cache loop; the tiny byte-level default's engine); `vllm`, a "
        "vLLM server (engine/: `make engine` builds it) that the run starts once on loopback, "
        "syncs to each new version (LoRA adapters loaded by version, full weights per "
        "`engine_full_sync`) "
        "and stops at its end, or the one at `engine_url`. Hugging Face policies only")
    engine_url: str | None = Field(
        None, description="a vLLM server already running (http://host:port) of this run's "
        "architecture and tokenizer: rollforge neither starts, restarts nor stops it. A LoRA "
        "policy's versions are loaded into it as adapters (it serves the base, started with "
        "--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1); full weights (and "
        "engine_lora_sync: merged) in place, as `engine_full_sync: in_place` does (it was "
        "started with VLLM_SERVER_DEV_MODE=1; its first load is taken on the server's word, "
        "later ones checked by the probe). Either way a version's folder must be readable at the "
        "same path there, and a server taking full weights serves one run at a time. None: "
        "rollforge runs its own")
    engine_threads: int | None = Field(
        None, ge=1, description="OpenMP threads of the managed vLLM server's forward pass; None: "
        "the run's `threads.torch` budget (the server and the flow's torch take turns: one samples "
        "while the other waits)")
    engine_lora_sync: Literal["merged", "adapter"] | None = Field(
        None, description="how a LoRA policy's new version reaches the vLLM server: `merged`, "
        "the adapter folded into the base (as `rollforge export` does) and that folder synced as "
        "full weights are (`engine_full_sync`); `adapter`, the adapter loaded into the running server by name (a tenth of a "
        "second, no restart, but vLLM's CPU build decodes through an adapter 3.3x slower: 54.5 "
        "against 181.6 tokens/s, bench/bench_engine.py). None: `merged` for a server rollforge "
        "runs, `adapter` for one at engine_url (which other runs may share)")
    engine_full_sync: Literal["auto", "in_place", "restart"] = Field(
        "auto", description="how full weights (and a merged LoRA version) reach the managed vLLM "
        "server: `in_place`, the version's folder loaded into the running server (vLLM's "
        "reload_weights through /collective_rpc, the server started with "
        "VLLM_SERVER_DEV_MODE=1; its prefix cache reset), checked by the server's log-probs of "
        "a fixed probe changing, and a failure fails the stage; `restart`, the server restarted "
        "on the folder (80-105 s against 1.5-6 s in place for SmolLM2-135M on a 2-core CPU, "
        "docs/benchmarks.md); "
        "`auto`, in place with a restart (logged, engine/sync_fallbacks) when the load fails, "
        "and for a server at engine_url (which cannot be restarted) `in_place`")
    turns: Literal["auto", "per_episode", "synchronous"] = Field(
        "auto", description="how multi-turn episodes take turns (flows/episodes.py `play`): "
        "`per_episode`, each episode's next action is requested as soon as its own step "
        "returned (a slow step holds up its episode only; every request ready at once goes out "
        "together); `synchronous`, every live episode samples, then every one steps, turn by "
        "turn. `auto`: per_episode for an engine, synchronous for the local sampler, whose "
        "seeded batches would otherwise depend on when steps return. Single-turn kinds are the "
        "same under both")
    engine_kv_cache_gib: int = Field(4, ge=1, description="the managed server's KV-cache memory, GiB")
    engine_max_num_seqs: int = Field(64, ge=1, description="sequences the managed server decodes "
                                     "together (continuous batching)")

    @model_validator(mode="after")
    def _engine_url_needs_vllm(self):
        if self.engine_url is not None and self.engine != "vllm":
            raise ValueError(f"sampling.engine_url is set ({self.engine_url}) but sampling.engine "
                             f"is {self.engine!r}: set sampling.engine: vllm to use it")
        if self.engine_url is not None and self.engine_full_sync == "restart":
            raise ValueError("sampling.engine_full_sync=restart restarts the server on each "
                             "version; a server at sampling.engine_url is not rollforge's to "
                             "restart: leave engine_full_sync at auto (in place) or use a LoRA "
                             "policy's adapters (engine_lora_sync: adapter)")
        if self.engine_url is not None and not self.engine_url.startswith(("http://", "https://")):
            raise ValueError(f"sampling.engine_url={self.engine_url!r}: expected http://host:port")
        return self


class SFTConfig(BaseModel):
    """Supervised warm start on reference solutions of the training split."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(600, ge=0, description="optimizer steps (0: no warm start)")
    batch_size: int = Field(32, ge=1, description="(prompt, reference) pairs per step")
    lr: float = Field(2e-3, gt=0, description="peak learning rate (linear warm-up, then linear "
                      "decay to 10%)")
    warmup_steps: int = Field(50, ge=0, description="steps of linear warm-up to lr")
    save_every: int = Field(0, ge=0, description="save resumable engine state (model, optimizer, "
                            "scheduler, RNG) every N steps, so a crashed warm start resumes at the "
                            "last save with the same next step; 0: never")
    until_pass: float | None = Field(
        None, gt=0, le=1, description="train until a criterion instead of a fixed schedule: hold "
        "the peak lr until the greedy pass rate on the probe tasks reaches this, then decay "
        "linearly to 10% over `decay_steps` and stop; `steps` is then the most it may take (the "
        "decay starts at `steps - decay_steps` at the latest, criterion met or not). Needs a "
        "single-turn source with references (the probe is graded in the sandbox like any "
        "rollout). None: warm-up and linear decay over exactly `steps`")
    probe_tasks: int = Field(64, ge=1, description="with until_pass: training tasks with a "
                             "reference withheld from the warm start's data (the first by a hash "
                             "of their id) whose greedy pass rate is the criterion; never a "
                             "held-out task")
    probe_every: int = Field(100, ge=1, description="with until_pass: steps between probes")
    probe_generic_names: bool = Field(
        True, description="with until_pass: may the probe hold demonstrations shown under a "
        "generic function name (`tasks.sft_generic_names`)? False: only tasks under their "
        "family's own name, so the criterion says whether the warm start has learned the "
        "families it has references for, not how far it carries over to names it does not know")
    decay_steps: int = Field(300, ge=1, description="with until_pass: steps of linear decay "
                             "after the criterion is met")
    dataset: str | None = Field(
        None, description="the warm start's data from a dataset written by `rollforge data "
        "export` (its folder, or one of its .parquet/.jsonl files): the train split's user and "
        "assistant messages as (prompt, reference) pairs, instead of the sources' references "
        "(rejection sampling: the next round trains on verified successes); examples of tasks "
        "this run holds out or probes are left out. None: the sources' references")

    @model_validator(mode="after")
    def _criterion_fits(self) -> "SFTConfig":
        if self.steps == 0:
            # no warm start: no criterion to train towards, so `--set sft.steps=0` alone turns
            # it off whatever the config's until_pass (the same config as with until_pass: null)
            self.until_pass = None
        if self.until_pass is not None and self.decay_steps >= self.steps:
            raise ValueError(f"sft.decay_steps={self.decay_steps} must be less than "
                             f"sft.steps={self.steps} (the most steps with until_pass)")
        return self


class RLConfig(BaseModel):
    """GRPO (Shao et al. 2024): group-normalised advantages, PPO-clipped ratio (Schulman 2017)."""

    model_config = ConfigDict(extra="forbid")

    algorithm: Literal["grpo", "ppo", "rloo"] = Field(
        "grpo", description="grpo: the advantages given with the samples (group-normalised by the "
        "flow) in the clipped surrogate; ppo: GRPO with dual clip, i.e. the same group "
        "advantages (there is no value head and the flow gives no per-token advantages) in the "
        "clipped surrogate, bounded by `dual_clip` (Ye et al. 2020) if set; per-token advantages "
        "are used only where a caller of the trainer puts them on the samples; rloo: advantages "
        "recomputed from the samples' rewards with a leave-one-out group baseline (Ahmadian et al. "
        "2024), then the clipped surrogate. The estimator each selects: "
        "rewards/advantages.py `estimator_for`")
    lr: float = Field(3e-4, gt=0, description="learning rate of the RL update (see lr_schedule)")
    lr_schedule: Literal["constant", "inherit"] = Field(
        "constant", description="constant: `lr` for every RL step; inherit: keep the learning "
        "rate restored with the optimizer state from the checkpoint being updated (after SFT, the "
        "warm start's final lr) and ignore `lr`")
    epochs: int = Field(2, ge=1, description="passes over each iteration's rollouts")
    micro_batch_size: int = Field(32, ge=1, description="sequences per forward/backward")
    micro_batch_tokens: int | None = Field(
        None, ge=1, description="token budget of a micro-batch (rows x longest row, padding "
        "included); sequences are packed longest-first and each micro-batch is weighted so the "
        "step equals the full-batch mean. None: micro_batch_size sequences per micro-batch, "
        "weighted the same way (the step is the full-batch mean, whatever the split)")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range of the importance ratio")
    clip_eps_high: float | None = Field(
        None, gt=0, description="upper clip range (DAPO's clip-higher, Yu et al. 2025); None: clip_eps")
    dual_clip: float | None = Field(
        None, gt=1, description="ppo only: bound -c*A on the loss of negative-advantage tokens "
        "(dual-clip PPO, Ye et al. 2020); None: off")
    loss_aggregation: Literal["seq_mean", "token_mean", "seq_sum_norm"] = Field(
        "seq_mean", description="seq_mean: mean over each sequence's tokens, then over sequences "
        "(GRPO paper); token_mean: one mean over all tokens (DAPO); seq_sum_norm: each sequence's "
        "token sum over a constant (policy.max_len), then the mean over sequences (Dr.GRPO, "
        "Liu et al. 2025: no length normalisation per sequence). Every sample of the iteration "
        "counts, zero-advantage ones included, in the mean and in the KL term")
    kl_coef: float = Field(0.0, ge=0, description="beta of a KL penalty to the frozen reference "
                           "policy (checkpoint version 0, the SFT start); 0: off, none loaded")
    replay_coef: float = Field(0.0, ge=0, description="weight of a replay loss added to every "
                               "RL micro-batch: the SFT loss (token NLL) of reference solutions "
                               "of training-split tasks (InstructGPT's PPO-ptx, Ouyang et al. "
                               "2022), so the families with references keep what the warm start "
                               "taught them while the reward moves the policy; 0: off")
    replay_per_step: int = Field(8, ge=1, description="reference examples drawn per micro-batch "
                                 "for the replay loss")
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="per-token KL estimator (Schulman 2020): k1 = log r, k2 = (log r)^2/2, "
        "k3 = r - 1 - log r with r = p_ref/p (unbiased, non-negative; GRPO paper)")
    grad_clip: float = Field(1.0, gt=0, description="max global grad norm")
    scale_advantages: bool = Field(
        True, description="grpo and ppo: divide by the group's std (GRPO); False: only subtract "
        "its mean (Dr.GRPO, Liu et al. 2025). rloo has its own baseline and takes True only")
    turn_credit: Literal["episode", "progress"] = Field(
        "episode", description="how a multi-turn episode's advantage is split over its turns: "
        "episode, every policy token gets the episode's; progress, turn t's tokens get the "
        "episode's minus turn_credit_coef x Phi_t, Phi_t the best progress (visible tests "
        "passed, a fraction) any earlier turn showed: potential-based shaping with a zero "
        "terminal potential, so the episode's total stays the verified reward and the expected "
        "update is unchanged whatever the turn counts (rewards/advantages.py "
        "`turn_advantages`). grpo and ppo only")
    turn_credit_coef: float = Field(
        0.5, ge=0, description="progress: the weight of Phi_t, in the advantages' units (group "
        "std units when scale_advantages)")
    gateway_rows: bool = Field(
        False, description="each iteration's update also trains on the episodes outside "
        "clients played through the run's gateway (`rollforge gateway --episodes`, stored in "
        "`<out_dir>/<run_id>-gateway`) with the version the iteration samples with, or up to "
        "gateway_max_lag versions before, that no earlier iteration took; which ones is "
        "recorded before the update (`<run_dir>/gateway_takes`), so a resumed iteration takes "
        "the same (gateway/train.py `loop_rows`)")
    gateway_max_lag: int = Field(
        1, ge=0, description="gateway_rows: the oldest policy version taken, in versions before "
        "the one the iteration samples with (off-policy rows; the update's truncated importance "
        "weights, off_policy_is_cap, correct them)")
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="DeepSpeed ZeRO stage")
    dtype: Literal["fp32", "bf16"] = Field("fp32", description="training precision")
    autocast: Literal["none", "bf16"] = Field(
        "none", description="bf16: the forward passes of the update run under torch.autocast in "
        "bfloat16 while weights, gradients and optimizer stay fp32 (rl.dtype fp32); on a CPU "
        "with AMX about twice as fast (bench/bench_real_model.py). Applied only where the device "
        "has bf16 units (AVX512/AMX, CUDA compute capability 8+): emulated, it was 49x slower "
        "than fp32, so there the forward stays fp32, warned (train/autocast_bf16). none: as "
        "rl.dtype says")

    processes: int | Literal["gpus"] = Field(
        1, description="ranks of the update (data-parallel, gloo on CPU, NCCL on GPUs, one GPU a "
        "rank): 1 runs it in the flow's process; N > 1 on a resident group of N local processes "
        "that stay up between iterations (training/group.py); 'gpus': one rank per local CUDA "
        "device (1 without one; with rl.placement 'dask', of every host of the cluster). The "
        "step is the same whatever the count (within float rounding; replay draws differ per "
        "rank)")
    placement: Literal["local", "dask"] = Field(
        "local", description="where the ranks run: 'local', child processes of the flow on this "
        "machine; 'dask', processes started on the workers of the run's Dask cluster (the "
        "rollouts' cluster: several nodes with `cluster.address`), spread evenly over them; the "
        "run folder must then be on storage every host sees")

    overlap: bool = Field(
        False, description="sample iteration i+1 while iteration i's update runs (one-step "
        "off-policy, as verl's one-step-off and AReaL): iteration i samples with version i-1 "
        "(iteration 0 with v0) and its update starts from version i, correcting for the "
        "staleness with the decoupled PPO objective (AReaL, Fu et al. 2025): the ratio is taken "
        "against the update's starting weights and each token weighted by pi_start/pi_sampler, "
        "truncated at off_policy_is_cap. The update runs in a resident trainer process beside "
        "the sampler, each on half the cores (training/group.py); needs keep_checkpoints >= 3")
    logprob_gap_warn: float = Field(
        0.05, gt=0, description="the run warns when an update's mean |sampler - trainer| "
        "log-prob gap on the same tokens (train/logprob_gap_mean, nats) is over this: the "
        "sampler and the trainer no longer compute the same policy")
    off_policy_is_cap: float = Field(
        2.0, ge=1, description="upper bound of the per-token importance weight "
        "pi_start/pi_sampler of samples drawn by an older version (rl.overlap) or by "
        "another engine (sampling.engine: vllm) (truncated importance sampling); unused when "
        "the update's own weights sampled in this process")

    @field_validator("processes", mode="before")
    @classmethod
    def _processes(cls, v):
        if v == "gpus" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"rl.processes={v!r}: expected a rank count >= 1 or 'gpus'")

    @model_validator(mode="after")
    def _cross_checks(self) -> "RLConfig":
        if self.dual_clip is not None and self.algorithm != "ppo":
            raise ValueError(f"rl.dual_clip={self.dual_clip} applies to rl.algorithm='ppo' only "
                             f"(got algorithm={self.algorithm!r})")
        if self.autocast == "bf16" and self.dtype == "bf16":
            raise ValueError("rl.autocast='bf16' autocasts an fp32 model; with rl.dtype='bf16' "
                             "the model is bf16 already: set one of them")
        if self.turn_credit != "episode" and self.algorithm == "rloo":
            raise ValueError(f"rl.turn_credit={self.turn_credit!r} applies to rl.algorithm 'grpo' "
                             "or 'ppo'; 'rloo' recomputes one advantage per sample in the trainer")
        if not self.scale_advantages and self.algorithm == "rloo":
            raise ValueError("rl.scale_advantages=False (Dr.GRPO) applies to rl.algorithm 'grpo' "
                             "or 'ppo'; 'rloo' uses its leave-one-out baseline, never scaled")
        return self
