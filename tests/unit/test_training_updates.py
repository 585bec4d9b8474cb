"""The RL update through a real DeepSpeed engine (one process, gloo, CPU); the warm start's own
tests: test_training_warm_start.py."""
import dataclasses
import json
import math
import random
import shutil

import pytest
import torch

from training import checkpoints
from training.config import RLConfig, SFTConfig
from training.policy import load_policy
from training.trainer import RLSample, grpo_update, sft_warm_start
from training_common import POLICY, PROMPTS, REFS, max_diff, weights

def _samples(n=10, seed=1):
    r = random.Random(seed)
    out = []
    for i in range(n):
        p = [257] + [r.randrange(32, 127) for _ in range(r.randrange(3, 9))]
        c = [r.randrange(32, 127) for _ in range(r.randrange(2, 14))]
        out.append(RLSample(p, c, [-r.uniform(2, 6) for _ in c], r.choice([-1.0, 1.0]) * r.random(),
                            reward=float(r.randrange(2)), group_id=i // 5))
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    run = tmp_path_factory.mktemp("base") / "run"
    sft_warm_start(str(run), PROMPTS, REFS, POLICY, SFTConfig(steps=3, batch_size=4, warmup_steps=1),
                   RLConfig(), 0)
    return run


def _copy(base, tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(base, dst)
    return str(dst)


def test_token_budget_micro_batches_give_the_same_step_as_one_micro_batch(base, tmp_path):
    a, b = _copy(base, tmp_path, "a"), _copy(base, tmp_path, "b")
    small = grpo_update(a, 0, _samples(), POLICY, RLConfig(micro_batch_tokens=40), 1.0, 0)
    grpo_update(b, 0, _samples(), POLICY, RLConfig(micro_batch_tokens=10_000), 1.0, 0)
    assert small["train/micro_steps"] > 2 * 1  # several micro-batches per step (2 epochs)
    assert max_diff(weights(a, 1), weights(b, 1)) < 1e-6
    assert max_diff(weights(a, 1), weights(a, 0)) > 1e-4  # and the step did move the weights


def test_one_process_micro_batches_give_the_same_step_as_one_micro_batch(base, tmp_path):
    # 10 samples in micro-batches of 3 (3, 3, 3, 1): the last one must not count 3x per sample.
    a, b = _copy(base, tmp_path, "a"), _copy(base, tmp_path, "b")
    small = grpo_update(a, 0, _samples(), POLICY, RLConfig(micro_batch_size=3), 1.0, 0)
    grpo_update(b, 0, _samples(), POLICY, RLConfig(micro_batch_size=64), 1.0, 0)
    assert small["train/micro_steps"] == 2 * 4
    assert max_diff(weights(a, 1), weights(b, 1)) < 1e-6
    assert max_diff(weights(a, 1), weights(a, 0)) > 1e-4


def test_one_plain_rank_skips_deepspeeds_gradient_all_reduce_and_steps_the_same(
        base, tmp_path, monkeypatch):
    """The all-reduce over one rank changes no bit: the update without it publishes the same
    weights and optimizer state as the update with it, micro-batches accumulated or not."""
    from training import engine as eng

    seen = []
    real = eng.lone_plain_rank
    monkeypatch.setattr(eng, "lone_plain_rank", lambda e: seen.append(real(e)) or seen[-1])
    a, b = _copy(base, tmp_path, "a"), _copy(base, tmp_path, "b")
    rl = RLConfig(micro_batch_size=3)
    grpo_update(a, 0, _samples(), POLICY, rl, 1.0, 0)
    assert seen == [True]
    monkeypatch.setattr(eng, "lone_plain_rank", lambda e: False)  # DeepSpeed's own path
    grpo_update(b, 0, _samples(), POLICY, rl, 1.0, 0)
    wa, wb = weights(a, 1), weights(b, 1)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert max_diff(wa, weights(a, 0)) > 1e-4
    sa, sb = (torch.load(checkpoints.checkpoint_dir(r, 1) / "engine" / "state" /
                         "mp_rank_00_model_states.pt", weights_only=False)["optimizer"]["state"]
              for r in (a, b))
    assert sa.keys() == sb.keys() and all(
        torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])


def test_lr_inherit_keeps_the_warm_starts_last_lr_and_constant_uses_rl_lr(base, tmp_path):
    a, b = _copy(base, tmp_path, "a"), _copy(base, tmp_path, "b")
    inherit = grpo_update(a, 0, _samples(), POLICY, RLConfig(lr=1e-3, lr_schedule="inherit"), 1.0, 0)
    const = grpo_update(b, 0, _samples(), POLICY, RLConfig(lr=1e-3), 1.0, 0)  # the default
    # SFT lr 2e-3, warmup 1, 3 steps: its last step (index 2) ran at 2e-3 * (1 - 0.9 * 1/2)
    assert inherit["train/lr"] == pytest.approx(2e-3 * 0.55)
    assert const["train/lr"] == pytest.approx(1e-3)


def test_kl_to_the_reference_is_zero_at_the_reference_and_positive_after_it_moved(base, tmp_path):
    run = _copy(base, tmp_path, "kl")
    rl = RLConfig(kl_coef=0.5, epochs=1, micro_batch_size=64, lr_schedule="constant", lr=5e-3)
    first = grpo_update(run, 0, _samples(), POLICY, rl, 1.0, 0)
    second = grpo_update(run, 1, _samples(seed=2), POLICY, rl, 1.0, 0)
    assert first["train/kl"] == 0.0
    assert second["train/kl"] > 0.0


def test_rloo_recomputes_advantages_from_rewards_and_needs_group_ids(base, tmp_path):
    run = _copy(base, tmp_path, "rloo")
    samples = _samples()  # rewards 0/1 in groups of 5: LOO advantages are non-zero unless uniform
    out = grpo_update(run, 0, samples, POLICY, RLConfig(algorithm="rloo"), 1.0, 0)
    assert json.loads((checkpoints.checkpoint_dir(run, 1) / "meta.json").read_text())["kind"] == "rloo"
    by_group = {}
    for s in samples:
        by_group.setdefault(s.group_id, set()).add(s.reward)
    expected = sum(1 for s in samples if len(by_group[s.group_id]) > 1)
    assert out["train/sequences"] == expected
    broken = [RLSample(s.prompt_ids, s.completion_ids, s.old_logprobs, 1.0) for s in samples]
    with pytest.raises(ValueError, match="group_id"):
        grpo_update(run, 1, broken, POLICY, RLConfig(algorithm="rloo"), 1.0, 0)


def _units(s, how):
    return len(s.completion_ids) if how == "token_mean" else 1  # short enough: no truncation


@pytest.mark.parametrize("how", ["seq_mean", "token_mean", "seq_sum_norm"])
def test_zero_advantage_samples_count_in_the_normaliser_of_every_loss_type(base, tmp_path, how):
    # With B's advantage 0, the loss over {A, B} is A's loss times A's share of the normaliser
    # (1/2 sequences, or A's tokens over all tokens); the loss is linear in A's advantage, so
    # it equals the loss of A alone with its advantage scaled by that share. The replay term,
    # added per micro-batch, makes the scale visible through Adam.
    a_, b_ = _samples(2)
    b_ = dataclasses.replace(b_, advantage=0.0)
    share = _units(a_, how) / (_units(a_, how) + _units(b_, how))
    rl = RLConfig(loss_aggregation=how, replay_coef=1.0, replay_per_step=2, micro_batch_size=64)
    both, alone = _copy(base, tmp_path, "both"), _copy(base, tmp_path, "alone")
    grpo_update(both, 0, [a_, b_], POLICY, rl, 1.0, 0, list(zip(PROMPTS, REFS)))
    scaled = dataclasses.replace(a_, advantage=a_.advantage * share)
    grpo_update(alone, 0, [scaled], POLICY, rl, 1.0, 0, list(zip(PROMPTS, REFS)))
    assert max_diff(weights(both, 1), weights(alone, 1)) < 1e-6


def test_zero_advantage_samples_still_feel_the_kl_term(base, tmp_path):
    run = _copy(base, tmp_path, "kl0")
    rl = RLConfig(kl_coef=0.5, epochs=1, micro_batch_size=64, lr=5e-3)
    grpo_update(run, 0, _samples(), POLICY, rl, 1.0, 0)  # move away from the reference
    flat = [dataclasses.replace(s, advantage=0.0) for s in _samples(seed=2)]
    out = grpo_update(run, 1, flat, POLICY, rl, 1.0, 0)
    assert out["train/kl"] > 0.0
    assert max_diff(weights(run, 2), weights(run, 1)) > 1e-5  # pulled back towards v0


@pytest.mark.parametrize("stage, dtype", [(1, "fp32"), (2, "bf16"), (3, "fp32")])
def test_zero_stages_update_resume_and_export_their_weights(tmp_path, stage, dtype):
    from training.export import export_checkpoint

    run = str(tmp_path / "run")
    rl = RLConfig(zero_stage=stage, dtype=dtype, micro_batch_size=4)
    sft_warm_start(run, PROMPTS, REFS, POLICY, SFTConfig(steps=2, batch_size=4), rl, 0)
    out = grpo_update(run, 0, _samples(), POLICY, rl, 1.0, 0)
    assert out["train/optimizer_restored"] == 1 and math.isfinite(out["train/loss"])
    w0, w1 = weights(run, 0), weights(run, 1)
    assert max_diff(w1, w0) > 0
    exported = export_checkpoint(run, "latest", str(tmp_path / "hf"), from_engine=True)
    from transformers import AutoModelForCausalLM

    fp32 = AutoModelForCausalLM.from_pretrained(str(exported)).state_dict()
    assert next(iter(fp32.values())).dtype == torch.float32
    assert max_diff(fp32, w1) <= (1e-2 if dtype == "bf16" else 0.0)  # bf16 rounding only


def _fake_version(run, v):
    stage = checkpoints.staging_dir(run, v)
    checkpoints.publish(stage, checkpoints.checkpoint_dir(run, v), {"version": v})


def test_prune_keeps_the_last_k_and_the_best_scored_version(tmp_path):
    run = str(tmp_path / "run")
    for v in range(6):
        _fake_version(run, v)
    for v, score in [(1, 0.2), (2, 0.9), (3, float("nan")), (5, 0.4)]:
        checkpoints.record_scores(run, v, {"heldout/pass_greedy": score})
    assert checkpoints.best_version(run, "heldout/pass_greedy") == 2
    assert checkpoints.best_version(run, "heldout/pass_greedy", mode="min") == 1
    deleted = checkpoints.prune(run, 2, keep={0}, best_metric="heldout/pass_greedy")
    assert deleted == [1, 3]
    assert checkpoints.versions(run) == [0, 2, 4, 5]


def _reference_nll(run_dir, version):
    from training.batch import make_batch, token_logprobs
    from training.losses import sft_loss
    from training.policy import tokenizer_of

    model = load_policy(str(checkpoints.checkpoint_dir(run_dir, version) / "model")).eval()
    tok = tokenizer_of(model)
    b = make_batch([tok.encode_prompt(p) for p in PROMPTS],
                   [tok.encode(r, bos=False) + [tok.eos_token_id] for r in REFS],
                   tok.pad_token_id, POLICY.max_len)
    with torch.no_grad():
        return float(sft_loss(token_logprobs(model, b), b.loss_mask))


def test_replay_pulls_the_rl_step_towards_the_reference_solutions(base, tmp_path):
    a, b = _copy(base, tmp_path, "plain"), _copy(base, tmp_path, "replay")
    rl = dict(epochs=2, micro_batch_size=4, lr=5e-3)
    plain = grpo_update(a, 0, _samples(), POLICY, RLConfig(**rl), 1.0, 0)
    replayed = grpo_update(b, 0, _samples(), POLICY, RLConfig(replay_coef=1.0, replay_per_step=4, **rl),
                           1.0, 0, replay=list(zip(PROMPTS, REFS)))
    assert "train/replay_nll" not in plain and replayed["train/replay_nll"] > 0
    # same samples, same seed: the replayed step ends nearer the references (measured 5.01 at
    # the start, 4.67 after the plain step, 4.49 with replay)
    start, after_plain, after_replay = (_reference_nll(a, 0), _reference_nll(a, 1),
                                        _reference_nll(b, 1))
    assert after_replay < min(start, after_plain) - 0.1
    with pytest.raises(ValueError, match="rl.replay_coef=1.0 needs reference solutions"):
        grpo_update(_copy(base, tmp_path, "none"), 0, _samples(), POLICY, RLConfig(replay_coef=1.0),
                    1.0, 0)


# ---- one-step off-policy samples (rl.overlap): the decoupled PPO objective ----------------

def _exact(run_dir, version, samples):
    """Each sample's completion log-probs under `version` (what its sampler would have said)."""
    from training.batch import make_batch, token_logprobs
    from training.policy import tokenizer_of
    from training.offpolicy import completion_values

    model = load_policy(str(checkpoints.checkpoint_dir(run_dir, version) / "model")).eval()
    tok = tokenizer_of(model)
    b = make_batch([s.prompt_ids for s in samples], [s.completion_ids for s in samples],
                   tok.pad_token_id, POLICY.max_len)
    with torch.no_grad():
        lp = token_logprobs(model, b, 1.0, tok.banned_ids)
    return [completion_values(lp, i, s) for i, s in enumerate(samples)]


@pytest.fixture(scope="module")
def at_v1(base, tmp_path_factory):
    """A run whose newest version is 1, and the samples' exact log-probs under it."""
    run = tmp_path_factory.mktemp("v1") / "run"
    shutil.copytree(base, run)
    grpo_update(str(run), 0, _samples(), POLICY, RLConfig(), 1.0, 0)
    return run, _exact(str(run), 1, _samples(seed=3))


def _off_policy_pair(at_v1, tmp_path, shift: float, rl: RLConfig):
    """The update from v1 of the same samples, as the on-policy sampler's (their log-probs
    exact) and as a stale sampler's (version 0) whose log-probs were `shift` above v1's."""
    run, exact = at_v1
    a, b = _copy(run, tmp_path, "on"), _copy(run, tmp_path, "stale")
    samples = _samples(seed=3)
    on = [dataclasses.replace(s, old_logprobs=e) for s, e in zip(samples, exact)]
    stale = [dataclasses.replace(s, old_logprobs=[x + shift for x in e], version=0)
             for s, e in zip(samples, exact)]
    return a, grpo_update(a, 1, on, POLICY, rl, 1.0, 0), b, grpo_update(b, 1, stale, POLICY, rl, 1.0, 0)


def test_stale_samples_whose_sampler_agreed_with_the_start_give_the_on_policy_step(at_v1, tmp_path):
    # Importance weight 1 everywhere, and the ratio against the starting weights equals the
    # ratio against the sampler's log-probs: two epochs must land on the same weights.
    a, on, b, stale = _off_policy_pair(at_v1, tmp_path, 0.0, RLConfig())
    assert "train/staleness" not in on
    assert stale["train/staleness"] == 1 and stale["train/stale_samples"] == 10
    assert stale["train/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert stale["train/is_weight_capped"] == 0.0
    assert max_diff(weights(a, 2), weights(b, 2)) < 1e-6
    assert max_diff(weights(a, 2), weights(a, 1)) > 1e-4


@pytest.mark.parametrize("shift, weight, capped", [(math.log(2), 0.5, 0.0),
                                                   (-math.log(10), 2.0, 1.0)])
def test_stale_samples_weigh_their_tokens_by_the_truncated_importance_weight(
        at_v1, tmp_path, shift, weight, capped):
    # The sampler's log-probs `shift` above the start's: w = exp(-shift) per token, 0.5, or 10
    # truncated at the cap 2. One epoch's loss is then w times the on-policy loss (ratio 1).
    a, on, b, stale = _off_policy_pair(at_v1, tmp_path, shift, RLConfig(epochs=1))
    assert stale["train/is_weight_mean"] == pytest.approx(weight, rel=1e-4)
    assert stale["train/is_weight_capped"] == capped
    assert abs(on["train/loss"]) > 1e-3
    assert stale["train/loss"] == pytest.approx(weight * on["train/loss"], rel=1e-4)


def test_starting_log_probs_are_computed_for_the_samples_a_rank_meets_only_after_epoch_1(at_v1):
    # Two ranks, two epochs: the second epoch's shuffle hands rank 0 samples it did not train on
    # in the first, whose starting log-probs its own first pass never saw.
    from training.microbatch import plan_update
    from training.policy import tokenizer_of
    from training.offpolicy import starting_logprobs

    run, exact = at_v1
    samples = _samples(seed=3)
    orders = [list(range(10)), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]]
    plan = plan_update(orders, [20] * 10, [1] * 10, 2, None, 2, 0)
    model = load_policy(str(checkpoints.checkpoint_dir(str(run), 1) / "model"))
    out = starting_logprobs(model, samples, plan, tokenizer_of(model), POLICY, RLConfig(), 1.0)
    first = {i for mb in plan.steps[0] for i in mb.indices}
    assert set(out) == {i for mb in plan.steps[1] for i in mb.indices} - first != set()
    for i, values in out.items():
        assert values == pytest.approx(exact[i], abs=1e-5)


def _own_logprobs(run_dir, samples):
    """Each sample's completion log-probs under version 0, as the trainer computes them."""
    from training.batch import make_batch, token_logprobs  # noqa: PLC0415

    model = load_policy(str(checkpoints.checkpoint_dir(run_dir, 0) / "model")).eval()
    tok = model.rollforge_tokenizer
    b = make_batch([s.prompt_ids for s in samples], [s.completion_ids for s in samples],
                   tok.pad_token_id, POLICY.max_len)
    with torch.no_grad():
        lp = token_logprobs(model, b, 1.0, tok.banned_ids)
    return [lp[i, len(s.prompt_ids) - 1:len(s.prompt_ids) - 1 + len(s.completion_ids)].tolist()
            for i, s in enumerate(samples)]


def test_the_logprob_gap_is_zero_for_the_trainers_own_logprobs_and_measured_for_an_engines(
        base, tmp_path):
    """Sampled log-probs equal to the trainer's: no gap, no correction. Another engine's, off
    by 0.2 nats on every token: a gap of 0.2 on all tokens, and (engine_sampled) every token
    weighted pi_start/pi_sampler = exp(-0.2) by the truncated importance correction."""
    own = _own_logprobs(str(base), _samples())
    exact = [dataclasses.replace(s, old_logprobs=lp) for s, lp in zip(_samples(), own)]
    out = grpo_update(_copy(base, tmp_path, "exact"), 0, exact, POLICY, RLConfig(), 1.0, 0)
    assert out["train/logprob_gap_mean"] < 1e-5 and out["train/logprob_gap_over"] == 0
    assert "train/is_weight_mean" not in out
    off = [dataclasses.replace(s, old_logprobs=[x + 0.2 for x in s.old_logprobs],
                               engine_sampled=True) for s in exact]
    out = grpo_update(_copy(base, tmp_path, "engine"), 0, off, POLICY, RLConfig(), 1.0, 0)
    assert out["train/logprob_gap_mean"] == pytest.approx(0.2, abs=1e-4)
    assert out["train/logprob_gap_max"] == pytest.approx(0.2, abs=1e-4)
    assert out["train/logprob_gap_over"] == 1.0
    assert out["train/logprob_gap_tokens"] == sum(len(s.completion_ids) for s in exact)
    assert out["train/is_weight_mean"] == pytest.approx(math.exp(-0.2), abs=1e-4)
    assert out["train/is_weight_capped"] == 0


def test_grpo_trains_on_per_token_advantages_where_the_samples_carry_them(base, tmp_path):
    # a turn's credit (rl.turn_credit): equal to the sample's advantage on every token, the same
    # step as without; zero on the second half of each completion, another step
    a, b, c = (_copy(base, tmp_path, n) for n in "abc")
    rl = RLConfig(epochs=1)
    plain = _samples()
    same = [dataclasses.replace(s, token_advantages=[s.advantage] * len(s.completion_ids))
            for s in plain]
    half = [dataclasses.replace(s, token_advantages=[s.advantage if i < len(s.completion_ids) // 2
                                                     else 0.0 for i in range(len(s.completion_ids))])
            for s in plain]
    for run, samples in ((a, plain), (b, same), (c, half)):
        grpo_update(run, 0, samples, POLICY, rl, 1.0, 0)
    assert max_diff(weights(a, 1), weights(b, 1)) < 1e-6
    assert max_diff(weights(a, 1), weights(c, 1)) > 1e-5


def test_the_engine_held_between_updates_publishes_what_a_fresh_one_would_bit_for_bit(
        base, tmp_path, monkeypatch):
    """Three updates in a row, each after its version was taken for sampling (as the flow
    does): with the engine of one update held for the next (no engine made, no state loaded),
    every checkpoint file is the same, byte for byte, as with a fresh engine loading the last
    checkpoint each time; micro-batches accumulated (4 a step, 2 epochs). An update with other
    settings (another accumulation), or of a checkpoint written since, makes its own engine."""
    import hashlib

    from training import engine as eng
    from training import trainer
    from training.trainer import policy_for_sampling

    made = []
    real = eng.make_engine
    monkeypatch.setattr(eng, "make_engine", lambda *a, **k: made.append(1) or real(*a, **k))
    rl = RLConfig(micro_batch_size=3)

    def three(name: str) -> dict[str, str]:
        run = _copy(base, tmp_path, name)
        made.clear()
        for v in range(3):
            policy_for_sampling(run, v)
            grpo_update(run, v, _samples(seed=v + 1), POLICY, rl, 1.0, 0)
        trainer._LOADED.clear()
        trainer._HELD.clear()
        files = {}
        for v in (1, 2, 3):
            d = checkpoints.checkpoint_dir(run, v)
            for f in sorted(d.rglob("*")):
                if f.is_file() and f.name != "meta.json":
                    files[str(f.relative_to(run))] = hashlib.sha256(f.read_bytes()).hexdigest()
            meta = json.loads((d / "meta.json").read_text())
            files[f"v{v} meta"] = {k: x for k, x in meta.items()  # less times and memory
                                   if not any(w in k for w in ("seconds", "per_s", "mem"))}
        return files

    held = three("held")
    assert len(made) == 1  # the first update's; the next two went on with it
    monkeypatch.setattr(trainer, "_hold", lambda *a, **k: None)
    fresh = three("fresh")
    assert len(made) == 3
    assert held.keys() == fresh.keys() and any("mp_rank_00_model_states" in k for k in held)
    assert held == fresh
    monkeypatch.undo()
    monkeypatch.setattr(eng, "make_engine", lambda *a, **k: made.append(1) or real(*a, **k))
    run, made[:] = _copy(base, tmp_path, "other"), []
    for v, other in enumerate((rl, RLConfig(micro_batch_size=5), RLConfig(micro_batch_size=5))):
        policy_for_sampling(run, v)
        grpo_update(run, v, _samples(seed=v + 1), POLICY, other, 1.0, 0)
    assert len(made) == 2  # the second update's settings differ; the third went on with its
    meta = checkpoints.checkpoint_dir(run, 3) / "meta.json"  # rewritten in place since
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "note": "rewritten"}))
    policy_for_sampling(run, 3)
    grpo_update(run, 3, _samples(seed=4), POLICY, RLConfig(micro_batch_size=5), 1.0, 0)
    assert len(made) == 3
    trainer._LOADED.clear()
    trainer._HELD.clear()
