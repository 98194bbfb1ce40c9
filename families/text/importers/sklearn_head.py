"""Import a sentence-transformers encoder + a scikit-learn linear classifier, fused into one ONNX graph.

    triserve import text-sklearn --encoder ./my-st-model --classifier head.joblib \\
        --name my-intents --version 1.0.0 --license SPDX [--max-length 128] [--labels names.txt] \\
        [--eval-csv data.csv] [--alias canary]       # --license: a pickled head states no licence

The pipeline's intent model (scripts/text/fused.py), generalised: any sentence-transformers folder whose pipeline is
Transformer -> Pooling (mean or CLS) [-> Normalize] (L2 normalisation only when the folder has the Normalize module),
any linear classifier with coef_ / intercept_ / classes_ / predict_proba whose probabilities are a closed form of the
linear scores. The form is not assumed from the class name: predict_proba is compared on probe embeddings with
  * 'softmax'        softmax(X W^T + b)                 (multinomial LogisticRegression, the default for 3+ classes)
  * 'ovr-sigmoid'    sigmoid(X W^T + b), rows normalised (SGDClassifier(loss='log_loss') / one-vs-rest, 3+ classes)
  * 'binary-sigmoid' [1 - sigmoid(x.w + b), sigmoid(x.w + b)] (two classes: LogisticRegression, SGD log_loss)
and the one that reproduces it within 1e-6 goes into the graph. Labels: str(classes_) in order (or --labels to
rename, same count). max_length: the SentenceTransformer's max_seq_length capped by the encoder's position
embeddings, or --max-length (not above that cap).

Then finish.finish_import: ONNX Runtime vs the torch module (parity, <= 1e-4 at batch 1/4 on
8/32/max_length tokens), padding invariance, and the check against the SOURCE FRAMEWORK: SentenceTransformer.encode
(max_seq_length = max_length) -> classifier.predict_proba vs triserve's in-process path: top-1 equal on every text
(ties aside), scores within 1e-3 (gates["sentence_transformers_agreement"]; metrics sentence_transformers_*).

Refused, with the reason (nothing published): a folder without modules.json (a plain transformers encoder: no
pooling is defined), modules other than Transformer / Pooling / Normalize (Dense, LayerNorm, static embeddings, ...),
pooling other than mean or CLS (max, mean-sqrt-len, weighted-mean, last-token), a default prompt (ST would prepend
text the service does not), do_lower_case in Python where tokenizer.json does not lowercase; classifiers without
predict_proba (LinearSVC, SGD hinge), without coef_ (trees, kernels, pipelines: fold scalers yourself), with
probabilities that are not a closed form of the linear scores (SVC(probability=True): libsvm's Platt scaling is fitted
by internal cross-validation and coupled pairwise; CalibratedClassifierCV), or of another embedding width.
SECURITY: the classifier file is a pickle; loading it runs code. Import only files you trust.
"""
from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import pickle
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
    finish_import,
)
from triserve.families.text.importers.hf import fast_tokenizer
from triserve.families.text.importers.tokenizer import TOKENIZER_FILE, stage_tokenizer, tokenizer_lowercases
from triserve.families.text.importers.torch_export import OPSET, export_onnx
from triserve.models.importing.labels import read_labels
from triserve.models.importing.licenses import card_license, resolve_license
from triserve.models.importing.provenance import package_versions
from triserve.models.importing.publish import import_and_publish, run_cli
from triserve.models.importing.result import ImportRefused, ImportResult
from triserve.models.manifest import Source, sha256_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

log = logging.getLogger("triserve.importer")

FORMS = ("softmax", "ovr-sigmoid", "binary-sigmoid")
FORM_TOLERANCE = 1e-6
ALLOWED_MODULES = ("Transformer", "Pooling", "Normalize")


