"""text-sklearn: a tiny sentence-transformers folder + scikit-learn heads (multinomial LR, SGD log-loss one-vs-rest,
binary LR) fused into one graph and checked against SentenceTransformer.encode + predict_proba; refusals."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("sklearn")
pytest.importorskip("joblib")
import joblib

from tests.families.text.importers.conftest import TEXT_LABELS
from triserve.families.text.importers.finish import check_texts, served_probabilities
from triserve.families.text.importers.sklearn_head import publish_text_sklearn, st_probabilities
from triserve.models.importing.result import ImportRefused
from triserve.models.registry import LocalRegistry


@pytest.fixture(scope="module")
def st_data(tiny_st_dir):
    """(SentenceTransformer, embeddings, labels) for fitting heads."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tiny_st_dir), device="cpu")
    texts = check_texts(90)
    emb = st.encode(texts, convert_to_numpy=True, show_progress_bar=False)
    y = np.array(TEXT_LABELS)[np.arange(len(texts)) % 3]
    return st, emb, y


def _dump(tmp_path, name, estimator):
    path = tmp_path / f"{name}.joblib"
    joblib.dump(estimator, path)
    return path


def test_multinomial_lr_publishes_and_agrees(tiny_st_dir, st_data, text_eval_csv, tmp_path):
    from sklearn.linear_model import LogisticRegression

    st, emb, y = st_data
    clf = LogisticRegression(max_iter=1000, C=100.0).fit(emb, y)
    registry = LocalRegistry(tmp_path / "registry")
    out, report = publish_text_sklearn(tiny_st_dir, _dump(tmp_path, "lr", clf), "tiny-st", "1.0.0", registry,
                                       eval_csv=text_eval_csv, alias="stable")
    m = out[0]
    assert report["form"] == "softmax" and report["pooling"] == "mean" and report["normalize"]
    assert m.labels == sorted(TEXT_LABELS)  # classes_ order
    assert [i.name for i in m.inputs] == ["input_ids", "attention_mask"]
    assert m.preprocess.max_length == 64  # the folder's max_seq_length
    assert m.gates == {"parity": True, "padding_invariance": True, "sentence_transformers_agreement": True}
    assert m.metrics["sentence_transformers_top1_agreement"] == 1.0
    assert m.metrics["sentence_transformers_max_abs_diff"] <= 1e-4
    # the registry copy, served in-process, equals the source framework on fresh texts (one truncated)
    path, manifest = registry.load_verified("tiny-st", "stable")
    texts = ["how do i reset my password", "the weather is " + "really " * 100 + "nice"]
    np.testing.assert_allclose(served_probabilities(path, manifest, texts),
                               st_probabilities(st, clf, texts, manifest.preprocess.max_length), atol=1e-4)


@pytest.mark.parametrize("kind, form", [("sgd", "ovr-sigmoid"), ("binary", "binary-sigmoid")])
def test_other_linear_forms(tiny_st_dir, st_data, tmp_path, kind, form):
    from sklearn.linear_model import LogisticRegression, SGDClassifier

    _, emb, y = st_data
    if kind == "sgd":
        clf = SGDClassifier(loss="log_loss", random_state=0).fit(emb, y)
    else:
        clf = LogisticRegression(max_iter=1000).fit(emb, y == "positive")
    labels = tmp_path / "names.txt"
    labels.write_text("other\npositive\n" if kind == "binary" else "")
    out, report = publish_text_sklearn(tiny_st_dir, _dump(tmp_path, kind, clf), f"st-{kind}", "1.0.0",
                                       LocalRegistry(tmp_path / "registry"), max_length=32,
                                       labels_file=labels if kind == "binary" else None)
    assert report["form"] == form and out[0].gates["sentence_transformers_agreement"]
    assert out[0].preprocess.max_length == 32
    if kind == "binary":
        assert out[0].labels == ["other", "positive"]


def _refused(tmp_path, encoder, classifier, match):
    registry = LocalRegistry(tmp_path / "registry")
    with pytest.raises(ImportRefused, match=match):
        publish_text_sklearn(encoder, classifier, "bad", "1.0.0", registry)
    assert registry.models() == []


@pytest.mark.filterwarnings("ignore::FutureWarning")  # SVC(probability=True) is deprecated in sklearn 1.9
def test_classifier_refusals(tiny_st_dir, st_data, tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC, LinearSVC

    _, emb, y = st_data
    _refused(tmp_path, tiny_st_dir, _dump(tmp_path, "lsvc", LinearSVC().fit(emb, y)), "no predict_proba")
    _refused(tmp_path, tiny_st_dir, _dump(tmp_path, "svc", SVC(kernel="linear", probability=True,
                                                               random_state=0).fit(emb, y)),
             "not a closed form")
    _refused(tmp_path, tiny_st_dir, _dump(tmp_path, "pipe", make_pipeline(StandardScaler(),
                                                                          LogisticRegression()).fit(emb, y)),
             "bare linear classifier")
    _refused(tmp_path, tiny_st_dir, _dump(tmp_path, "narrow", LogisticRegression().fit(emb[:, :16], y)),
             "16-d inputs but the encoder gives 32-d")
    junk = tmp_path / "junk.joblib"
    junk.write_bytes(b"not a pickle")
    _refused(tmp_path, tiny_st_dir, junk, "cannot be loaded")


def test_encoder_refusals(tiny_st_dir, tiny_hf_dir, st_data, tmp_path):
    from sklearn.linear_model import LogisticRegression

    _, emb, y = st_data
    clf = _dump(tmp_path, "lr", LogisticRegression().fit(emb, y))
    _refused(tmp_path, tiny_hf_dir, clf, "no modules.json")  # a transformers folder, no pooling defined
    maxpool = tmp_path / "maxpool"
    shutil.copytree(tiny_st_dir, maxpool)
    cfg_path = maxpool / "1_Pooling" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["pooling_mode"] = "max"
    cfg_path.write_text(json.dumps(cfg))
    _refused(tmp_path, maxpool, clf, "only mean or CLS pooling")
    dense = tmp_path / "dense"
    shutil.copytree(tiny_st_dir, dense)
    mods = json.loads((dense / "modules.json").read_text())
    mods.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (dense / "modules.json").write_text(json.dumps(mods))
    _refused(tmp_path, dense, clf, r"\['Dense'\] not supported")
