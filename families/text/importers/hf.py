"""Import a Hugging Face AutoModelForSequenceClassification directory, verified against transformers' own pipeline.

    triserve import text-hf --model-dir ./my-classifier --name my-text --version 1.0.0 \\
        [--max-length 128] [--labels names.txt] [--eval-csv data.csv] [--min-accuracy 0.8] [--alias canary] \\
        [--license SPDX]                             # required when README.md states no `license:`

The directory is what `save_pretrained` writes: config.json (architectures *ForSequenceClassification, id2label),
the weights, and the tokenizer. Export: the model (eager attention, float32) wrapped so that the graph applies a
softmax over the logits (ProbabilityModel), torch.onnx opset 17, dynamic 'batch' / 'sequence' axes, inputs
input_ids + attention_mask, plus token_type_ids when the tokenizer's model_input_names has it (the runner feeds it
as zeros, which is what the tokenizer gives a single text). Labels: id2label in index order (or --labels to rename,
same count); generic LABEL_0.. names are accepted with a warning. max_length: the tokenizer's model_max_length capped
by the model's position embeddings, or --max-length (not above that cap). pad_token_id: the tokenizer's.

Then finish.finish_import: ONNX Runtime vs torch probabilities at batch 1/4 on 8/32/max_length
tokens (truncated texts included), max |diff| <= 1e-4; padding invariance; and the check against the SOURCE
FRAMEWORK: `transformers.pipeline("text-classification", model=dir, top_k=None)` (truncation at the same max_length)
vs triserve's in-process path (served_probabilities: the serving tokenizer -> runner feeds -> ONNX Runtime): top-1
label equal on every text (exact ties aside) and every score within 1e-3, recorded as gates["pipeline_agreement"] and
metrics pipeline_top1_agreement / pipeline_max_abs_diff / pipeline_n. compare_with_pipeline() runs the same check on
any published artifact.

Refused, with the reason (nothing published):
  * no config.json, or architectures without a *ForSequenceClassification head (a bare encoder such as a
    sentence-transformers folder: use text-sklearn; token classification, QA, LM heads: other tasks);
  * problem_type 'multi_label_classification' (independent sigmoids, rows do not sum to 1: the text family serves
    one distribution per text) and 'regression' / num_labels 1 (a score, not classes);
  * id2label whose size differs from num_labels or from the classifier's real output width, ids not 0..n-1,
    duplicate label names;
  * no tokenizer.json and no fast tokenizer that AutoTokenizer(use_fast=True) can build from the slow files (the
    server tokenises with the Rust `tokenizers` library from tokenizer.json only); no pad token;
  * a model the exporter cannot trace, or whose graph fails parity, padding invariance or the pipeline check.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from triserve.families.text.importers.finish import (
    MODEL_FILE,
    PARAMS,
    SourceCheck,
    TextImport,
    TextParams,
    add_common_arguments,
    check_eval_args,
    check_texts,
    compare_probabilities,
    finish_import,
    served_probabilities,
    token_feeds,
)
from triserve.families.text.importers.tokenizer import TOKENIZER_FILE, stage_tokenizer
from triserve.families.text.importers.torch_export import OPSET, export_probabilities
from triserve.families.text.manifest import TextPreprocess
from triserve.families.text.preprocess import TextTokenizer
from triserve.models.importing.labels import names_list, read_labels
from triserve.models.importing.licenses import card_license, resolve_license
from triserve.models.importing.provenance import package_versions
from triserve.models.importing.publish import import_and_publish, run_cli
from triserve.models.importing.result import ImportRefused, ImportResult
from triserve.models.manifest import Manifest, Source, preprocess_as, sha256_file

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

log = logging.getLogger("triserve.importer")

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
GENERIC_LABEL = "LABEL_"


@dataclass
class HFInfo:
    """What inspect_hf_dir found (and decided) about a model directory."""

    model_dir: Path
    config: dict  # config.json as written
    model_type: str
    architectures: list[str]
    labels: list[str]  # served labels (id2label order, or the --labels rename)
    config_labels: list[str]  # id2label names in index order (what the pipeline answers)
    max_length: int
    tokenizer_json: Path  # the source tokenizer.json (converted into work_dir when only slow files were given)
    tokenizer_converted: bool
    input_names: list[str]
    pad_token_id: int
    warnings: list[str] = field(default_factory=list)


def _config_labels(cfg: dict, where: str) -> list[str]:
    id2label = cfg.get("id2label")
    if not id2label:
        raise ImportRefused(f"{where}: config.json has no id2label: the class names are unknown")
    return names_list(id2label, f"{where}: config.json id2label")


def fast_tokenizer(model_dir: Path, work_dir: Path) -> tuple[Path, bool, PreTrainedTokenizerBase]:
    """(tokenizer.json, converted?, the transformers tokenizer). Only slow files: AutoTokenizer(use_fast=True) builds
    the fast one and its tokenizer.json is saved into work_dir; when it cannot, the import is refused."""
    from transformers import AutoTokenizer

    try:
        hf_tok = AutoTokenizer.from_pretrained(str(model_dir), use_fast=True)
    except Exception as exc:
        raise ImportRefused(f"{model_dir.name}: transformers cannot load its tokenizer: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:300]}") from exc
    own = model_dir / TOKENIZER_FILE
    if own.is_file():
        return own, False, hf_tok
    if not getattr(hf_tok, "is_fast", False) or not hasattr(hf_tok, "backend_tokenizer"):
        raise ImportRefused(f"{model_dir.name}: no tokenizer.json, and AutoTokenizer(use_fast=True) gives a slow "
                            f"{type(hf_tok).__name__} that cannot be converted; the server tokenises with the Rust "
                            f"tokenizers library: save a fast tokenizer (tokenizer.json) with the model")
    out = Path(work_dir) / "converted-tokenizer"
    out.mkdir(parents=True, exist_ok=True)
    hf_tok.save_pretrained(str(out))
    if not (out / TOKENIZER_FILE).is_file():
        raise ImportRefused(f"{model_dir.name}: the converted {type(hf_tok).__name__} wrote no tokenizer.json")
    return out / TOKENIZER_FILE, True, hf_tok


def inspect_hf_dir(model_dir: Path, work_dir: Path, labels: Sequence[str] | None = None,
                   max_length: int | None = None) -> HFInfo:
    """Read and check a save_pretrained directory; ImportRefused (with the reason) for anything the text family
    cannot serve as one probability distribution per text."""
    model_dir = Path(model_dir)
    where = model_dir.name or str(model_dir)
    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise ImportRefused(f"{where}: no config.json: not a Hugging Face model directory (save_pretrained writes one)")
    cfg = json.loads(cfg_path.read_text())
    archs = list(cfg.get("architectures") or [])
    model_type = str(cfg.get("model_type", ""))
    if archs and not any(a.endswith("ForSequenceClassification") for a in archs):
        hint = (" (a bare encoder: for a sentence-transformers folder + scikit-learn head use text-sklearn)"
                if any(a.endswith("Model") for a in archs) else "")
        raise ImportRefused(f"{where}: architectures {archs} have no sequence classification head{hint}; the text "
                            f"family serves AutoModelForSequenceClassification models")
    problem = cfg.get("problem_type")
    if problem == "multi_label_classification":
        raise ImportRefused(f"{where}: problem_type multi_label_classification: independent sigmoid scores per label "
                            f"(rows do not sum to 1); the text family serves one softmax distribution per text")
    if problem == "regression":
        raise ImportRefused(f"{where}: problem_type regression: the model predicts a score, not classes")
    config_labels = _config_labels(cfg, where)
    num_labels = cfg.get("num_labels", len(config_labels))
    if int(num_labels) != len(config_labels):
        raise ImportRefused(f"{where}: num_labels {num_labels} but id2label names {len(config_labels)} labels")
    if len(config_labels) < 2:
        raise ImportRefused(f"{where}: {len(config_labels)} label: a single-logit head is a regression (or a sigmoid "
                            f"binary) head, not a softmax classifier")
    if len(set(config_labels)) != len(config_labels) and labels is None:
        raise ImportRefused(f"{where}: duplicate names in id2label {config_labels[:10]}; pass --labels with unique "
                            f"names")
    notes = []
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != len(config_labels):
            raise ImportRefused(f"{where}: --labels has {len(labels)} names but the model has {len(config_labels)} "
                                f"classes (id2label)")
    else:
        labels = list(config_labels)
        if all(lab == f"{GENERIC_LABEL}{i}" for i, lab in enumerate(labels)):
            notes.append(f"labels are the generic {labels[:3]}...: answers will name LABEL_i; pass --labels FILE to "
                         f"name them")
            log.warning("%s: %s", where, notes[-1])
    if not any((model_dir / f).is_file() for f in WEIGHT_FILES):
        raise ImportRefused(f"{where}: no weights ({', '.join(WEIGHT_FILES)})")

    tok_json, converted, hf_tok = fast_tokenizer(model_dir, work_dir)
    if converted:
        notes.append(f"no tokenizer.json: converted {type(hf_tok).__name__} with AutoTokenizer(use_fast=True)")
        log.warning("%s: %s", where, notes[-1])
    pad = hf_tok.pad_token_id
    if pad is None:
        raise ImportRefused(f"{where}: the tokenizer has no pad token: batches cannot be padded (set "
                            f"tokenizer.pad_token and config.pad_token_id and save again)")
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if "token_type_ids" in
                                               list(getattr(hf_tok, "model_input_names", [])) else [])
    cap = int(getattr(hf_tok, "model_max_length", 0) or 0)
    positions = int(cfg.get("max_position_embeddings") or 0)
    limits = [x for x in (cap if 0 < cap < 1_000_000 else 0, positions) if x > 0]
    if not limits:
        if max_length is None:
            raise ImportRefused(f"{where}: neither the tokenizer nor the config states a maximum length; pass "
                                f"--max-length N")
        limit = int(max_length)
    else:
        limit = min(limits)
    if max_length is not None:
        if int(max_length) > limit:
            raise ImportRefused(f"{where}: --max-length {max_length} exceeds the model's limit {limit} (tokenizer "
                                f"model_max_length {cap}, max_position_embeddings {positions})")
        limit = int(max_length)
    if limit < 2:
        raise ImportRefused(f"{where}: max_length {limit} leaves no room for a text")
    return HFInfo(model_dir=model_dir, config=cfg, model_type=model_type, architectures=archs, labels=labels,
                  config_labels=config_labels, max_length=limit, tokenizer_json=tok_json, tokenizer_converted=converted,
                  input_names=names, pad_token_id=int(pad), warnings=notes)


def load_model(model_dir: Path, info: HFInfo):
    """AutoModelForSequenceClassification in float32 with eager attention (traces to plain ONNX ops); refused when
    it does not load or its classifier's width is not the label count."""
    import torch
    from transformers import AutoModelForSequenceClassification

    try:
        model, loading = AutoModelForSequenceClassification.from_pretrained(
            str(model_dir), attn_implementation="eager", dtype=torch.float32, output_loading_info=True)
    except Exception as exc:  # e.g. a classifier of another width than id2label (size mismatch)
        raise ImportRefused(f"{model_dir.name}: AutoModelForSequenceClassification cannot load it: "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:400]}") from exc
    missing = sorted(loading.get("missing_keys") or [])
    mismatched = sorted(str(k) for k in (loading.get("mismatched_keys") or []))
    if missing or mismatched:  # transformers would initialise these at random: serving them is serving noise
        raise ImportRefused(f"{model_dir.name}: weights missing from the checkpoint {missing[:6]} "
                            f"{'(size mismatch ' + str(mismatched[:4]) + ')' if mismatched else ''}: transformers "
                            f"would initialise them at random (an encoder without a trained classification head?)")
    return model.eval()


