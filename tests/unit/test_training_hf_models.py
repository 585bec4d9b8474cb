"""Any local Hugging Face causal LM as the policy: a tiny Llama with a real BPE tokenizer and a
chat template, built offline in a temporary folder, and a GGUF file written with `gguf`."""
import numpy as np
import pytest
import torch

from training.config import PolicyConfig, RLConfig, SFTConfig
from training.generate import sample
from training.policy import build_policy, load_pretrained
from training.trainer import RLSample, grpo_update, policy_for_sampling, sft_warm_start

CHAT = ("{% for m in messages %}<|user|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")
CORPUS = ["def add(a, b):\n    return a + b\n", "def mul(a, b):\n    return a * b\n",
          "x = [1, 2, 3]\nprint(sum(x))\n"] * 20


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>"]
    core.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|pad|>", bos_token="<|bos|>",
                                  eos_token="<|eos|>", clean_up_tokenization_spaces=False)
    tok.chat_template = CHAT
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_a_local_llama_directory_loads_with_its_tokenizer_and_chat_template(llama_dir):
    m = build_policy(PolicyConfig(model_path=llama_dir))
    tok = m.rollforge_tokenizer
    assert type(m).__name__ == "LlamaForCausalLM" and tok.kind == "hf"
    ids = tok.encode_prompt("def f(x):")
    assert tok.tok.decode(ids).startswith("<|user|>def f(x):")
    assert ids[-1] == tok.tok.convert_tokens_to_ids("<|assistant|>")
    plain = build_policy(PolicyConfig(model_path=llama_dir, chat_template=False)).rollforge_tokenizer
    assert plain.encode_prompt("def f(x):") == [tok.bos_token_id, *tok.encode("def f(x):", bos=False)]


def test_a_local_llama_warm_starts_samples_with_stops_updates_and_keeps_its_tokenizer(llama_dir, tmp_path):
    policy = PolicyConfig(model_path=llama_dir, max_len=96)
    run = str(tmp_path / "run")
    sft_warm_start(run, ["def add(a, b):"] * 2, ["    return a + b"] * 2, policy,
                   SFTConfig(steps=2, batch_size=2), RLConfig(micro_batch_size=4), 0)
    model = policy_for_sampling(run, 0)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.rollforge_tokenizer.use_chat_template  # saved with the checkpoint
    g = torch.Generator().manual_seed(0)
    out = sample(model, ["def add(a, b):", "x = "], 12, generator=g, stop=["\n"])
    for s in out:
        assert "\n" not in s.text and len(s.logprobs) == len(s.completion_ids) > 0
    samples = [RLSample(s.prompt_ids, s.completion_ids, s.logprobs, a) for s, a in zip(out, [1.0, -1.0])]
    metrics = grpo_update(run, 0, samples, policy, RLConfig(micro_batch_size=4), 1.0, 0)
    assert metrics["train/sequences"] == 2 and np.isfinite(metrics["train/loss"])


