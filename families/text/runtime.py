"""Runner-side hooks of the text family (numpy only: the runner tier imports this and nothing else of it)."""
from __future__ import annotations

import numpy as np

from triserve.families.text.manifest import TextPreprocess
from triserve.kernel.ragged import pad_sequences
from triserve.models.manifest import Manifest, preprocess_as

# Items are token-id sequences of their own length: the runner groups them by length (runners/ragged.py) and
# feeds() pads each group to its longest.
RAGGED = True


def feeds(manifest: Manifest, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Ragged token-id rows padded to the longest in the call, with the attention mask; token_type_ids (BERT-style
    graphs) are all zero for single-sequence classification."""
    ids, mask = pad_sequences(xs, preprocess_as(manifest, TextPreprocess).pad_token_id)
    out = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in input_names:
        out["token_type_ids"] = np.zeros_like(ids)
    return out


def warmup_sizes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    """Short, medium and the longest sequences the tokenizer produces."""
    longest = preprocess_as(manifest, TextPreprocess).max_length
    return {"sequence": tuple(sorted({min(8, longest), min(64, longest), longest}))}
