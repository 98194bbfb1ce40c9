"""The ONNX detection importer on tiny synthetic ultralytics-like graphs: batch rewrite + proof, refusals, CLI."""
from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from triserve.families.detection.importers.onnx_graph import import_detection_onnx, publish_detection_onnx
from triserve.families.detection.importers.onnx_inspect import inspect_detector
from triserve.families.detection.importers.params import ImportParams
from triserve.models.importing import batching
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.labels import read_labels
from triserve.models.importing.photos import user_photos
from triserve.models.importing.publish import publish
from triserve.models.importing.result import ImportRefused
from triserve.models.registry import LocalRegistry

FAST = ImportParams(latency_repeats=3)


def _rows(n: int, size: int = 32, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3, size, size), dtype=np.float32)


def _import(path: Path, tmp_path: Path, photo_dir: Path, name: str = "tiny-det", **kw):
    return import_detection_onnx(path, name, "1.0.0", tmp_path / "work", photos=user_photos(photo_dir),
                                 verify_ultralytics=False, params=FAST, **kw)


# -- the rewrite and its proof ----------------------------------------------------------------------------------------
def test_rewrite_makes_fixed_batch_graph_dynamic(make_detector):
    path = make_detector()
    original = onnx.load(str(path))
    # the original really is pinned: its input (and its Reshape constants) say batch 1, so batch 2 is refused
    with pytest.raises(InvalidArgument, match="invalid dimensions for input: images"):
        ort_session(path, threads=1).run(None, {"images": _rows(2)})
    rewritten, rw = batching.make_batch_dynamic(original)
    assert rw.io == ["images[0]: 1 -> batch", "output0[0]: 1 -> batch"]
    assert sorted(rw.reshapes) == ["/model.22/Reshape: [1, 6, -1] -> [0, 6, -1]",
                                   "/model.22/dfl/Reshape: [1, 4, 16] -> [-1, 4, 16]"]
    assert not rw.suspects
    # the original's constants are gone (they were only used by the rewritten Reshapes), the copy is untouched
    names = {t.name for t in rewritten.graph.initializer}
    assert "/model.22/Constant_output_0" not in names and "/model.22/Constant_output_0" in {
        t.name for t in original.graph.initializer}
    onnx.checker.check_model(rewritten)

    out = path.with_name("dyn.onnx")
    batching.save(rewritten, out)
    a, b = ort_session(path, threads=1), ort_session(out, threads=1)

    def run(s):
        return partial(s.run, None)

    proof = batching.prove_dynamic_batch(run(a), run(b), "images", _rows(4),
                                         {"boxes": (slice(0, 4), 32e-4), "scores": (slice(4, None), 1e-4)})
    assert proof.passed, proof.reason
    assert [c.case for c in proof.checks][:2] == ["batch1-vs-original-batch1/boxes", "batch1-vs-original-batch1/scores"]
    assert {c.case.split("/")[0] for c in proof.checks} == {"batch1-vs-original-batch1", "batch4-vs-original-batch1",
                                                             "batch2-vs-original-batch1"}
    assert max(c.max_abs_diff for c in proof.checks) <= 1e-5
    # an odd batch size the proof did not use works too, row by row
    x = _rows(3, seed=7)
    got = b.run(None, {"images": x})[0]
    for i in range(3):
        np.testing.assert_allclose(got[i:i + 1], a.run(None, {"images": x[i:i + 1]})[0], atol=1e-5)


def test_proof_catches_a_batch_pin_the_rewrite_cannot_see(make_detector):
    path = make_detector(pin_rows=True)  # Slice rows 0:1 on axis 0 before the output
    rewritten, rw = batching.make_batch_dynamic(onnx.load(str(path)))
    out = path.with_name("dyn.onnx")
    batching.save(rewritten, out)
    a, b = ort_session(path, threads=1), ort_session(out, threads=1)
    proof = batching.prove_dynamic_batch(lambda f: a.run(None, f), lambda f: b.run(None, f), "images", _rows(4),
                                         {"boxes": (slice(0, 4), 32e-4), "scores": (slice(4, None), 1e-4)})
    assert not proof.passed
    assert "batch4-vs-original-batch1" in proof.reason and "output batch 1 != 4" in proof.reason
    assert json.loads(json.dumps([c.model_dump() for c in proof.checks]))  # finite numbers only: JSON round trip


