"""text-onnx: a user's ONNX (logits) + tokenizer.json + labels: Softmax appended and proved against the given graph,
axes renamed, refusals (input names, label count, logits vs probabilities, fixed axes, accuracy gate), CLI."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.families.text.importers.conftest import TEXT_LABELS
from triserve.families.text.importers.finish import served_probabilities
from triserve.families.text.importers.onnx_graph import publish_text_onnx, softmax
from triserve.importers import main
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.result import GateFailed, ImportRefused
from triserve.models.registry import LocalRegistry


@pytest.fixture(scope="module")
def published(tiny_text_onnx, text_eval_csv, tmp_path_factory):
    model, tok, labels = tiny_text_onnx
    registry = LocalRegistry(tmp_path_factory.mktemp("registry"))
    out, report = publish_text_onnx(model, tok, labels, "tiny-onnx", "1.0.0", registry, outputs="logits",
                                    max_length=64, eval_csv=text_eval_csv, alias="canary")
    return registry, out, report


def test_logits_graph_gets_softmax_and_named_axes(published, tiny_text_onnx):
    registry, out, report = published
    path, m = registry.load_verified("tiny-onnx", "canary")
    assert m.labels == list(TEXT_LABELS) and m.preprocess.max_length == 64 and m.preprocess.pad_token_id == 0
    assert [i.name for i in m.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert report["rewrite"]["appended"] == "Softmax(axis=-1)"
    graph = onnx.load(str(path / m.model_file)).graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.input}
    assert dims == {n: ["batch", "sequence"] for n in ("input_ids", "attention_mask", "token_type_ids")}
    assert [o.name for o in graph.output] == ["probabilities"] and graph.node[-1].op_type == "Softmax"
    assert m.gates == {"parity": True, "padding_invariance": True}
    assert max(c.max_abs_diff for c in m.parity) <= 1e-5
    assert m.metrics["eval_n"] == 30 and "eval_macro_f1" in m.metrics
    # the served path == the original graph's logits through a numpy softmax
    texts = ["great movie", "awful plot and worse acting, I walked out after twenty minutes"]
    served = served_probabilities(path, m, texts)
    from triserve.families.text.preprocess import TextTokenizer

    tok = TextTokenizer(path / "tokenizer.json", 64)
    original = ort_session(tiny_text_onnx[0], threads=1)
    for text, row in zip(texts, served):
        ids = tok.encode([text])[0][None]
        logits = original.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                     "token_type_ids": np.zeros_like(ids)})[0]
        np.testing.assert_allclose(row, softmax(logits)[0], atol=1e-5)


def test_probabilities_graph_is_kept(published, tmp_path):
    """The published graph (already probabilities) imported again with --outputs probabilities: an Identity."""
    registry, _, _ = published
    path, m = registry.load_verified("tiny-onnx", "canary")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(list(TEXT_LABELS)))
    reg2 = LocalRegistry(tmp_path / "registry")
    out, report = publish_text_onnx(path / "model.onnx", path / "tokenizer.json", labels, "again", "1.0.0", reg2,
                                    outputs="probabilities")
    assert report["rewrite"]["appended"] == "Identity" and out[0].preprocess.max_length == 64
    assert out[0].gates["parity"]


def _graph(path, inputs=("input_ids", "attention_mask"), n_out=3, dims=("b", "s"), dtype=TensorProto.INT64,
           probabilities=False, ignore_mask=False):
    """A minimal text 'classifier': embedding lookup, masked mean, a linear layer (-> softmax when probabilities)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(30522, 8)).astype(np.float32), "emb"),
             numpy_helper.from_array(rng.normal(size=(8, n_out)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1], np.int64), "axes1")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
             *([helper.make_node("Shape", ["input_ids"], ["ids_shape"]),  # every position counts, pads included
                helper.make_node("ConstantOfShape", ["ids_shape"], ["mf"],
                                 value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))] if ignore_mask
               else [helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT)]),
             helper.make_node("Unsqueeze", ["mf", "axes1b"], ["mu"]),
             helper.make_node("Mul", ["h", "mu"], ["hm"]),
             helper.make_node("ReduceSum", ["hm", "axes1"], ["sum"], keepdims=0),
             helper.make_node("ReduceSum", ["mf", "axes1"], ["cnt"], keepdims=1),
             helper.make_node("Div", ["sum", "cnt"], ["pooled"]),
             helper.make_node("MatMul", ["pooled", "w"], ["logits" if not probabilities else "z"])]
    inits.append(numpy_helper.from_array(np.array([2], np.int64), "axes1b"))
    if probabilities:
        nodes.append(helper.make_node("Softmax", ["z"], ["logits"], axis=-1))
    if ignore_mask:
        nodes.append(helper.make_node("Identity", ["attention_mask"], ["mask_unused"]))
    for extra in inputs[2:]:  # unused extra inputs (e.g. position_ids), still declared
        nodes.append(helper.make_node("Identity", [extra], [f"{extra}_unused"]))
    ins = [helper.make_tensor_value_info(n, dtype if n == "input_ids" else TensorProto.INT64, list(dims))
           for n in inputs]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [dims[0], n_out])]
    model = helper.make_model(helper.make_graph(nodes, "t", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _refused(tmp_path, model, tokenizer, labels, match, exc=ImportRefused, **kw):
    registry = LocalRegistry(tmp_path / "registry")
    kw.setdefault("outputs", "logits")
    kw.setdefault("max_length", 32)
    with pytest.raises(exc, match=match):
        publish_text_onnx(model, tokenizer, labels, "bad", "1.0.0", registry, **kw)
    assert registry.models() == []


def test_minimal_graph_imports(tiny_text_onnx, tmp_path):
    _, tok, labels = tiny_text_onnx
    out, _ = publish_text_onnx(_graph(tmp_path / "g.onnx"), tok, labels, "mini", "1.0.0",
                               LocalRegistry(tmp_path / "registry"), outputs="logits", max_length=32)
    assert [i.name for i in out[0].inputs] == ["input_ids", "attention_mask"]


def test_refusals_publish_nothing(tiny_text_onnx, tmp_path, text_eval_csv):
    _, tok, labels = tiny_text_onnx
    four = tmp_path / "four.txt"
    four.write_text("a\nb\nc\nd\n")
    _refused(tmp_path, _graph(tmp_path / "pos.onnx", inputs=("input_ids", "attention_mask", "position_ids")), tok,
             labels, r"\['position_ids'\] are not fed by the text runner")
    _refused(tmp_path, _graph(tmp_path / "nomask.onnx", inputs=("input_ids",)), tok, labels, "no attention_mask")
    _refused(tmp_path, _graph(tmp_path / "g.onnx"), tok, four, "3 classes but 4 labels")
    _refused(tmp_path, _graph(tmp_path / "g.onnx"), tok, labels, "look like logits", outputs="probabilities")
    _refused(tmp_path, _graph(tmp_path / "p.onnx", probabilities=True), tok, labels, "already a distribution")
    _refused(tmp_path, _graph(tmp_path / "fixed.onnx", dims=(1, 16)), tok, labels, "fixed dims")
    _refused(tmp_path, _graph(tmp_path / "i32.onnx", dtype=TensorProto.INT32), tok, labels, "INT32")
    # declares attention_mask but averages over every position: padded answers differ from unpadded ones
    _refused(tmp_path, _graph(tmp_path / "nomaskuse.onnx", ignore_mask=True), tok, labels, "does not honour",
             exc=GateFailed)
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("text,label\nhello,positive\nbye,happy\n")
    _refused(tmp_path, _graph(tmp_path / "g.onnx"), tok, labels, "not among the model's labels", eval_csv=bad_csv)
    _refused(tmp_path, _graph(tmp_path / "g.onnx"), tok, labels, "min-accuracy", exc=GateFailed,
             eval_csv=text_eval_csv, min_accuracy=0.99)


def test_cli_publishes_and_answers_json(tiny_text_onnx, tmp_path, capsys):
    model, tok, labels = tiny_text_onnx
    registry = tmp_path / "registry"
    args = ["text-onnx", "--model", str(model), "--tokenizer", str(tok), "--labels", str(labels), "--outputs",
            "logits", "--name", "cli-text", "--version", "2.0.0", "--max-length", "32", "--registry", str(registry),
            "--alias", "stable", "--license", "LicenseRef-acme-internal"]
    assert main(args) == 0
    assert LocalRegistry(registry).manifest("cli-text", "2.0.0").source.license == "LicenseRef-acme-internal"
    answer = json.loads(capsys.readouterr().out)
    assert answer["published"][0]["name"] == "cli-text" and answer["published"][0]["gates"]["parity"]
    assert LocalRegistry(registry).aliases("cli-text") == {"stable": "2.0.0"}
    assert main(args) == 2  # immutable: the same version again is refused
