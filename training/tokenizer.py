"""Tokenizers the trainer and the sampler share: a byte-level one (the default, nothing to
download) and a thin wrapper over any local Hugging Face tokenizer, both with one interface:
`encode(text, bos)`, `encode_prompt(prompt)`, `decode(ids)`, the special ids and `banned_ids`
(ids the sampler never draws)."""
from __future__ import annotations

import json
from pathlib import Path


class ByteTokenizer:
    """ids 0..255 are bytes; 256 = PAD, 257 = BOS, 258 = EOS."""

    pad_token_id = 256
    bos_token_id = 257
    eos_token_id = 258
    vocab_size = 259
    kind = "byte"

    def encode(self, text: str, bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_token_id, *ids] if bos else ids

    def encode_prompt(self, prompt: str) -> list[int]:
        return self.encode(prompt)

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    @property
    def banned_ids(self) -> list[int]:
        return [self.pad_token_id, self.bos_token_id]



TOKENIZER_ATTR = "rollforge_tokenizer"  # the attribute a policy model carries its tokenizer in


def tokenizer_of(model):
    """The tokenizer attached to a policy (the byte tokenizer for models built elsewhere)."""
    module = getattr(model, "module", model)  # a DeepSpeed engine wraps the model
    return getattr(module, TOKENIZER_ATTR, None) or ByteTokenizer()


class HFTokenizer:
    """A Hugging Face tokenizer seen through the byte tokenizer's interface.

    A tokenizer without a pad token pads with EOS (padding is always masked out); the sampler
    then bans nothing but a distinct BOS, since banning the pad id would ban EOS.
    """

    kind = "hf"

    def __init__(self, tok, chat_template: bool = True):
        if tok.eos_token_id is None:
            raise ValueError(f"tokenizer {tok.name_or_path!r} has no eos_token: completions could "
                             "never end; set one in its tokenizer_config.json")
        self.tok = tok
        self.eos_token_id = int(tok.eos_token_id)
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        self.bos_token_id = None if tok.bos_token_id is None else int(tok.bos_token_id)
        self.vocab_size = len(tok)
        self.use_chat_template = bool(chat_template and getattr(tok, "chat_template", None))

    def encode(self, text: str, bos: bool = True) -> list[int]:
        ids = list(self.tok(text, add_special_tokens=False)["input_ids"])
        if bos and self.bos_token_id is not None and self.bos_token_id != self.eos_token_id:
            ids = [self.bos_token_id, *ids]
        return ids

    def encode_prompt(self, prompt: str) -> list[int]:
        if not self.use_chat_template:
            return self.encode(prompt)
        out = self.tok.apply_chat_template([{"role": "user", "content": prompt}],
                                           add_generation_prompt=True, tokenize=True,
                                           return_dict=True)
        return list(out["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    @property
    def banned_ids(self) -> list[int]:
        special = {self.pad_token_id, self.bos_token_id} - {self.eos_token_id, None}
        return sorted(special)

    def save(self, path: str) -> None:
        self.tok.save_pretrained(path)


SETTINGS_FILE = "rollforge_tokenizer.json"


def save_tokenizer(tok, path: str) -> None:
    """Write the tokenizer (HF files, if any) and which kind it is next to a saved model."""
    Path(path).mkdir(parents=True, exist_ok=True)
    settings = {"kind": tok.kind}
    if isinstance(tok, HFTokenizer):
        tok.save(path)
        settings["chat_template"] = tok.use_chat_template
    (Path(path) / SETTINGS_FILE).write_text(json.dumps(settings))


def load_tokenizer(path: str, gguf_file: str | None = None,
                   chat_template: bool | str | None = None):
    """The tokenizer saved with a model directory (the byte tokenizer when there is none).
    `chat_template`: None, as saved; a bool, use the tokenizer's own template or none; a path,
    a Jinja template file that replaces the tokenizer's own (and is saved with it)."""
    settings_path = Path(path) / SETTINGS_FILE
    settings = json.loads(settings_path.read_text()) if settings_path.is_file() else {}
    if settings.get("kind", "byte" if gguf_file is None and not _has_hf_tokenizer(path) else "hf") == "byte":
        return ByteTokenizer()
    from transformers import AutoTokenizer

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True, **kwargs)
    if isinstance(chat_template, str):
        tok.chat_template = Path(chat_template).read_text()
    use = settings.get("chat_template", True) if chat_template is None else bool(chat_template)
    return HFTokenizer(tok, chat_template=use)


def _has_hf_tokenizer(path: str) -> bool:
    p = Path(path)
    return any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json",
                                            "vocab.json", "tokenizer.model"))


def byte_tokenizer_hf():
    """The byte tokenizer as a `transformers` fast tokenizer with the same ids (for exports:
    `AutoTokenizer.from_pretrained(exported_dir)` then encodes exactly like `ByteTokenizer`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    alphabet = ByteLevel.alphabet()  # the 256 printable stand-ins GPT-2 uses for bytes
    byte_to_char = bytes_to_unicode()
    assert set(byte_to_char.values()) == set(alphabet)
    vocab = {byte_to_char[b]: b for b in range(256)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(["<pad>", "<s>", "</s>"])  # ids 256, 257, 258 in this order
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>", clean_up_tokenization_spaces=False)
    ids = tok.convert_tokens_to_ids(["<pad>", "<s>", "</s>"])
    if ids != [ByteTokenizer.pad_token_id, ByteTokenizer.bos_token_id, ByteTokenizer.eos_token_id]:
        raise RuntimeError(f"byte tokenizer special ids came out as {ids}, expected [256, 257, 258]")
    return tok


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))
