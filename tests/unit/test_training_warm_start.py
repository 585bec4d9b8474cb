"""training/trainer.py's warm start (sft_warm_start) through a real DeepSpeed engine: resumed
after an interruption it ends where an uninterrupted one does; a pass-rate criterion starts the
decay of its learning rate (and is restored on resume); no steps publish the model as it is;
encoded chat-template demonstrations train as the same written ones."""
import math

import pytest
import torch

from training import checkpoints
from training.config import RLConfig, SFTConfig
from training.trainer import sft_warm_start
from training_common import POLICY, PROMPTS, REFS, max_diff, weights


def test_a_warm_start_resumed_after_an_interruption_ends_where_an_uninterrupted_one_does(tmp_path):
    sft = SFTConfig(steps=6, batch_size=4, save_every=2, warmup_steps=2)
    whole, broken = str(tmp_path / "whole"), str(tmp_path / "broken")
    sft_warm_start(whole, PROMPTS, REFS, POLICY, sft, RLConfig(), 0)
    stopped = sft_warm_start(broken, PROMPTS, REFS, POLICY, sft, RLConfig(), 0, stop_after=5)
    assert stopped == {"sft/stopped_at": 5, "sft/resumed_from": 0}
    assert not checkpoints.exists(broken, 0)
    resumed = sft_warm_start(broken, PROMPTS, REFS, POLICY, sft, RLConfig(), 0)
    assert resumed["sft/resumed_from"] == 4  # the last save; steps 4 and 5 run again
    a, b = weights(whole, 0), weights(broken, 0)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not checkpoints.sft_progress_dir(broken).exists()


def _lrs(sched, n):
    out = []
    for _ in range(n):
        out.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    return out


def test_hold_decay_holds_the_peak_until_the_criterion_then_decays_to_a_tenth():
    from training.sft_steps import WarmupHoldDecay  # noqa: PLC0415

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    s = WarmupHoldDecay(opt, peak=1.0, warmup=2, decay=4)
    assert _lrs(s, 6) == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]  # no criterion yet: the peak, however long
    s.decay_from = 6
    assert _lrs(s, 6) == pytest.approx([1.0, 0.775, 0.55, 0.325, 0.1, 0.1])
    again = WarmupHoldDecay(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 1.0, 2, 4)
    again.load_state_dict(s.state_dict())  # what a resumed warm start restores
    assert again.decay_from == 6 and again.last_epoch == s.last_epoch


def _scripted_probe(rates):
    seen = []

    def probe(model):
        assert isinstance(model, torch.nn.Module)  # the weights being trained
        seen.append(len(seen))
        return rates[min(len(seen) - 1, len(rates) - 1)]
    return probe, seen


def test_a_warm_start_until_a_criterion_decays_from_the_first_probe_that_meets_it(tmp_path):
    sft = SFTConfig(steps=40, batch_size=4, warmup_steps=1, until_pass=0.8, probe_every=3,
                    decay_steps=5)
    probe, seen = _scripted_probe([0.1, 0.5, 0.9, 0.2])
    m = sft_warm_start(str(tmp_path / "r"), PROMPTS, REFS, POLICY, sft, RLConfig(), 0, probe=probe)
    # probes after steps 3, 6, 9 (0.9 >= 0.8: the decay starts), then 5 decay steps and a final probe
    assert m["sft/criterion_met_at"] == 9 and m["sft/decay_from"] == 9 and m["sft/steps"] == 14
    assert m["sft/probes"] == 3 and len(seen) == 4 and m["sft/probe_pass"] == 0.2
    assert checkpoints.read_meta(checkpoints.checkpoint_dir(str(tmp_path / "r"), 0))["sft/steps"] == 14


def test_a_criterion_never_met_still_ends_within_steps_with_its_decay(tmp_path):
    sft = SFTConfig(steps=12, batch_size=4, warmup_steps=1, until_pass=1.0, probe_every=2,
                    decay_steps=4)
    probe, seen = _scripted_probe([0.0])
    m = sft_warm_start(str(tmp_path / "r"), PROMPTS, REFS, POLICY, sft, RLConfig(), 0, probe=probe)
    assert m["sft/steps"] == 12 and m["sft/decay_from"] == 8 and math.isnan(m["sft/criterion_met_at"])
    assert m["sft/probes"] == 4  # after steps 2, 4, 6, 8; none during the decay


