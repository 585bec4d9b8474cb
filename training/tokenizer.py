"""A byte-level tokenizer: every UTF-8 byte is a token, plus PAD, BOS and EOS. Nothing to download."""
from __future__ import annotations


class ByteTokenizer:
    """ids 0..255 are bytes; 256 = PAD, 257 = BOS, 258 = EOS."""

    pad_token_id = 256
    bos_token_id = 257
    eos_token_id = 258
    vocab_size = 259

    def encode(self, text: str, bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_token_id, *ids] if bos else ids

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
