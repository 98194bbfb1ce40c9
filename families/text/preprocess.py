"""Tokenisation for the intent model: the one implementation used by export, parity checks and serving.

Texts are tokenised to ragged id sequences (special tokens added, truncated to max_length); padding to the longest item
and the attention mask come from runners.ragged.pad_sequences, applied per batch.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from runners.ragged import pad_sequences


def clean_text(text: str) -> str:
    """NFC-normalise and drop control/format characters other than whitespace (zero-width, bidi overrides)."""
    text = unicodedata.normalize("NFC", text)
    return "".join(ch for ch in text if ch in "\t\n\r " or unicodedata.category(ch)[0] != "C").strip()


class TextTokenizer:
    """A tokenizer.json with truncation fixed to the manifest's max_length."""

    def __init__(self, tokenizer_file: Path | str, max_length: int, pad_token_id: int | None = None):
        """`pad_token_id`: the manifest's (what the runner pads with); else the tokenizer's [PAD] or <pad>, else 0."""
        self.max_length = int(max_length)
        self._tok = Tokenizer.from_file(str(tokenizer_file))
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=self.max_length)
        if pad_token_id is None:
            pad = next((i for i in map(self._tok.token_to_id, ("[PAD]", "<pad>")) if i is not None), None)
            pad_token_id = pad if pad is not None else 0
        self.pad_token_id = int(pad_token_id)
        self.vocab_size = self._tok.get_vocab_size()

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Ragged int64 id arrays, one per text."""
        return self.encode_with_truncation(texts)[0]

    def encode_with_truncation(self, texts: Sequence[str]) -> tuple[list[np.ndarray], list[bool]]:
        """Ragged id arrays plus, per text, whether tokens were cut at max_length. One text (the common request) is
        encoded on this thread: encode_batch hands work to the Rust thread pool and releases the GIL, which another
        Python thread (the local runner's) may then hold while this request waits to get it back."""
        texts = list(texts)
        encodings = [self._tok.encode(texts[0])] if len(texts) == 1 else self._tok.encode_batch(texts)
        return ([np.asarray(e.ids, dtype=np.int64) for e in encodings], [bool(e.overflowing) for e in encodings])

    def encode_padded(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask) padded to the longest text of this call."""
        return pad_sequences(self.encode(texts), self.pad_token_id)