# -- the encoder folder -----------------------------------------------------------------------------------------------
@dataclass
class STInfo:
    st_dir: Path
    transformer_dir: Path
    pooling: str  # 'mean' | 'cls'
    normalize: bool
    max_length: int
    dim: int
    tokenizer_json: Path
    tokenizer_converted: bool
    pad_token_id: int
    modules: list[str]
    warnings: list[str] = field(default_factory=list)


def _pooling_mode(config: dict) -> list[str]:
    """Pooling modes switched on, in either config format (ST >= 6 'pooling_mode', older pooling_mode_*_tokens)."""
    mode = config.get("pooling_mode")
    if mode is not None:
        return [str(m) for m in (mode if isinstance(mode, (list, tuple)) else [mode])]
    names = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
             "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
             "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
    return [v for k, v in names.items() if config.get(k)]


def load_sentence_transformer(st_dir: Path):
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(str(st_dir), device="cpu")
    except Exception as exc:
        raise ImportRefused(f"{Path(st_dir).name}: sentence-transformers cannot load it: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:300]}") from exc


def read_modules(st_dir: Path) -> tuple[list[dict], list[str]]:
    """modules.json entries (by idx) and their class names; ImportRefused unless Transformer -> Pooling [->
    Normalize]. Read before the SentenceTransformer is loaded: cheap, and clearer than its load error."""
    st_dir = Path(st_dir)
    where = st_dir.name or str(st_dir)
    mod_file = st_dir / "modules.json"
    if not mod_file.is_file():
        raise ImportRefused(f"{where}: no modules.json: not a sentence-transformers folder (a plain transformers "
                            f"encoder defines no pooling); a sequence classifier goes through text-hf")
    entries = sorted(json.loads(mod_file.read_text()), key=lambda e: int(e.get("idx", 0)))
    kinds = [str(e.get("type", "")).rsplit(".", 1)[-1] for e in entries]
    unknown = [k for k in kinds if k not in ALLOWED_MODULES]
    if unknown:
        raise ImportRefused(f"{where}: modules {kinds}: {unknown} not supported (only Transformer -> Pooling [-> "
                            f"Normalize] is fused into one graph)")
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ImportRefused(f"{where}: modules {kinds}: expected Transformer, Pooling and optionally Normalize, in "
                            f"that order")
    return entries, kinds


def inspect_st_dir(st_dir: Path, st, work_dir: Path, max_length: int | None = None) -> STInfo:
    """Check the folder's module pipeline (modules.json + the loaded SentenceTransformer `st`); ImportRefused for
    anything one graph of encoder -> pooling [-> normalize] would not reproduce."""
    st_dir = Path(st_dir)
    where = st_dir.name or str(st_dir)
    entries, kinds = read_modules(st_dir)
    transformer_dir = (st_dir / entries[0].get("path", "")).resolve()
    pooling_cfg = st[1].get_config_dict() if hasattr(st[1], "get_config_dict") else {}
    if not pooling_cfg and (st_dir / entries[1].get("path", "") / "config.json").is_file():
        pooling_cfg = json.loads((st_dir / entries[1]["path"] / "config.json").read_text())
    modes = _pooling_mode(pooling_cfg)
    aliases = {"mean": "mean", "mean_tokens": "mean", "cls": "cls", "cls_token": "cls"}
    if len(modes) != 1 or modes[0] not in aliases:
        raise ImportRefused(f"{where}: pooling {modes or pooling_cfg}: only mean or CLS pooling (one mode) is fused")
    notes = []
    if getattr(st, "default_prompt_name", None):
        raise ImportRefused(f"{where}: default prompt {st.default_prompt_name!r}: SentenceTransformer.encode prepends "
                            f"it to every text, the text service does not")
    if getattr(st[0], "do_lower_case", False):
        tok_file = transformer_dir / TOKENIZER_FILE
        if not (tok_file.is_file() and tokenizer_lowercases(tok_file)):
            raise ImportRefused(f"{where}: do_lower_case: sentence-transformers lowercases texts in Python and the "
                                f"tokenizer does not; the served tokenizer.json would see other text")
    tok_json, converted, hf_tok = fast_tokenizer(transformer_dir, work_dir)
    if converted:
        notes.append(f"no tokenizer.json: converted {type(hf_tok).__name__} with AutoTokenizer(use_fast=True)")
    pad = hf_tok.pad_token_id
    if pad is None:
        raise ImportRefused(f"{where}: the tokenizer has no pad token: batches cannot be padded")
    cfg_path = transformer_dir / "config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    limit = int(st.max_seq_length or 0)
    positions = int(cfg.get("max_position_embeddings") or 0)
    if positions and (not limit or limit > positions):
        limit = positions
    if max_length is not None:
        if limit and int(max_length) > limit:
            raise ImportRefused(f"{where}: --max-length {max_length} exceeds the encoder's limit {limit} "
                                f"(max_seq_length {st.max_seq_length}, max_position_embeddings {positions})")
        limit = int(max_length)
    if limit < 2:
        raise ImportRefused(f"{where}: no usable maximum length; pass --max-length N")
    get_dim = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
    dim = int(get_dim())
    return STInfo(st_dir=st_dir, transformer_dir=transformer_dir, pooling=aliases[modes[0]],
                  normalize=kinds[-1] == "Normalize", max_length=limit, dim=dim, tokenizer_json=tok_json,
                  tokenizer_converted=converted, pad_token_id=int(pad), modules=kinds, warnings=notes)


