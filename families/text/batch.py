"""Offline adapter of the text family (kernel/batch.py's contract): one text -> token ids -> top-k labels, as a row.

The same steps as the /v1/classify pipeline (families/text/family.py), per text instead of per request: the hard
length limit and blank texts refuse that text only (an error row); longer texts are cut at the character budget and
tokens at the model's max length (TextTokenizer.encode_received), and the row says `truncated` with the `chars`
received. The runner items are the ragged id arrays the service sends; runtime.feeds pads them per call.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triserve.families.text.limits import Limits
from triserve.families.text.manifest import TextPreprocess
from triserve.families.text.postprocess import top_k
from triserve.families.text.preprocess import TextTokenizer, refusal
from triserve.kernel.batch import Option, Prepared
from triserve.models.manifest import Manifest, preprocess_as


class Adapter:
    FAMILY = "text"
    COMMAND = "classify"
    CHUNK_SIZE, SHARD_SIZE = 256, 4096
    OPTIONS = (Option("top_k", "labels kept per text", int, 3),)
    SOURCE = "texts"
    HEAVY_FINISH = False
    COLUMNS = {"label": "str", "score": "f64", "top_labels": "list<str>", "top_scores": "list<f64>",
               "tokens": "i64", "truncated": "bool", "chars": "i64"}

    def __init__(self, directory: Path, manifest: Manifest, limits: Limits, options: dict[str, Any]):
        pre = preprocess_as(manifest, TextPreprocess)
        self.tokenizer = TextTokenizer(Path(directory) / pre.tokenizer_file, pre.max_length, pre.pad_token_id)
        self.labels = manifest.labels
        self.limits = limits
        self.top_k = int(options.get("top_k") or 3)
        if not 1 <= self.top_k <= limits.max_top_k:
            raise ValueError(f"top_k {self.top_k} outside 1..{limits.max_top_k} (limits.text.max_top_k)")

    def check(self, text: object, index: int) -> tuple[str, str] | None:
        """Why this text is refused (code, message), or None: what the service refuses a request for, per text."""
        lim = self.limits
        if not isinstance(text, str):
            return "invalid_text", f"not a string ({type(text).__name__})"
        refused = refusal(text, lim.max_chars, lim.hard_max_chars)
        return None if refused is None else refused[:2]

    def prepare(self, records: Sequence[dict]) -> Prepared:
        out = Prepared(keys=[str(r["key"]) for r in records], states=[None] * len(records))
        texts, where = [], []
        for i, record in enumerate(records):
            refused = self.check(record.get("text"), i)
            if refused is not None:
                out.errors[i] = refused
            else:
                texts.append(record["text"])
                where.append(i)
        if texts:
            ids, truncated = self.tokenizer.encode_received(texts, self.limits.max_chars)
            for i, text, x, cut in zip(where, texts, ids, truncated):
                out.items.append(x)
                out.owners.append(i)
                out.states[i] = (len(x), bool(cut), len(text))
        return out

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]:
        return prepared.rows(outputs, self.COLUMNS, self._row)

    def _row(self, outs: list[np.ndarray], state: tuple[int, bool, int]) -> dict[str, Any]:
        probs = np.asarray(outs[0])
        best = top_k(probs, self.top_k)
        tokens, truncated, chars = state
        return {"label": self.labels[best[0]], "score": round(float(probs[best[0]]), 6),
                "top_labels": [self.labels[j] for j in best], "top_scores": [round(float(probs[j]), 6) for j in best],
                "tokens": tokens, "truncated": truncated, "chars": chars}