def _write_gguf(model, path):
    """A GPT-2 GGUF the way llama.cpp's converter lays it out (F32, byte-level vocabulary)."""
    gguf = pytest.importorskip("gguf")
    from training.tokenizer import bytes_to_unicode

    c = model.config
    w = gguf.GGUFWriter(str(path), arch="gpt2")
    w.add_name("tiny-byte-gpt2")
    w.add_context_length(c.n_positions)
    w.add_embedding_length(c.n_embd)
    w.add_block_count(c.n_layer)
    w.add_feed_forward_length(4 * c.n_embd)
    w.add_head_count(c.n_head)
    w.add_layer_norm_eps(c.layer_norm_epsilon)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    b2u = bytes_to_unicode()
    w.add_tokenizer_model("gpt2")
    w.add_token_list([b2u[b] for b in range(256)] + ["<pad>", "<s>", "</s>"])
    w.add_token_types([gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * 3)
    w.add_token_scores([0.0] * 259)
    w.add_bos_token_id(257)
    w.add_eos_token_id(258)
    w.add_pad_token_id(256)
    names = {"transformer.wte": "token_embd", "transformer.wpe": "position_embd",
             "transformer.ln_f": "output_norm"}
    for i in range(c.n_layer):
        p = f"transformer.h.{i}"
        names.update({f"{p}.ln_1": f"blk.{i}.attn_norm", f"{p}.attn.c_attn": f"blk.{i}.attn_qkv",
                      f"{p}.attn.c_proj": f"blk.{i}.attn_output", f"{p}.ln_2": f"blk.{i}.ffn_norm",
                      f"{p}.mlp.c_fc": f"blk.{i}.ffn_up", f"{p}.mlp.c_proj": f"blk.{i}.ffn_down"})
    transposed = ("attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight")
    for k, v in model.state_dict().items():
        if k == "lm_head.weight":
            continue  # tied to token_embd: no output.weight in the file
        mod, leaf = k.rsplit(".", 1)
        name = f"{names[mod]}.{leaf}"
        arr = v.detach().float().numpy()
        w.add_tensor(name, np.ascontiguousarray(arr.T if name.endswith(transposed) else arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_gguf_file_loads_through_transformers_with_the_same_logits_and_tokenizer(tmp_path):
    pytest.importorskip("accelerate")  # transformers needs it to load GGUF weights
    src = build_policy(PolicyConfig(n_layer=2, n_embd=32, n_head=2, max_len=64)).eval()
    path = tmp_path / "tiny.gguf"
    _write_gguf(src, path)
    g = load_pretrained(str(path)).eval()
    x = torch.tensor([[257, 104, 105, 32, 116]])
    with torch.no_grad():
        torch.testing.assert_close(g(x).logits, src(x).logits, atol=1e-5, rtol=0)
    tok = g.rollforge_tokenizer
    assert tok.encode("hi there", bos=False) == list(b"hi there")
    assert (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id) == (258, 256, 257)


def test_a_missing_model_path_is_refused_by_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="policy.model_path"):
        build_policy(PolicyConfig(model_path=str(tmp_path / "nope")))


@pytest.mark.parametrize("kind", ["byte-gpt2", "llama"])
def test_an_update_hands_its_weights_to_the_held_sampling_model_bit_for_bit(kind, llama_dir,
                                                                            tmp_path):
    """After an in-process update the model held for sampling version i takes the published
    weights of version i + 1 in place (no load from disk at the next sample call); it must be
    the checkpoint exactly, as `load_policy` reads it."""
    from training import checkpoints
    from training.policy import load_policy

    policy = (PolicyConfig(model_path=llama_dir, max_len=96) if kind == "llama"
              else PolicyConfig(n_layer=1, n_embd=32, n_head=2))
    run = str(tmp_path / "run")
    sft_warm_start(run, ["def add(a, b):"] * 2, ["    return a + b"] * 2, policy,
                   SFTConfig(steps=2, batch_size=2), RLConfig(micro_batch_size=4), 0)
    held = policy_for_sampling(run, 0)
    before = {k: v.clone() for k, v in held.state_dict().items()}
    out = sample(held, ["def add(a, b):", "x = "], 12, generator=torch.Generator().manual_seed(0))
    samples = [RLSample(s.prompt_ids, s.completion_ids, s.logprobs, a)
               for s, a in zip(out, [1.0, -1.0])]
    grpo_update(run, 0, samples, policy, RLConfig(micro_batch_size=4, lr=1e-2), 1.0, 0)
    handed = policy_for_sampling(run, 1)
    assert handed is held and not handed.training
    fresh = load_policy(str(checkpoints.checkpoint_dir(run, 1) / "model")).state_dict()
    mine = handed.state_dict()
    assert mine.keys() == fresh.keys()
    assert all(torch.equal(mine[k], fresh[k]) and mine[k].dtype == fresh[k].dtype for k in fresh)
    assert any(not torch.equal(before[k], mine[k]) for k in before)  # the update moved them
    assert policy_for_sampling(run, 0) is not held  # version 0 loads from disk again


@pytest.mark.parametrize("kind", ["byte-gpt2", "llama"])
def test_updates_from_the_held_model_publish_what_updates_from_disk_publish(kind, llama_dir,
                                                                            tmp_path, monkeypatch):
    """An update of a version this process holds for sampling trains a copy of the held model
    instead of loading the checkpoint: two updates in a row must publish, byte for byte, what
    the same updates publish when every version is loaded from disk (a resumed run's way)."""
    import hashlib

    from training import checkpoints, trainer

    policy = (PolicyConfig(model_path=llama_dir, max_len=96) if kind == "llama"
              else PolicyConfig(n_layer=1, n_embd=32, n_head=2))
    rl = RLConfig(micro_batch_size=4, lr=1e-2)

    loads = []
    monkeypatch.setattr(trainer, "load_policy",
                        lambda path, real=trainer.load_policy: loads.append(path) or real(path))

    def two_updates(run: str, held: bool) -> list[str]:
        sft_warm_start(run, ["def add(a, b):"] * 2, ["    return a + b"] * 2, policy,
                       SFTConfig(steps=2, batch_size=2), rl, 0)
        trainer._LOADED.clear()
        loads.clear()
        for version in (0, 1):
            if not held:
                trainer._LOADED.clear()
            model = policy_for_sampling(run, version)
            out = sample(model, ["def add(a, b):", "x = "], 12,
                         generator=torch.Generator().manual_seed(version))
            samples = [RLSample(s.prompt_ids, s.completion_ids, s.logprobs, a)
                       for s, a in zip(out, [1.0, -1.0])]
            if not held:
                trainer._LOADED.clear()
            grpo_update(run, version, samples, policy, rl, 1.0, 0)
        # held: version 0 loaded once, for sampling; disk: each version for each use
        assert len(loads) == (1 if held else 4), loads
        trainer._LOADED.clear()
        return [hashlib.sha256(f.read_bytes()).hexdigest() for v in (1, 2) for f in sorted(
            (checkpoints.checkpoint_dir(run, v) / "model").glob("*.safetensors"))]

    assert two_updates(str(tmp_path / "held"), True) == two_updates(str(tmp_path / "disk"), False)