# -- the classifier ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LinearHead:
    """A linear classifier as arrays, the closed form of its predict_proba, and its labels in output order."""

    coef: np.ndarray  # [rows, dim] float64 (rows: 1 for binary, else one per class)
    intercept: np.ndarray  # [rows]
    classes: list[str]
    form: str  # one of FORMS
    form_max_abs_diff: float
    estimator: object


def load_classifier(path: Path):
    """joblib.load (plain pickles too). The file is code: only trusted files."""
    path = Path(path)
    try:
        import joblib

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # InconsistentVersionWarning: pickled with another scikit-learn
            return joblib.load(path)
    except Exception as joblib_exc:  # noqa: BLE001  # whatever joblib fails on, plain pickle is tried next
        try:
            with open(path, "rb") as fh, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return pickle.load(fh)  # documented: trusted files only
        except Exception:  # noqa: BLE001  # neither loader reads it: a refusal, with joblib's reason
            raise ImportRefused(f"{path.name}: cannot be loaded with joblib or pickle: {type(joblib_exc).__name__}: "
                                f"{joblib_exc}") from joblib_exc


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def closed_forms(coef: np.ndarray, intercept: np.ndarray, n_classes: int, x: np.ndarray) -> dict[str, np.ndarray]:
    """The candidate probability functions of the linear scores that fit these shapes."""
    z = np.asarray(x, np.float64) @ coef.T + intercept
    out = {}
    if coef.shape[0] == n_classes and n_classes >= 2:
        e = np.exp(z - z.max(axis=1, keepdims=True))
        out["softmax"] = e / e.sum(axis=1, keepdims=True)
        s = _sigmoid(z)
        out["ovr-sigmoid"] = s / s.sum(axis=1, keepdims=True)
    if coef.shape[0] == 1 and n_classes == 2:
        p = _sigmoid(z[:, 0])
        out["binary-sigmoid"] = np.stack([1.0 - p, p], axis=1)
    return out


