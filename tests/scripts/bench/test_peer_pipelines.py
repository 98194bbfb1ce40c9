"""scripts/bench/peers/pipelines.py: the batched work of the KServe and MLServer peers, on a fake session (the text
side with a tiny real tokenizer, so padding and top-k ordering are the real ones)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from scripts.bench.peers import pipelines


class FakeSession:
    """Records the feeds; answers fixed probabilities per row."""

    def __init__(self, probs: np.ndarray):
        self.probs = probs
        self.feeds: list[dict] = []

    def run(self, _outputs, feeds):
        self.feeds.append(feeds)
        return [self.probs[: len(next(iter(feeds.values())))]]


@pytest.fixture()
def text_model(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "play": 2, "jazz": 3, "now": 4}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    manifest = {"preprocess": {"tokenizer_file": "tokenizer.json", "max_length": 8}, "labels": ["a", "b", "c", "d"]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path, manifest


def test_text_classifier_pads_per_call_and_ranks_labels(text_model):
    d, manifest = text_model
    sess = FakeSession(np.array([[0.1, 0.6, 0.2, 0.1], [0.5, 0.1, 0.1, 0.3]], np.float32))
    out = pipelines.TextClassifier(d, manifest, sess, top_k=3)(["play jazz now", "jazz"])
    ids, mask = sess.feeds[0]["input_ids"], sess.feeds[0]["attention_mask"]
    assert ids.tolist() == [[2, 3, 4], [3, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert [r.label for r in out] == ["b", "a"]
    assert out[1].top_k == [("a", pytest.approx(0.5)), ("d", pytest.approx(0.3)), ("b", pytest.approx(0.1))]
    body = out[0].as_dict()
    assert body["label"] == "b" and [x["label"] for x in body["top_k"]] == ["b", "c", "a"]  # ties: stable order
    assert body["score"] == pytest.approx(0.6)


def test_padded_detections_pad_to_the_largest_count():
    dets = [[(2, [1.0, 2.0, 3.0, 4.0], 0.9), (0, [5.0, 6.0, 7.0, 8.0], 0.5)], []]
    t = pipelines.padded_detections(dets)
    assert t["count"].tolist() == [[2], [0]] and t["count"].dtype == np.int32
    assert t["boxes"].shape == (2, 2, 4) and t["boxes"][0, 1].tolist() == [5.0, 6.0, 7.0, 8.0]
    assert t["classes"].tolist() == [[2, 0], [-1, -1]]
    assert t["scores"][0].tolist() == pytest.approx([0.9, 0.5]) and t["scores"][1].tolist() == [0.0, 0.0]
    empty = pipelines.padded_detections([[]])
    assert empty["boxes"].shape == (1, 1, 4) and empty["count"].tolist() == [[0]]  # k >= 1: a valid tensor