def test_already_dynamic_graph_is_left_alone(make_detector):
    path = make_detector(batch="N")
    model = onnx.load(str(path))
    for t in model.graph.initializer:  # a dynamic export reshapes with 0 / -1, not 1
        if t.name == "/model.22/Constant_output_0":
            t.CopyFrom(onnx.numpy_helper.from_array(np.array([0, 6, -1], np.int64), t.name))
        if t.name == "/model.22/dfl/Constant_output_0":
            t.CopyFrom(onnx.numpy_helper.from_array(np.array([-1, 4, 16], np.int64), t.name))
    rewritten, rw = batching.make_batch_dynamic(model)
    assert rw.already_dynamic and not rw.reshapes
    assert rw.io == ["images[0]: N -> batch", "output0[0]: N -> batch"]


# -- the import -------------------------------------------------------------------------------------------------------
def test_import_publishes_a_proved_dynamic_batch_model(make_detector, tmp_path, photo_dir):
    path = make_detector()
    result = _import(path, tmp_path, photo_dir)
    m = result.primary.manifest
    assert result.fallback is None
    assert m.inputs[0].shape == ["batch", 3, 32, 32] and m.outputs[0].shape == ["batch", 6, 16]
    assert m.gates == {"dynamic_batch": True, "batch_proof": True}
    assert m.labels == ["class0", "class1"] and m.task == "detection" and m.variant == "primary"
    assert (m.preprocess.imgsz, m.preprocess.letterbox, m.preprocess.pad_value, m.preprocess.color_order) == (
        32, True, 114, "RGB")
    assert m.source.kind == "user" and "license per the ONNX metadata" in m.source.description
    assert {c.case for c in m.parity} >= {"batch4-vs-original-batch1/boxes", "batch2-vs-original-batch1/scores"}
    assert all(c.passed for c in m.parity)
    assert m.metrics["batch_proof_max_abs_diff_scores"] <= 1e-4 and m.metrics["ms_per_image"] > 0
    assert set(m.reference) == {"confidence", "boxes_per_image"}
    assert m.source.recipe["batch_rewrite"]["proved"] is True

    registry = LocalRegistry(tmp_path / "registry")
    published = publish(registry, result, alias="stable")
    assert [p.name for p in published] == ["tiny-det"]
    directory, loaded = registry.load_verified("tiny-det", "stable")
    session = ort_session(directory / loaded.model_file, threads=1)
    x = _rows(5, seed=3)
    batched = session.run(None, {"images": x})[0]
    original = ort_session(path, threads=1)
    for i in range(5):
        np.testing.assert_allclose(batched[i:i + 1], original.run(None, {"images": x[i:i + 1]})[0], atol=1e-5)
    assert publish(registry, result, alias="stable") == []  # already there, alias already right: nothing moves
    assert len(registry.alias_log("tiny-det")) == 1


def test_import_falls_back_to_the_original_unbatched_graph_when_the_proof_fails(make_detector, tmp_path, photo_dir):
    path = make_detector(pin_rows=True)
    result = _import(path, tmp_path, photo_dir)
    m = result.primary.manifest
    assert m.gates["dynamic_batch"] is False and m.gates["batch_proof"] is False
    assert m.inputs[0].shape == [1, 3, 32, 32] and m.outputs[0].shape == [1, 6, 16]
    assert (result.primary.staging / "model.onnx").read_bytes() == path.read_bytes()  # the original, untouched
    assert any(not c.passed for c in m.parity)
    assert "output batch 1 != 4" in result.report["batch_proof_reason"]
    assert m.source.recipe["batch_rewrite"]["proved"] is False


def test_labels_file_and_imgsz_replace_missing_metadata(make_detector, tmp_path, photo_dir):
    path = make_detector(names=False, imgsz_meta=False, dynamic_spatial=True)
    with pytest.raises(ImportRefused, match="pass --imgsz"):
        inspect_detector(path, labels=["a", "b"])
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\n")
    info = inspect_detector(path, labels=read_labels(labels), imgsz=32)
    assert (info.labels, info.imgsz, info.labels_from, info.dynamic_spatial) == (["cat", "dog"], 32, "labels file",
                                                                                 True)
    result = _import(path, tmp_path, photo_dir, labels=read_labels(labels), imgsz=32)
    assert result.primary.manifest.inputs[0].shape == ["batch", 3, "height", "width"]
    assert result.primary.manifest.labels == ["cat", "dog"]


