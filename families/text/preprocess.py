"""Tokenisation for the intent model: the one implementation used by export, parity checks and serving.

Texts are tokenised to ragged id sequences (special tokens added, truncated to max_length); padding to the longest item
and the attention mask come from triserve.kernel.ragged.pad_sequences, applied per batch.

Over-long texts are truncated, never refused below the hard limit (families/text/limits.py): first by characters,
cheaply and before cleaning and tokenising (`prepare_text`, at `char_budget` characters), then by tokens at the
model's max_length. The character budget is at least CHARS_PER_TOKEN characters per token the model reads, several
times what ordinary text takes per token, so for ordinary text the tokens the model sees are those of the whole text
(what Hugging Face pipelines with truncation=True see), while a 100,000-character text costs its first few thousand
characters only.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from triserve.kernel.ragged import pad_sequences


def clean_text(text: str) -> str:
    """NFC-normalise and drop control/format characters other than whitespace (zero-width, bidi overrides)."""
    text = unicodedata.normalize("NFC", text)
    return "".join(ch for ch in text if ch in "\t\n\r " or unicodedata.category(ch)[0] != "C").strip()


CHARS_PER_TOKEN = 16  # English takes ~4-5 characters per WordPiece/BPE token


def char_budget(max_chars: int, max_length: int) -> int:
    """Characters of a text kept before tokenising for a model reading `max_length` tokens: the configured cut
    (limits.text.max_chars), never fewer than CHARS_PER_TOKEN per token."""
    return max(int(max_chars), CHARS_PER_TOKEN * int(max_length))


def prepare_text(text: str, max_chars: int) -> tuple[str, bool]:
    """A text as received -> (its cleaned first `max_chars` characters, whether characters were cut). Surrounding
    whitespace is dropped first (it is never counted as cut); the cut comes before cleaning, so a long text costs
    its first `max_chars` characters only."""
    stripped = text.strip()
    cut = len(stripped) > max_chars
    return clean_text(stripped[:max_chars] if cut else stripped), cut


def refusal(text: str, max_chars: int, hard_max_chars: int) -> tuple[str, str, dict] | None:
    """Why one text is refused (code, message, details), or None: above the hard length limit, or blank after
    removing control characters. The service refuses the request for it (422), a batch job writes an error row."""
    if len(text) > hard_max_chars:
        return ("text_too_long", f"{len(text)} characters, above the hard limit of {hard_max_chars} (longer texts up "
                "to it are truncated and classified)",
                {"limit": hard_max_chars, "length": len(text), "truncated_above": max_chars})
    if not prepare_text(text, max_chars)[0]:
        return ("empty_text", "empty after removing control characters"
                + (f" (within its first {max_chars} characters)" if len(text) > max_chars else ""), {})
    return None


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

    def encode_received(self, texts: Sequence[str], max_chars: int) -> tuple[list[np.ndarray], list[bool]]:
        """Texts as a client sent them -> (ragged ids, truncated per text): each cut at char_budget(max_chars,
        max_length) characters, cleaned, tokenised and truncated at max_length; truncated = characters or tokens
        were cut."""
        budget = char_budget(max_chars, self.max_length)
        prepared = [prepare_text(t, budget) for t in texts]
        ids, overflow = self.encode_with_truncation([text for text, _ in prepared])
        return ids, [tokens_cut or chars_cut for tokens_cut, (_, chars_cut) in zip(overflow, prepared)]

    def encode_padded(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask) padded to the longest text of this call."""
        return pad_sequences(self.encode(texts), self.pad_token_id)
