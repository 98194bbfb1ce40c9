"""text-hf on a tiny random BertForSequenceClassification with MiniLM's real tokenizer: export with softmax, parity,
the transformers-pipeline cross-check on the published artifact through the runner's feeds, refusals, CLI."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.families.text.importers.conftest import TEXT_LABELS, edit_config, minilm_dir
from triserve.families.text.importers.finish import served_probabilities
from triserve.families.text.importers.hf import compare_with_pipeline, pipeline_probabilities, publish_text_hf
from triserve.importers import main
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.result import GateFailed, ImportRefused
from triserve.models.registry import LocalRegistry


@pytest.fixture(scope="module")
def published(tiny_hf_dir, text_eval_csv, tmp_path_factory):
    registry = LocalRegistry(tmp_path_factory.mktemp("registry"))
    out, report = publish_text_hf(tiny_hf_dir, "tiny-bert", "1.0.0", registry, eval_csv=text_eval_csv,
                                  alias="stable")
    return registry, out, report


def test_publishes_probabilities_graph_with_token_type_ids(published):
    registry, out, report = published
    assert [m.name for m in out] == ["tiny-bert"]
    path, m = registry.load_verified("tiny-bert", "stable")
    assert m.task == "text" and m.labels == list(TEXT_LABELS)
    assert [i.name for i in m.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(i.shape == ["batch", "sequence"] and i.dtype == "int64" for i in m.inputs)
    assert [(o.name, o.shape) for o in m.outputs] == [("probabilities", ["batch", 3])]
    assert m.preprocess.max_length == 128 and m.preprocess.pad_token_id == 0 and m.preprocess.lowercase
    assert sorted(f.path for f in m.files) == ["model.onnx", "tokenizer.json"]
    # every gate applied passed, and they are the ones promised
    assert m.gates == {"parity": True, "padding_invariance": True, "pipeline_agreement": True}
    assert {c.case for c in m.parity} >= {"batch1/seq8", "batch4/seq32", "batch4/seq128/truncated"}
    assert max(c.max_abs_diff for c in m.parity) <= 1e-4
    assert m.metrics["pipeline_top1_agreement"] == 1.0 and m.metrics["pipeline_max_abs_diff"] <= 1e-3
    assert 0.0 <= m.metrics["eval_accuracy"] <= 1.0 and m.metrics["eval_n"] == 30
    assert m.source.kind == "user" and "transformers" in m.source.packages
    assert report["pipeline"]["passed"] and not report["tokenizer_converted"]
    # the served graph has the Softmax inside: rows are distributions
    graph = onnx.load(str(path / m.model_file)).graph
    assert [o.name for o in graph.output] == ["probabilities"]
    assert "Softmax" in {n.op_type for n in graph.node}


def test_published_artifact_served_by_runner_path_equals_pipeline(published, tiny_hf_dir):
    """The e2e promise: registry artifact + manifest, tokenised by the gateway's tokenizer and fed by the runner's
    families/text/runtime.feeds (token_type_ids included), answers what transformers' pipeline answers."""
    registry, _, _ = published
    path, m = registry.load_verified("tiny-bert", "stable")
    sess = ort_session(path / m.model_file, threads=1)
    assert "token_type_ids" in [i.name for i in sess.get_inputs()]
    texts = ["I loved this film", "terrible, boring, far too long", "it was fine I guess",
             "A " + "very " * 300 + "long review that the tokenizer must cut at max_length"]
    cmp = compare_with_pipeline(tiny_hf_dir, path, m, texts)
    assert cmp["passed"], cmp
    assert cmp["top1_agreement"] == 1.0 and cmp["max_abs_diff"] <= 1e-4
    ref = pipeline_probabilities(tiny_hf_dir, texts, list(TEXT_LABELS), m.preprocess.max_length)
    got = served_probabilities(path, m, texts, session=sess)
    np.testing.assert_allclose(got, ref, atol=1e-4)
    assert np.ptp(got.argmax(1)) > 0 or got.max() > 0.5  # not a flat, uninformative model