def test_read_labels_formats(tmp_path):
    (tmp_path / "a.yaml").write_text("path: x\nnames:\n  0: person\n  1: car\n")
    (tmp_path / "b.json").write_text(json.dumps(["x", "y", "z"]))
    (tmp_path / "c.txt").write_text("one\n\ntwo\n")
    assert read_labels(tmp_path / "a.yaml") == ["person", "car"]
    assert read_labels(tmp_path / "b.json") == ["x", "y", "z"]
    with pytest.raises(ImportRefused, match="no blank lines"):
        read_labels(tmp_path / "c.txt")


# -- refusals: a reason, and nothing published ------------------------------------------------------------------------
@pytest.mark.parametrize("kw, labels, reason", [
    ({"names": False}, None, "no class names.*--labels FILE"),
    ({"head": "segment", "task": None}, None, "segmentation model: .*mask coefficients"),
    ({"head": "segment", "task": "segment"}, None, "segmentation model .*mask coefficients"),
    ({"head": "end2end_raw", "nc": 3, "task": None}, None,
     r"output \[1, 16, 6\] has the end-to-end layout \[b, max_det, 6\] but is not ultralytics'.*scores outside"),
    ({"task": "pose"}, None, "pose model"),
    ({"batch": 2}, None, "fixed batch 2"),
    ({}, ["a", "b", "c"], "labels file has 3 classes but the ONNX metadata names 2"),
    ({"nc": 3, "names": False}, ["a", "b"], r"output0 \[1, 7, 16\] has 7 channels, expected 4 \+ 2 classes = 6"),
])
def test_refusals_publish_nothing(make_detector, tmp_path, photo_dir, kw, labels, reason):
    path = make_detector(**kw)
    registry = LocalRegistry(tmp_path / "registry")
    labels_file = None
    if labels:
        labels_file = tmp_path / "labels.txt"
        labels_file.write_text("\n".join(labels))
    with pytest.raises(ImportRefused, match=reason):
        publish_detection_onnx(path, "refused", "1.0.0", registry, labels_file=labels_file, images=photo_dir,
                               verify_ultralytics=False, fallback_name="refused-int8")
    assert registry.models() == []


def test_not_onnx_is_refused(tmp_path):
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ImportRefused, match="not a readable ONNX model"):
        inspect_detector(bad)