def test_a_warm_start_until_a_criterion_resumes_with_its_decay_point(tmp_path):
    sft = SFTConfig(steps=40, batch_size=4, warmup_steps=1, until_pass=0.5, probe_every=2,
                    decay_steps=6, save_every=3)
    whole, broken = str(tmp_path / "whole"), str(tmp_path / "broken")
    sft_warm_start(whole, PROMPTS, REFS, POLICY, sft, RLConfig(), 0, probe=_scripted_probe([0.0, 0.6])[0])
    stopped = sft_warm_start(broken, PROMPTS, REFS, POLICY, sft, RLConfig(), 0, stop_after=7,
                             probe=_scripted_probe([0.0, 0.6])[0])
    assert stopped["sft/stopped_at"] == 7
    # resumed from the save after step 6: the decay point (step 4) comes back with the engine
    # state, so no probe runs again and the warm start ends at 4 + 6 as the whole one did
    resumed = sft_warm_start(broken, PROMPTS, REFS, POLICY, sft, RLConfig(), 0,
                             probe=_scripted_probe([0.0])[0])
    assert resumed["sft/resumed_from"] == 6 and resumed["sft/steps"] == 10
    a, b = weights(whole, 0), weights(broken, 0)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_until_pass_without_a_probe_or_with_a_decay_as_long_as_steps_is_refused(tmp_path):
    with pytest.raises(ValueError, match="needs a probe"):
        sft_warm_start(str(tmp_path / "r"), PROMPTS, REFS, POLICY,
                       SFTConfig(steps=10, until_pass=0.5, decay_steps=2), RLConfig(), 0)
    with pytest.raises(ValueError, match="decay_steps=10 must be less than sft.steps=10"):
        SFTConfig(steps=10, until_pass=0.5, decay_steps=10)


def test_a_warm_start_of_no_steps_needs_no_data_and_publishes_the_model_as_it_is(tmp_path):
    # a run whose sources are multi-turn only (no reference pairs) starting from a pretrained
    # model: version 0 is that model
    run = str(tmp_path / "run")
    out = sft_warm_start(run, [], [], POLICY, SFTConfig(steps=0),
                         RLConfig(), 0)
    assert out["sft/steps"] == 0 and out["sft/examples"] == 0
    assert checkpoints.exists(run, 0)
    with pytest.raises(ValueError, match="3 steps needs at least one task with a reference"):
        sft_warm_start(str(tmp_path / "other"), [], [], POLICY, SFTConfig(steps=3), RLConfig(), 0)


def test_a_warm_start_on_encoded_demonstrations_trains_as_on_the_same_written_ones(tmp_path):
    """`encoded` (a chat template's episodes as tokens: flows/warm_start.py `tool_demos`) is
    the same data as a written transcript once encoded: the same published weights; and its
    mask is read (the same tokens all marked the policy's train to other weights)."""
    from training.episodes import encode_transcript
    from training.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    demos = [(PROMPTS[i], [(REFS[i], True), ("obs: FAIL\n", False), ("<submit/>", True)])
             for i in range(4)]
    encoded = [encode_transcript(tok, p, segs) for p, segs in demos]
    sft = SFTConfig(steps=3, batch_size=4, warmup_steps=1)
    runs = {name: str(tmp_path / name) for name in ("written", "encoded", "mask")}
    sft_warm_start(runs["written"], [], [], POLICY, sft, RLConfig(), 0, demos=demos)
    sft_warm_start(runs["encoded"], [], [], POLICY, sft, RLConfig(), 0, encoded=encoded)
    all_policy = [(p, c, [1] * len(c)) for p, c, _ in encoded]
    sft_warm_start(runs["mask"], [], [], POLICY, sft, RLConfig(), 0, encoded=all_policy)
    written = weights(runs["written"], 0)
    assert max_diff(written, weights(runs["encoded"], 0)) == 0.0
    assert max_diff(weights(runs["mask"], 0), written) > 1e-6