def probability_model(model, input_names: Sequence[str]):
    """The model wrapped so that its forward returns softmax(logits) in float32 (what the served graph outputs)."""
    import torch
    from torch import nn

    class ProbabilityModel(nn.Module):
        """(input_ids, attention_mask[, token_type_ids]) -> probabilities [batch, num_labels]."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kw = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kw["token_type_ids"] = token_type_ids
            logits = self.inner(**kw).logits
            return torch.softmax(logits.float(), dim=-1)

    return ProbabilityModel(model).eval()


def torch_reference(wrapped, input_names: Sequence[str]):
    """feeds -> the wrapped model's probabilities (float64), for the parity gate."""
    import torch

    def run(feeds: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return wrapped(*[torch.from_numpy(feeds[n]) for n in input_names]).double().numpy()

    return run


# -- the source framework: transformers' pipeline ---------------------------------------------------------------------
def pipeline_probabilities(model_dir: Path, texts: Sequence[str], config_labels: Sequence[str], max_length: int,
                           batch_size: int = 8) -> np.ndarray:
    """transformers.pipeline('text-classification', model=dir, top_k=None) on `texts`, truncating at max_length:
    probabilities [n, labels] in id2label index order (float64)."""
    from transformers import pipeline

    clf = pipeline("text-classification", model=str(model_dir), tokenizer=str(model_dir), top_k=None, device="cpu")
    index = {lab: i for i, lab in enumerate(config_labels)}
    out = np.zeros((len(texts), len(config_labels)), dtype=np.float64)
    # top_k=None: each answer is the list of every label's score (the pipeline's annotation says one dict per text)
    answers = cast(list[list[dict[str, Any]]],
                   clf(list(texts), truncation=True, max_length=int(max_length), batch_size=batch_size))
    for row, answer in zip(out, answers):
        for item in answer:
            row[index[item["label"]]] = float(item["score"])
    return out


def compare_with_pipeline(model_dir: Path, artifact_dir: Path, manifest: Manifest, texts: Sequence[str],
                          tolerance: float = PARAMS.source_tolerance) -> dict:
    """transformers' pipeline on the source directory vs triserve's in-process path on a published (or staged)
    artifact: {'n', 'top1_agreement', 'ties', 'max_abs_diff', 'tolerance', 'passed', 'disagreements'}.

    The pipeline names labels by the directory's id2label; the manifest's labels are in the same index order (a
    --labels rename keeps the order), so rows are compared by index."""
    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    config_labels = _config_labels(cfg, model_dir.name)
    texts = list(texts)
    ref = pipeline_probabilities(model_dir, texts, config_labels, preprocess_as(manifest, TextPreprocess).max_length)
    got = served_probabilities(artifact_dir, manifest, texts)
    return compare_probabilities(ref, got, texts, list(manifest.labels), tolerance)


# -- the import -------------------------------------------------------------------------------------------------------
def _source_files(model_dir: Path) -> list[Path]:
    names = ("config.json", TOKENIZER_FILE, "tokenizer_config.json", "vocab.txt", "merges.txt", "vocab.json",
             "special_tokens_map.json", "sentencepiece.bpe.model", "spiece.model") + WEIGHT_FILES
    files = [model_dir / n for n in names if (model_dir / n).is_file()]
    files += sorted(p for p in model_dir.glob("*.safetensors") if p not in files)
    return files


def import_text_hf(model_dir: Path, name: str, version: str, work_dir: Path, *, labels: Sequence[str] | None = None,
                   max_length: int | None = None, eval_csv: Path | None = None, min_accuracy: float | None = None,
                   verify_pipeline: bool = True, params: TextParams = PARAMS, license: str | None = None,
                   require_license: bool = False) -> ImportResult:
    """Check, export, prove and verify a Hugging Face sequence classifier; the artifact is staged in work_dir/name.
    `license`: SPDX expression of the weights (else README.md's `license:`, else NOASSERTION, or LicenseRequired with
    `require_license`: models/importing/licenses.py)."""
    model_dir, work_dir = Path(model_dir), Path(work_dir)
    check_eval_args(eval_csv, min_accuracy)
    weights_license = resolve_license(license, card_license(model_dir), model_dir.name, required=require_license)
    info = inspect_hf_dir(model_dir, work_dir, labels=labels, max_length=max_length)
    check_eval_args(eval_csv, min_accuracy, info.labels)
    model = load_model(model_dir, info)
    out_width = int(getattr(getattr(model, "config", None), "num_labels", len(info.config_labels)))
    head = getattr(model, "classifier", None)
    head = head if head is not None else getattr(model, "score", None)
    weight = getattr(getattr(head, "out_proj", head), "weight", None) if head is not None else None
    if weight is not None and int(weight.shape[0]) != len(info.config_labels):
        raise ImportRefused(f"{model_dir.name}: the classifier outputs {int(weight.shape[0])} classes but id2label "
                            f"names {len(info.config_labels)}")
    staging = work_dir / name
    staging.mkdir(parents=True, exist_ok=True)
    stage_tokenizer(info.tokenizer_json, staging / TOKENIZER_FILE, info.max_length)

    # the example batch the exporter traces: two real texts, one padded
    tok = TextTokenizer(staging / TOKENIZER_FILE, info.max_length)
    example = token_feeds(info.pad_token_id, info.input_names, tok.encode(check_texts(4)[:2]))
    wrapped = probability_model(model, info.input_names)
    reference = torch_reference(wrapped, info.input_names)
    try:
        probe = reference(example)
    except Exception as exc:
        raise ImportRefused(f"{model_dir.name}: the model does not run on the tokenizer's ids: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:300]}") from exc
    if probe.shape[1] != len(info.config_labels) or out_width != len(info.config_labels):
        raise ImportRefused(f"{model_dir.name}: the model outputs {probe.shape[1]} classes but id2label names "
                            f"{len(info.config_labels)}")
    try:
        export_probabilities(wrapped, staging / MODEL_FILE, info.input_names, example)
    except Exception as exc:
        raise ImportRefused(f"{model_dir.name}: torch.onnx export failed for model_type {info.model_type!r}: "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from exc

    source_check = None
    if verify_pipeline:
        source_check = SourceCheck(
            key="pipeline", description="transformers.pipeline('text-classification', top_k=None)",
            probabilities=lambda texts: pipeline_probabilities(model_dir, texts, info.config_labels, info.max_length))
    files = _source_files(model_dir)
    source = Source(kind="user", license=weights_license,
                    packages=package_versions("torch", "transformers", "tokenizers", "onnx", "onnxruntime"),
                    description=(
                        f"Hugging Face {'/'.join(info.architectures) or 'AutoModelForSequenceClassification'} "
                        f"(model_type {info.model_type!r}) from {model_dir.name}/ ({len(info.labels)} labels); "
                        f"imported by families/text/importers/hf.py: float32, eager attention, softmax over the logits "
                        f"inside the graph, torch.onnx opset {OPSET}, inputs {info.input_names}"
                        + ("; tokenizer.json converted from the slow tokenizer" if info.tokenizer_converted else "")))
    job = TextImport(
        name=name, version=version, labels=info.labels, max_length=info.max_length, pad_token_id=info.pad_token_id,
        reference=reference, source=source, fingerprint=files + [info.tokenizer_json],
        recipe={"kind": "text-hf", "files": {p.name: sha256_file(p) for p in files},
                "tokenizer_sha256": sha256_file(info.tokenizer_json), "labels": info.labels,
                "max_length": info.max_length, "opset": OPSET, "verify_pipeline": verify_pipeline},
        source_check=source_check, eval_csv=eval_csv, min_accuracy=min_accuracy, params=params,
        report={"model_type": info.model_type, "architectures": info.architectures, "warnings": info.warnings,
                "tokenizer_converted": info.tokenizer_converted})
    result = finish_import(staging, job)
    if not verify_pipeline:
        result.report["pipeline"] = "skipped (--no-verify)"
    return result


def publish_text_hf(model_dir: Path, name: str, version: str, registry, *, labels_file: Path | None = None,
                    max_length: int | None = None, eval_csv: Path | None = None, min_accuracy: float | None = None,
                    alias: str | None = None, verify_pipeline: bool = True, params: TextParams = PARAMS,
                    license: str | None = None, require_license: bool = False):
    """import_text_hf + publish into `registry`; (published manifests, report). Nothing is published on refusal."""
    labels = read_labels(labels_file) if labels_file else None
    return import_and_publish(registry, name, version, alias, "text-hf", lambda work: import_text_hf(
        model_dir, name, version, work, labels=labels, max_length=max_length, eval_csv=eval_csv,
        min_accuracy=min_accuracy, verify_pipeline=verify_pipeline, params=params, license=license,
        require_license=require_license))


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    return run_cli(lambda: publish_text_hf(
        args.model_dir, args.name, args.version, LocalRegistry(args.registry), labels_file=args.labels,
        max_length=args.max_length, eval_csv=args.eval_csv, min_accuracy=args.min_accuracy, alias=args.alias,
        verify_pipeline=not args.no_verify, license=args.license, require_license=True))


def add_parser(subparsers) -> None:
    """Register `text-hf` on the `triserve import` parser (triserve/importers.py)."""
    p = subparsers.add_parser("text-hf", help="import a Hugging Face AutoModelForSequenceClassification directory",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, required=True, help="the save_pretrained directory")
    p.add_argument("--labels", type=Path, default=None,
                   help="rename the classes (same count, id2label order): one per line or a JSON/YAML list")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the transformers pipeline cross-check (recorded as skipped)")
    add_common_arguments(p)
    p.set_defaults(func=_cmd)