# -- CLI --------------------------------------------------------------------------------------------------------------
def test_cli(make_detector, tmp_path, photo_dir, capsys):
    from triserve.importers import build_parser, main

    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    assert set(sub.choices) >= {"detection-onnx", "coco-default", "detection-pt"}

    reg = tmp_path / "registry"
    common = ["--registry", str(reg), "--images", str(photo_dir), "--no-verify"]
    assert main(["detection-onnx", "--model", str(make_detector(names=False)), "--name", "cli-det", "--version",
                 "1.0.0", *common]) == 2
    assert LocalRegistry(reg).models() == []
    capsys.readouterr()
    assert main(["detection-onnx", "--model", str(make_detector()), "--name", "cli-det", "--version", "1.0.0",
                 "--alias", "canary", *common]) == 2  # the graph's metadata states no licence: --license SPDX
    assert LocalRegistry(reg).models() == []
    assert main(["detection-onnx", "--model", str(make_detector()), "--name", "cli-det", "--version", "1.0.0",
                 "--alias", "canary", "--license", "Apache-2.0", *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["published"][0]["name"] == "cli-det" and out["published"][0]["gates"]["dynamic_batch"] is True
    assert LocalRegistry(reg).aliases("cli-det") == {"canary": "1.0.0"}
    assert LocalRegistry(reg).manifest("cli-det", "1.0.0").source.license == "Apache-2.0"
    # versions are immutable: the same version again is refused before any work
    assert main(["detection-onnx", "--model", str(make_detector()), "--name", "cli-det", "--version", "1.0.0",
                 *common]) == 2


# -- fallback paths ---------------------------------------------------------------------------------------------------
def test_int8_fallback_is_built_and_gated(make_detector, tmp_path, photo_dir):
    from triserve.families.detection.importers.params import FallbackGates

    path = make_detector()
    lenient = FallbackGates(min_share=0.0, min_mean_iou=0.0, min_confident_recall=0.0, min_speedup=0.0,
                            min_reference_boxes=0)
    result = _import(path, tmp_path, photo_dir, fallback_name="tiny-det-int8", gates=lenient)
    fb = result.fallback.manifest
    assert (fb.variant, fb.fallback_for, fb.labels) == ("fallback", "tiny-det", ["class0", "class1"])
    assert fb.inputs == result.primary.manifest.inputs and fb.preprocess == result.primary.manifest.preprocess
    assert fb.gates == {"cheaper": True, "agreement_evidence": True, "agreement": True, "finite_same_io": True,
                        "dynamic_batch": True}
    assert fb.source.recipe["fallback"]["format"] == "QDQ" and fb.source.recipe["fallback"]["fp32_nodes"] == "decode"
    assert fb.source.recipe["fallback"]["excluded_nodes"] > 0
    for key in ("fp32_agreement_share", "fp32_agreement_mean_iou", "ms_per_image", "fp32_ms_per_image",
                "speedup_vs_fp32", "int8_batch_rows_max_abs_diff_scores"):
        assert key in fb.metrics
    ops = {n.op_type for n in onnx.load(str(result.fallback.staging / "model.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops


def test_fallback_refusals_and_the_smaller_size_path(make_detector, tmp_path, photo_dir):
    from triserve.families.detection.importers.params import FallbackGates
    from triserve.models.importing.result import GateFailed

    impossible = FallbackGates(min_share=1.01, min_reference_boxes=0)  # no INT8 graph passes: later attempts run
    # fixed input size: the anchor count is baked in, no smaller size is tried
    result = _import(make_detector(), tmp_path / "a", photo_dir, fallback_name="fb", gates=impossible)
    assert result.fallback is None
    attempts = result.report["fallback_attempts"]
    assert [a["method"] for a in attempts] == ["int8-qdq keep decode FP32", "int8-qdq keep decode+last-convs FP32",
                                               "fp32 smaller imgsz"]
    assert not any(a["passed"] for a in attempts) and "anchor count (16) is baked" in attempts[-1]["reason"]
    with pytest.raises(GateFailed, match="no fallback passed"):
        _import(make_detector(), tmp_path / "b", photo_dir, fallback_name="fb", gates=impossible,
                require_fallback=True)
    # dynamic height/width: the same FP32 graph at a smaller letterbox is the fallback
    dyn = make_detector("dyn.onnx", dynamic_spatial=True)
    params = ImportParams(latency_repeats=3, fallback_sizes=(16,))
    sized = FallbackGates(min_share=1.01, min_speedup=0.0, min_size_confident_recall=0.0, min_size_share=0.0,
                          min_reference_boxes=0)
    result = import_detection_onnx(dyn, "dyn", "1.0.0", tmp_path / "c", photos=user_photos(photo_dir),
                                   verify_ultralytics=False, params=params, gates=sized, fallback_name="dyn-16")
    fb = result.fallback.manifest
    assert fb.preprocess.imgsz == 16 and result.primary.manifest.preprocess.imgsz == 32
    assert fb.source.recipe["fallback"]["imgsz"] == 16 and fb.gates["cheaper"] and fb.gates["agreement"]
    assert (result.fallback.staging / "model.onnx").read_bytes() == (result.primary.staging / "model.onnx").read_bytes()


def test_smaller_size_is_refused_when_the_graph_only_claims_dynamic_size(make_detector, tmp_path, photo_dir):
    from triserve.families.detection.importers.params import FallbackGates

    liar = make_detector("liar.onnx", dynamic_spatial=True, baked_anchors=True)  # [1, 4, 16] baked in
    result = import_detection_onnx(liar, "liar", "1.0.0", tmp_path, photos=user_photos(photo_dir),
                                   verify_ultralytics=False, params=ImportParams(latency_repeats=3,
                                                                                 fallback_sizes=(16,)),
                                   gates=FallbackGates(min_share=1.01, min_reference_boxes=0),
                                   fallback_name="liar-16")
    assert result.fallback is None
    last = result.report["fallback_attempts"][-1]
    assert last["method"] == "fp32 imgsz 16" and "16x16" in last["reason"]


def test_no_fallback_is_built_without_boxes_to_judge_it_on(make_detector, tmp_path, photo_dir):
    from triserve.families.detection.importers.params import FallbackGates

    result = _import(make_detector(), tmp_path, photo_dir, fallback_name="fb",
                     gates=FallbackGates(min_reference_boxes=10_000))
    assert result.fallback is None
    (attempt,) = result.report["fallback_attempts"]
    assert "nothing to judge a cheaper variant on" in attempt["reason"]


# -- end-to-end heads [b, max_det, 6] ---------------------------------------------------------------------------------
def test_end2end_head_is_imported_made_dynamic_and_proved(make_detector, tmp_path, photo_dir):
    """An end-to-end export (x1, y1, x2, y2, score, class rows) pinned at batch 1: accepted with head 'end2end', the
    batch made dynamic and proved row by row (order-insensitive), decoded by the family's end2end filter."""
    from triserve.families.detection.importers.pipeline import letterboxed, nms_params
    from triserve.models.importing.photos import read_rgb

    path = make_detector(head="end2end", nc=3)
    info = inspect_detector(path)
    assert (info.head, info.head_shape) == ("end2end", (1, 16, 6))
    result = _import(path, tmp_path, photo_dir)
    m = result.primary.manifest
    assert m.preprocess.head == "end2end"
    assert m.inputs[0].shape == ["batch", 3, 32, 32] and m.outputs[0].shape == ["batch", 16, 6]
    assert m.gates == {"dynamic_batch": True, "batch_proof": True}
    assert {c.case for c in m.parity} >= {"batch4-vs-original-batch1/boxes", "batch2-vs-original-batch1/scores"}
    assert all(c.passed for c in m.parity)
    assert "/model.22/Reshape: [1, 6, -1] -> [0, 6, -1]" in m.source.recipe["batch_rewrite"]["reshapes"]
    # the served rows: the family's end2end decode (confidence filter + cap), classes inside the label set
    from triserve.families.vision.nms import decode

    session = ort_session(result.primary.staging / "model.onnx", threads=1)
    images = [read_rgb(p) for p in sorted(photo_dir.glob("*.jpg"))][:4]
    x, _ = letterboxed(images, m.preprocess)
    raw = session.run(None, {"images": x})[0]
    assert raw.shape == (4, 16, 6)
    for row in raw:
        det = decode(row, "end2end", nms_params(0.25))
        assert (det.scores > 0.25).all() and set(det.classes.tolist()) <= {0, 1, 2}
        assert len(det.scores) == int((row[:, 4] > 0.25).sum())


def test_end2end_row_comparison_ignores_order_but_not_content():
    from triserve.families.detection.importers.end2end import NO_RESULT, compare_batch, compare_rows

    rng = np.random.default_rng(0)
    k = 20
    ref = np.concatenate([rng.random((k, 4)) * 64, np.sort(rng.random((k, 1)), axis=0)[::-1],
                          rng.integers(0, 3, (k, 1))], axis=1)
    ref[3, 4] = ref[4, 4]  # a tie
    got = ref[rng.permutation(k)]
    assert compare_rows(ref, got, 1e-4)["boxes"] == 0.0 and compare_rows(ref, got, 1e-4)["scores"] == 0.0
    noisy = got.copy()
    noisy[:, :4] += 1e-3
    noisy[:, 4] += 1e-6
    d = compare_rows(ref, noisy, 1e-4)
    assert d["boxes"] == pytest.approx(1e-3) and d["scores"] == pytest.approx(1e-6) and d["paired"] == k - 1
    # the k-th row (lowest score) may be another one in the other top-k: not a failure
    swapped = ref.copy()
    swapped[-1, :4] = [1, 2, 3, 4]
    assert compare_rows(ref, swapped, 1e-4)["boxes"] == 0.0
    # a confident row of another class, or a lost box, is
    wrong = ref.copy()
    wrong[0, 5] = (wrong[0, 5] + 1) % 3
    assert compare_rows(ref, wrong, 1e-4)["boxes"] == NO_RESULT
    assert compare_batch(ref[None], ref[None, :-1], 1e-4)["boxes"] == NO_RESULT


def test_square_input_size_is_the_rule_every_yolo_importer_shares():
    from triserve.families.detection.importers.onnx_inspect import square_input_size

    assert square_input_size("m.onnx", 640, 640, None, {"imgsz": "[640, 640]"}) == 640  # fixed dims win
    assert square_input_size("m.onnx", "h", "w", 320, {"imgsz": "[640, 640]"}) == 320  # then --imgsz
    assert square_input_size("m.onnx", "h", "w", None, {"imgsz": "640"}) == 640  # then the metadata
    for args, reason in [((640, 480, None, {}), "not square"),
                         ((640, 640, 320, {}), "fixed at 640x640"),
                         (("h", "w", None, {"imgsz": "[480, 640]"}), "metadata imgsz"),
                         (("h", "w", None, {}), "pass --imgsz"),
                         (("h", "w", 100, {}), "multiple of the model stride 32"),
                         (("h", "w", 352, {"stride": "64"}), "multiple of the model stride 64"),
                         (("h", "w", None, {"imgsz": "[640,"}), "not a Python literal")]:
        with pytest.raises(ImportRefused, match=reason):
            square_input_size("m.onnx", *args)