def _refused(model_dir, tmp_path, match, **kw):
    registry = LocalRegistry(tmp_path / "registry")
    with pytest.raises(ImportRefused, match=match):
        publish_text_hf(model_dir, "bad", "1.0.0", registry, **kw)
    assert registry.models() == []  # nothing published


@pytest.mark.parametrize("changes, match", [
    ({"problem_type": "multi_label_classification"}, "multi_label_classification"),
    ({"problem_type": "regression"}, "regression"),
    ({"num_labels": 4}, "num_labels 4 but id2label names 3"),
    ({"id2label": {"0": "a", "1": "b", "2": "c", "3": "d"}, "label2id": {"a": 0, "b": 1, "c": 2, "d": 3}},
     "cannot load it|classifier outputs"),  # the checkpoint's classifier has 3 rows
    ({"id2label": {"0": "x"}, "label2id": {"x": 0}}, "single-logit|cannot load"),
    ({"id2label": {"0": "a", "1": "a", "2": "b"}, "label2id": None}, "duplicate"),
    ({"architectures": ["BertForTokenClassification"]}, "no sequence classification head"),
])
def test_refusals_publish_nothing(tiny_hf_dir, tmp_path, changes, match):
    _refused(edit_config(tiny_hf_dir, tmp_path / "m", **changes), tmp_path, match)


def test_refuses_bare_encoder_and_missing_head(tiny_st_dir, tiny_hf_dir, tmp_path):
    # a sentence-transformers folder: architectures ['BertModel'] -> pointed at text-sklearn
    _refused(tiny_st_dir, tmp_path, "text-sklearn")
    # no architectures and an encoder-only checkpoint: the head would be initialised at random
    enc = edit_config(tiny_st_dir, tmp_path / "enc", architectures=None,
                      id2label={"0": "a", "1": "b"}, label2id={"a": 0, "b": 1})
    _refused(enc, tmp_path, "missing from the checkpoint")
    # no config at all
    empty = tmp_path / "empty"
    empty.mkdir()
    _refused(empty, tmp_path, "no config.json")
    # a max length beyond the position embeddings
    _refused(tiny_hf_dir, tmp_path, "exceeds the model's limit", max_length=512)


def test_slow_tokenizer_is_converted_and_still_agrees(tiny_hf_dir, tmp_path):
    slow = tmp_path / "slow"
    shutil.copytree(tiny_hf_dir, slow)
    (slow / "tokenizer.json").unlink()
    shutil.copy(minilm_dir() / "vocab.txt", slow / "vocab.txt")
    registry = LocalRegistry(tmp_path / "registry")
    out, report = publish_text_hf(slow, "slow-tok", "1.0.0", registry)
    assert report["tokenizer_converted"] and "converted" in report["warnings"][0]
    assert out[0].gates["pipeline_agreement"] and out[0].metrics["pipeline_top1_agreement"] == 1.0


def test_cli_refusal_exit_2(tiny_hf_dir, tmp_path, capsys):
    bad = edit_config(tiny_hf_dir, tmp_path / "m", problem_type="multi_label_classification")
    rc = main(["text-hf", "--model-dir", str(bad), "--name", "x", "--version", "1.0.0",
               "--registry", str(tmp_path / "registry"), "--license", "MIT"])  # refused for the head, not the licence
    assert rc == 2 and capsys.readouterr().out == ""
    assert LocalRegistry(tmp_path / "registry").models() == []


def test_existing_version_refused_before_work(published, tiny_hf_dir):
    from triserve.models.registry import VersionExists

    registry, _, _ = published
    with pytest.raises(VersionExists):
        publish_text_hf(tiny_hf_dir, "tiny-bert", "1.0.0", registry)


def test_gate_failed_is_the_base(published):
    assert issubclass(ImportRefused, GateFailed)
    assert json.loads(json.dumps(published[2]["metrics"]))  # the report is JSON-able