def inspect_classifier(estimator, dim: int, probe: np.ndarray, where: str = "classifier") -> LinearHead:
    """Check the estimator is a linear head over `dim`-d embeddings and find the closed form of its predict_proba on
    `probe` embeddings; ImportRefused otherwise."""
    kind = type(estimator).__name__
    if hasattr(estimator, "steps"):
        raise ImportRefused(f"{where}: a {kind} ({[s[0] for s in estimator.steps]}): only a bare linear classifier "
                            f"over the embeddings is fused (fold scalers into coef_/intercept_ first)")
    for attr in ("coef_", "intercept_", "classes_"):
        if not hasattr(estimator, attr):
            raise ImportRefused(f"{where}: {kind} has no {attr}: not a fitted linear classifier")
    if not hasattr(estimator, "predict_proba"):
        raise ImportRefused(f"{where}: {kind} has no predict_proba (LinearSVC, SGD with hinge loss): the text family "
                            f"serves probabilities; use LogisticRegression or SGDClassifier(loss='log_loss')")
    coef = np.atleast_2d(np.asarray(estimator.coef_, dtype=np.float64))
    intercept = np.atleast_1d(np.asarray(estimator.intercept_, dtype=np.float64)).reshape(-1)
    classes = [str(c) for c in estimator.classes_]
    if coef.shape[1] != dim:
        raise ImportRefused(f"{where}: {kind} takes {coef.shape[1]}-d inputs but the encoder gives {dim}-d embeddings")
    if intercept.shape[0] != coef.shape[0]:
        raise ImportRefused(f"{where}: intercept_ {intercept.shape} does not match coef_ {coef.shape}")
    if coef.shape[0] not in (1, len(classes)):
        raise ImportRefused(f"{where}: {kind} has {coef.shape[0]} weight rows for {len(classes)} classes (pairwise "
                            f"one-vs-one, e.g. SVC): its probabilities are not one linear layer away")
    try:
        proba = np.asarray(estimator.predict_proba(probe), dtype=np.float64)
    except Exception as exc:
        raise ImportRefused(f"{where}: {kind}.predict_proba fails on {dim}-d embeddings: {type(exc).__name__}: "
                            f"{exc}") from exc
    diffs = {name: float(np.abs(proba - p).max()) for name, p in closed_forms(coef, intercept, len(classes),
                                                                              probe).items()}
    best = min(diffs, key=lambda k: diffs[k]) if diffs else None
    if best is None or diffs[best] > FORM_TOLERANCE:
        per_form = {k: f"{v:.2g}" for k, v in diffs.items()}
        raise ImportRefused(f"{where}: {kind}.predict_proba is not a closed form of its linear scores (max diff per "
                            f"form: {per_form}); SVC(probability=True) and calibrated classifiers fit their "
                            f"probabilities separately. Use LogisticRegression or SGDClassifier(loss='log_loss')")
    return LinearHead(coef=coef, intercept=intercept, classes=classes, form=best, form_max_abs_diff=diffs[best],
                      estimator=estimator)


# -- the fused module -------------------------------------------------------------------------------------------------
def fused_model(encoder, info: STInfo, head: LinearHead):
    """The pipeline's intent model (scripts/text/fused.IntentModel: encoder -> pooling -> linear head) generalised:
    pooling mean/CLS, Normalize only when the folder has it, token_type_ids (zeros) only for encoders that take them,
    and the classifier's own probability form."""
    import torch
    from torch import nn

    class SentenceClassifier(nn.Module):
        """(input_ids, attention_mask) int64 [batch, seq] -> probabilities float32 [batch, n_labels]."""

        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.classifier = nn.Linear(head.coef.shape[1], head.coef.shape[0])
            with torch.no_grad():
                self.classifier.weight.copy_(torch.from_numpy(head.coef.astype(np.float32)))
                self.classifier.bias.copy_(torch.from_numpy(head.intercept.astype(np.float32)))
            self.pooling, self.normalize, self.form = info.pooling, info.normalize, head.form
            self.token_types = "token_type_ids" in inspect.signature(encoder.forward).parameters

        def embed(self, input_ids, attention_mask):
            kw = {"input_ids": input_ids, "attention_mask": attention_mask}
            if self.token_types:
                kw["token_type_ids"] = torch.zeros_like(input_ids)
            hidden = self.encoder(**kw).last_hidden_state
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return nn.functional.normalize(pooled, p=2.0, dim=1) if self.normalize else pooled

        def forward(self, input_ids, attention_mask):
            z = self.classifier(self.embed(input_ids, attention_mask))
            if self.form == "softmax":
                return torch.softmax(z, dim=-1)
            if self.form == "ovr-sigmoid":
                s = torch.sigmoid(z)
                return s / s.sum(dim=-1, keepdim=True)
            p = torch.sigmoid(z)  # binary-sigmoid: z is [batch, 1]
            return torch.cat([1.0 - p, p], dim=-1)

    return SentenceClassifier().eval()


def load_encoder(info: STInfo):
    """The Transformer module's weights as a transformers AutoModel, eager attention (plain ONNX ops)."""
    import torch
    from transformers import AutoModel

    try:
        return AutoModel.from_pretrained(str(info.transformer_dir), attn_implementation="eager",
                                         dtype=torch.float32).eval()
    except Exception as exc:
        raise ImportRefused(f"{info.st_dir.name}: transformers cannot load the encoder: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:300]}") from exc


def st_probabilities(st, estimator, texts: Sequence[str], max_length: int, batch_size: int = 16) -> np.ndarray:
    """The source framework's answer: SentenceTransformer.encode (truncating at max_length) -> predict_proba."""
    st.max_seq_length = int(max_length)
    emb = st.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(estimator.predict_proba(emb), dtype=np.float64)


# -- the import -------------------------------------------------------------------------------------------------------
def _source_files(info: STInfo, classifier: Path) -> list[Path]:
    files = sorted(p for p in info.st_dir.rglob("*") if p.is_file() and p.suffix in (".json", ".safetensors", ".bin",
                                                                                        ".txt", ".model"))
    return [p for p in files if p.name != "README.md"] + [Path(classifier)]


def import_text_sklearn(encoder_dir: Path, classifier_path: Path, name: str, version: str, work_dir: Path, *,
                        labels: Sequence[str] | None = None, max_length: int | None = None,
                        eval_csv: Path | None = None, min_accuracy: float | None = None,
                        params: TextParams = PARAMS, license: str | None = None,
                        require_license: bool = False) -> ImportResult:
    """Check, fuse, export, prove and verify encoder + classifier; the artifact is staged in work_dir/name.
    `license`: SPDX expression of the fused weights, else NOASSERTION, or LicenseRequired with `require_license`
    (models/importing/licenses.py): a pickled head states no licence, so the pair never states one (the encoder's
    model card licence, when it has one, is recorded in the description)."""
    import torch

    encoder_dir, work_dir = Path(encoder_dir), Path(work_dir)
    check_eval_args(eval_csv, min_accuracy)
    weights_license = resolve_license(license, None, f"{encoder_dir.name} + {Path(classifier_path).name}",
                                      required=require_license)
    read_modules(encoder_dir)
    estimator = load_classifier(classifier_path)
    st = load_sentence_transformer(encoder_dir)
    info = inspect_st_dir(encoder_dir, st, work_dir, max_length=max_length)
    # probe embeddings for the form check: real encodings of varied texts plus random unit and raw vectors
    st.max_seq_length = info.max_length
    real = st.encode(check_texts(32), convert_to_numpy=True, show_progress_bar=False).astype(np.float64)
    rng = np.random.default_rng(0)
    rand = rng.normal(size=(32, info.dim))
    probe = np.concatenate([real, rand / np.linalg.norm(rand, axis=1, keepdims=True), rand * 0.3])
    head = inspect_classifier(estimator, info.dim, probe, where=Path(classifier_path).name)
    served_labels = list(head.classes)
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != len(head.classes):
            raise ImportRefused(f"--labels has {len(labels)} names but the classifier has {len(head.classes)} classes "
                                f"{head.classes[:10]}")
        served_labels = labels
    check_eval_args(eval_csv, min_accuracy, served_labels)

    staging = work_dir / name
    staging.mkdir(parents=True, exist_ok=True)
    stage_tokenizer(info.tokenizer_json, staging / TOKENIZER_FILE, info.max_length)
    model = fused_model(load_encoder(info), info, head)
    try:
        export_onnx(model, staging / MODEL_FILE, opset=OPSET)
    except Exception as exc:
        raise ImportRefused(f"{encoder_dir.name}: torch.onnx export failed: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:300]}") from exc

    def reference(feeds: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            out = model(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
            return out.double().numpy()

    source_check = SourceCheck(key="sentence_transformers",
                               description="SentenceTransformer.encode -> predict_proba",
                               probabilities=lambda texts: st_probabilities(st, estimator, texts, info.max_length))
    kind = type(estimator).__name__
    source = Source(kind="user", license=weights_license,
                    packages=package_versions("torch", "transformers", "sentence-transformers",
                                                           "scikit-learn", "tokenizers", "onnx", "onnxruntime"),
                    description=(
                        f"sentence-transformers {encoder_dir.name}/ ({' -> '.join(info.modules)}, {info.pooling} "
                        f"pooling, {info.dim}-d) + scikit-learn {kind} from {Path(classifier_path).name} (sha256 "
                        f"{sha256_file(classifier_path)}, predict_proba = {head.form} of the linear scores); fused "
                        f"into one graph by families/text/importers/sklearn_head.py, torch.onnx opset {OPSET}; encoder "
                        f"licence per its model card: {card_license(encoder_dir) or 'not stated'}"))
    files = _source_files(info, classifier_path)
    job = TextImport(
        name=name, version=version, labels=served_labels, max_length=info.max_length, pad_token_id=info.pad_token_id,
        reference=reference, source=source, fingerprint=files + [info.tokenizer_json],
        recipe={"kind": "text-sklearn", "files": {str(p.relative_to(encoder_dir)) if p.is_relative_to(encoder_dir)
                                                  else p.name: sha256_file(p) for p in files},
                "labels": served_labels, "max_length": info.max_length, "form": head.form, "opset": OPSET},
        source_check=source_check, eval_csv=eval_csv, min_accuracy=min_accuracy, params=params,
        report={"modules": info.modules, "pooling": info.pooling, "normalize": info.normalize, "classifier": kind,
                "form": head.form, "form_max_abs_diff": head.form_max_abs_diff, "warnings": info.warnings,
                "tokenizer_converted": info.tokenizer_converted})
    result = finish_import(staging, job)
    return result


def publish_text_sklearn(encoder_dir: Path, classifier_path: Path, name: str, version: str, registry, *,
                         labels_file: Path | None = None, max_length: int | None = None, eval_csv: Path | None = None,
                         min_accuracy: float | None = None, alias: str | None = None, params: TextParams = PARAMS,
                         license: str | None = None, require_license: bool = False):
    """import_text_sklearn + publish into `registry`; (published manifests, report). Nothing published on refusal."""
    labels = read_labels(labels_file) if labels_file else None
    return import_and_publish(registry, name, version, alias, "text-sklearn", lambda work: import_text_sklearn(
        encoder_dir, classifier_path, name, version, work, labels=labels, max_length=max_length, eval_csv=eval_csv,
        min_accuracy=min_accuracy, params=params, license=license, require_license=require_license))


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    return run_cli(lambda: publish_text_sklearn(
        args.encoder, args.classifier, args.name, args.version, LocalRegistry(args.registry), labels_file=args.labels,
        max_length=args.max_length, eval_csv=args.eval_csv, min_accuracy=args.min_accuracy, alias=args.alias,
        license=args.license, require_license=True))


def add_parser(subparsers) -> None:
    """Register `text-sklearn` on the `triserve import` parser (triserve/importers.py)."""
    p = subparsers.add_parser("text-sklearn", help="import a sentence-transformers encoder + scikit-learn linear head",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", type=Path, required=True, help="the sentence-transformers folder (modules.json)")
    p.add_argument("--classifier", type=Path, required=True,
                   help="joblib/pickle file of a fitted linear classifier (trusted files only: loading runs code)")
    p.add_argument("--labels", type=Path, default=None,
                   help="rename the classes (same count, classes_ order): one per line or a JSON/YAML list")
    add_common_arguments(p)
    p.set_defaults(func=_cmd)
