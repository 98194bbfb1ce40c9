"""The last mile of every text import (text-hf, text-onnx, text-sklearn): check, prove, verify and describe a staged
text artifact.

A staged folder with `model.onnx` (int64 `input_ids` / `attention_mask` [/ `token_type_ids`] [batch, sequence] ->
`probabilities` float32 [batch, num_labels]) and `tokenizer.json` (no padding, truncation at max_length) is
  1. checked for the graph contract the text family serves (finish_import -> check_served_graph),
  2. proved against the framework it came from on padded batches made exactly as the runner makes them
     (families/text/runtime.feeds), batch 1 and 4, short, medium and truncated sequences: max |diff| <= 1e-4,
  3. run through triserve's own in-process path (served_probabilities: the serving tokenizer -> runner feeds ->
     ONNX Runtime -> the output check), each text alone vs in a padded batch (padding invariance, <= 1e-4: a graph
     that ignores the mask would answer differently depending on its batch neighbours),
  4. compared with the source framework's own predictions (a callback: transformers' pipeline for text-hf,
     SentenceTransformer.encode + predict_proba for text-sklearn; for text-onnx the given graph itself is the source),
  5. optionally scored on the user's labelled CSV (`text,label` columns): accuracy and macro-F1 in manifest.metrics,
     --min-accuracy refuses below the bar,
then published (models/importing/publish.import_and_publish) as an immutable version with its manifest, optionally
aliased. Any failure raises ImportRefused / GateFailed and nothing is published.
"""
from __future__ import annotations

import argparse
import csv
import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np

from triserve.families.text import runtime
from triserve.families.text.importers.tokenizer import TOKENIZER_FILE, tokenizer_lowercases
from triserve.families.text.importers.utterances import evaluation_utterances, parity_texts
from triserve.families.text.manifest import TextPreprocess
from triserve.families.text.postprocess import check_probabilities
from triserve.families.text.preprocess import TextTokenizer, clean_text
from triserve.models.importing import publish
from triserve.models.importing.graphs import opset_of, ort_session, value_dims
from triserve.models.importing.licenses import add_license_option
from triserve.models.importing.parity import parity_gate
from triserve.models.importing.provenance import data_fingerprint, git_commit, source_digest, stable_hash
from triserve.models.importing.publish import add_registry_option
from triserve.models.importing.references import histogram_reference
from triserve.models.importing.result import Artifact, GateFailed, ImportRefused, ImportResult, Laps
from triserve.models.manifest import Manifest, Source, TensorSpec, preprocess_as, utcnow

log = logging.getLogger("triserve.importer")

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "probabilities"
MODEL_FILE = "model.onnx"
# the code that makes a text import (part of its recipe hash): this folder and the generic machinery
CODE = (Path(__file__).resolve().parent, Path(publish.__file__).resolve().parent)


@dataclass(frozen=True)
class TextParams:
    """Tolerances and sizes of a text import (part of the recipe hash, recorded in the manifest's source recipe)."""

    parity_tolerance: float = 1e-4  # ONNX Runtime vs the framework, probabilities
    parity_batches: tuple[int, ...] = (1, 4)
    parity_seq_lens: tuple[int, ...] = (8, 32)  # plus max_length itself, on texts truncated there
    invariance_tolerance: float = 1e-4  # a text alone vs in a padded batch
    source_tolerance: float = 1e-3  # served path vs the source framework's own predictions (scores)
    tie_gap: float = 1e-5  # a top-1 difference where the framework's own top-2 are closer than this is a tie
    n_check_texts: int = 64  # built-in English texts for the checks, plus up to as many from --eval-csv
    batch: int = 16  # texts per served-path call


PARAMS = TextParams()


# -- evaluation data and check texts ----------------------------------------------------------------------------------
def read_eval_csv(path: Path) -> tuple[list[str], list[str]]:
    """(texts, gold labels) from a CSV with `text` and `label` columns (header names case-insensitive)."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        cols = {c.strip().lower(): c for c in (reader.fieldnames or [])}
        if "text" not in cols or "label" not in cols:
            raise ImportRefused(f"{path.name}: needs 'text' and 'label' columns, has {reader.fieldnames}")
        rows = [(r[cols["text"]] or "", (r[cols["label"]] or "").strip()) for r in reader]
    rows = [(t, y) for t, y in rows if t.strip()]
    if not rows:
        raise ImportRefused(f"{path.name}: no rows with text")
    return [t for t, _ in rows], [y for _, y in rows]


def check_eval_args(eval_csv: Path | None, min_accuracy: float | None,
                    labels: Sequence[str] | None = None) -> None:
    """Refuse bad evaluation arguments before any export work: --min-accuracy without --eval-csv, an unreadable
    CSV, and (when the labels are known) CSV labels the model does not have."""
    if min_accuracy is not None and eval_csv is None:
        raise ImportRefused("--min-accuracy needs --eval-csv")
    if eval_csv is None:
        return
    _, gold = read_eval_csv(eval_csv)
    if labels is not None:
        unknown = sorted(set(gold) - set(labels))
        if unknown:
            raise ImportRefused(f"eval CSV labels not among the model's labels: {unknown[:10]} (model labels: "
                                f"{list(labels)[:20]})")


def check_texts(n: int, extra: Sequence[str] = ()) -> list[str]:
    """Texts for the checks: utterances.py's English utterances (varied case, punctuation, length), a medium and a
    long one, then up to n of the user's own texts (their domain, their lengths)."""
    p = parity_texts()
    texts = evaluation_utterances(n, seed=0) + [p["medium"][0], p["long"][0]]
    seen = set(texts)
    for t in extra:
        if len(texts) >= 2 * n + 2:
            break
        if t.strip() and t not in seen:
            seen.add(t)
            texts.append(t)
    return texts


# -- the served graph -------------------------------------------------------------------------------------------------
def check_served_graph(path: Path, n_labels: int) -> list[str]:
    """The contract the text family serves; returns the input names in graph order.

    int64 input_ids and attention_mask (+ optional token_type_ids), [batch, sequence]; one output 'probabilities'
    float32 [batch, n_labels]."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in inits]
    names = [v.name for v in inputs]
    if "input_ids" not in names or "attention_mask" not in names:
        raise GateFailed(f"{path.name}: inputs {names}: input_ids and attention_mask are both required (a graph "
                         f"without attention_mask cannot be padded per batch)")
    for v in inputs:
        if v.name not in TEXT_INPUTS:
            raise GateFailed(f"{path.name}: input {v.name!r} is not one the runner feeds ({TEXT_INPUTS})")
        t = v.type.tensor_type
        if t.elem_type != onnx.TensorProto.INT64 or value_dims(v) != ["batch", "sequence"]:
            raise GateFailed(f"{path.name}: input {v.name} is "
                             f"{onnx.TensorProto.DataType.Name(t.elem_type)}{value_dims(v)}, "
                             f"expected int64['batch', 'sequence']")
    if [o.name for o in graph.output] != [OUTPUT]:
        raise GateFailed(f"{path.name}: outputs {[o.name for o in graph.output]}, expected exactly ['{OUTPUT}']")
    out = graph.output[0]
    if out.type.tensor_type.elem_type != onnx.TensorProto.FLOAT or value_dims(out) != ["batch", n_labels]:
        raise GateFailed(f"{path.name}: output {OUTPUT} is {value_dims(out)}, expected float32['batch', {n_labels}]")
    return names


def token_feeds(pad_token_id: int, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The runner's feeds (families/text/runtime.feeds) for ragged id rows."""
    # a stand-in for the manifest with what feeds() reads of it: the preprocessing record's pad_token_id
    manifest = cast(Manifest, SimpleNamespace(preprocess=SimpleNamespace(pad_token_id=pad_token_id)))
    return runtime.feeds(manifest, input_names, xs)


def long_text(tokenizer, pool: Sequence[str]) -> str:
    """A text the tokenizer truncates at its max_length (built from the pool, repeated as needed)."""
    text = " ".join(pool)
    while not tokenizer.encode_with_truncation([text])[1][0]:
        text = text + " " + text
    return text


def padded_cases(tokenizer_file: Path, max_length: int, pad_token_id: int, input_names: list[str],
                 texts: Sequence[str], batches: Sequence[int], seq_lens: Sequence[int]):
    """(case, feeds) per batch x sequence length, made as serving makes them:
    triserve.families.text.preprocess.TextTokenizer
    truncating at that length, padded per batch by triserve.families.text.runtime.feeds. Each batch holds one text cut
    at the
    length plus real, mostly shorter texts, so padding and the mask are exercised."""
    lens = sorted({s for s in seq_lens if s < max_length} | {int(max_length)})
    cases = []
    for s in lens:
        tok = TextTokenizer(tokenizer_file, max_length=s)
        longest = long_text(tok, texts)
        for i, b in enumerate(batches):
            chosen = [longest] + [texts[(s * 7 + i * 37 + j) % len(texts)] for j in range(b - 1)]
            feeds = token_feeds(pad_token_id, input_names, tok.encode(chosen))
            if feeds["input_ids"].shape != (b, s):
                raise GateFailed(f"parity case batch{b}/seq{s}: padded shape {feeds['input_ids'].shape}")
            name = f"batch{b}/seq{s}" + ("/truncated" if s == max_length else "")
            cases.append((name, feeds))
    return cases


def served_probabilities(artifact_dir: Path, manifest: Manifest, texts: Sequence[str], batch: int = PARAMS.batch,
                         session=None) -> np.ndarray:
    """triserve's in-process text path: the gateway's clean_text and tokenizer (the manifest's tokenizer file and
    max_length), the runner's feeds (pad per batch, token_type_ids when the graph has them), ONNX Runtime, the
    family's output check. Returns probabilities [n, labels] in manifest.labels order (float64)."""
    artifact_dir = Path(artifact_dir)
    pre = preprocess_as(manifest, TextPreprocess)
    tok = TextTokenizer(artifact_dir / pre.tokenizer_file, pre.max_length)
    sess = session or ort_session(artifact_dir / manifest.model_file, threads=1)
    names = [i.name for i in sess.get_inputs()]
    out = []
    for i in range(0, len(texts), batch):
        xs = tok.encode([clean_text(t) for t in texts[i:i + batch]])
        y = sess.run(None, runtime.feeds(manifest, names, xs))[0]
        for k, row in enumerate(y):
            try:
                check_probabilities(row, len(manifest.labels))
            except Exception as exc:  # services' InvalidOutput
                raise GateFailed(f"served output for text {i + k} fails the family's check: {exc}") from exc
        out.append(np.asarray(y, dtype=np.float64))
    return np.concatenate(out, axis=0)


def padding_invariance(artifact_dir: Path, manifest: Manifest, texts: Sequence[str], batched: np.ndarray,
                       session=None) -> tuple[float, float]:
    """Each text alone (no padding) vs its row in the padded batches: (max abs diff, top-1 agreement)."""
    alone = served_probabilities(artifact_dir, manifest, texts, batch=1, session=session)
    return float(np.abs(alone - batched).max()), float((alone.argmax(1) == batched.argmax(1)).mean())


def compare_probabilities(reference: np.ndarray, served: np.ndarray, texts: Sequence[str], labels: Sequence[str],
                          tolerance: float, tie_gap: float = PARAMS.tie_gap) -> dict:
    """Top-1 agreement and score difference of the served path vs a framework's own probabilities (same label
    order). A top-1 difference where the framework's own two best scores are within `tie_gap` counts as a tie, not a
    disagreement. passed: every top-1 equal (ties aside) and every score within `tolerance`."""
    reference, served = np.asarray(reference, np.float64), np.asarray(served, np.float64)
    ref_top, got_top = reference.argmax(1), served.argmax(1)
    srt = np.sort(reference, axis=1)
    gap = srt[:, -1] - srt[:, -2] if reference.shape[1] > 1 else np.ones(len(reference))
    differ = ref_top != got_top
    ties = differ & (gap < tie_gap)
    bad = np.flatnonzero(differ & ~ties)
    diff = float(np.abs(reference - served).max()) if reference.size else 0.0
    return {"n": len(texts), "top1_agreement": float((~differ).mean()), "ties": int(ties.sum()),
            "max_abs_diff": diff, "tolerance": tolerance, "passed": bool(len(bad) == 0 and diff <= tolerance),
            "disagreements": [{"text": texts[i][:120], "framework": labels[ref_top[i]], "served": labels[got_top[i]],
                               "framework_score": float(reference[i, ref_top[i]]),
                               "served_score": float(served[i, got_top[i]])} for i in bad[:5]]}


def evaluate(probs: np.ndarray, gold: Sequence[str], labels: Sequence[str]) -> dict[str, float]:
    """Accuracy and macro-F1 (over the labels present in gold or predictions) of the served probabilities."""
    from sklearn.metrics import accuracy_score, f1_score

    index = {lab: i for i, lab in enumerate(labels)}
    unknown = sorted({g for g in gold if g not in index})
    if unknown:
        raise ImportRefused(f"eval CSV labels not among the model's labels: {unknown[:10]} (model labels: "
                            f"{list(labels)[:20]}{' ...' if len(labels) > 20 else ''})")
    y = np.array([index[g] for g in gold])
    pred = np.asarray(probs).argmax(1)
    return {"eval_accuracy": float(accuracy_score(y, pred)), "eval_macro_f1": float(f1_score(y, pred, average="macro")),
            "eval_n": float(len(y))}


def io_specs(input_names: Sequence[str], n_labels: int) -> tuple[list[TensorSpec], list[TensorSpec]]:
    return ([TensorSpec(name=n, dtype="int64", shape=["batch", "sequence"]) for n in input_names],
            [TensorSpec(name=OUTPUT, dtype="float32", shape=["batch", n_labels])])


@dataclass
class SourceCheck:
    """What finish_import asks of the source framework: its probabilities for texts (label order of the manifest),
    and how the comparison is named in the manifest ('pipeline', 'sentence_transformers', ...)."""

    key: str
    probabilities: Callable[[list[str]], np.ndarray]
    description: str


@dataclass
class TextImport:
    """Everything finish_import needs beside the staged files."""

    name: str
    version: str
    labels: list[str]
    max_length: int
    pad_token_id: int
    reference: Callable[[dict[str, np.ndarray]], np.ndarray]  # feeds -> the framework's probabilities (parity)
    source: Source
    fingerprint: list  # files / values whose bytes define the model (data_fingerprint)
    recipe: dict  # what makes the import (hashed): the importer's arguments, source hashes
    source_check: SourceCheck | None = None
    eval_csv: Path | None = None
    min_accuracy: float | None = None
    params: TextParams = PARAMS
    report: dict = field(default_factory=dict)


def finish_import(staging: Path, job: TextImport) -> ImportResult:
    """Check, prove, verify and describe a staged text artifact (model.onnx + tokenizer.json); see the module doc."""
    lap = Laps()
    staging = Path(staging)
    model_path, tok_path = staging / MODEL_FILE, staging / TOKENIZER_FILE
    p = job.params
    labels = list(job.labels)
    n = len(labels)
    if n < 2:
        raise ImportRefused(f"{n} label(s): a classifier needs at least two")
    if len(set(labels)) != n:
        dup = sorted({x for x in labels if labels.count(x) > 1})
        raise ImportRefused(f"duplicate label names {dup[:5]}: answers name labels, they must be unique")
    input_names = check_served_graph(model_path, n)

    check_eval_args(job.eval_csv, job.min_accuracy, labels)
    gold_texts, gold = read_eval_csv(job.eval_csv) if job.eval_csv else ([], [])
    texts = check_texts(p.n_check_texts, gold_texts)

    # 1. parity: ONNX Runtime vs the framework, on batches made as the runner makes them
    cases = padded_cases(tok_path, job.max_length, job.pad_token_id, input_names, texts, p.parity_batches,
                         p.parity_seq_lens)
    session = ort_session(model_path, threads=1)
    try:
        parity = parity_gate([(c, f, job.reference(f)) for c, f in cases], session, tolerance=p.parity_tolerance,
                             output_name=OUTPUT)
    except GateFailed as exc:
        raise GateFailed(f"{job.name}: {exc}") from exc
    except Exception as exc:  # a graph that does not run on these inputs
        raise ImportRefused(f"{job.name}: the graph does not run on padded batches up to max_length "
                            f"{job.max_length}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from exc
    worst = max(parity, key=lambda c: c.max_abs_diff)
    log.info("text %s: parity on %d cases, worst %s %.2e", job.name, len(parity), worst.case, worst.max_abs_diff)
    lap("parity")

    # 2. the served path: a draft manifest (what the service reads), padding invariance
    inputs, outputs = io_specs(input_names, n)
    preprocess = TextPreprocess(tokenizer_file=TOKENIZER_FILE, max_length=int(job.max_length),
                                pad_token_id=int(job.pad_token_id), lowercase=tokenizer_lowercases(tok_path))
    recipe = {"importer": job.recipe, "params": asdict(p)}
    draft = Manifest(name=job.name, version=job.version, task="text", variant="primary", model_file=MODEL_FILE,
                     files=[], opset=opset_of(model_path), inputs=inputs, outputs=outputs, preprocess=preprocess,
                     labels=labels, source=job.source.model_copy(update={"recipe": recipe}),
                     data_fingerprint=data_fingerprint(*job.fingerprint, *([job.eval_csv] if job.eval_csv else [])),
                     recipe_hash=stable_hash({"recipe": recipe,
                                              "code": source_digest(CODE)}),
                     created_at=utcnow(), git_commit=git_commit())
    served = served_probabilities(staging, draft, texts, p.batch, session=session)
    inv_diff, inv_agree = padding_invariance(staging, draft, texts, served, session=session)
    metrics: dict[str, float] = {"n_check_texts": float(len(texts)), "n_labels": float(n),
                                 "parity_max_abs_diff": float(worst.max_abs_diff),
                                 "padding_invariance_max_abs_diff": inv_diff}
    gates: dict[str, bool] = {"parity": True, "padding_invariance": inv_diff <= p.invariance_tolerance}
    if not gates["padding_invariance"]:
        raise GateFailed(f"{job.name}: a text alone and the same text in a padded batch differ by {inv_diff:.3g} > "
                         f"{p.invariance_tolerance} (top-1 agreement {inv_agree:.3f}): the graph does not honour "
                         f"attention_mask, its answers would depend on batch neighbours")
    lap("served path")

    # 3. the source framework's own predictions
    report = dict(job.report)
    if job.source_check is not None:
        sc = job.source_check
        cmp = compare_probabilities(sc.probabilities(texts), served, texts, labels, p.source_tolerance, p.tie_gap)
        report[sc.key] = cmp
        metrics.update({f"{sc.key}_top1_agreement": cmp["top1_agreement"],
                        f"{sc.key}_max_abs_diff": cmp["max_abs_diff"],
                        f"{sc.key}_n": float(cmp["n"]), f"{sc.key}_ties": float(cmp["ties"])})
        gates[f"{sc.key}_agreement"] = cmp["passed"]
        log.info("text %s: vs %s on %d texts: top-1 agreement %.4f (%d ties), max |p diff| %.2e", job.name,
                 sc.description, cmp["n"], cmp["top1_agreement"], cmp["ties"], cmp["max_abs_diff"])
        if not cmp["passed"]:
            raise GateFailed(f"{job.name}: triserve's path disagrees with {sc.description}: top-1 agreement "
                             f"{cmp['top1_agreement']:.4f}, max score diff {cmp['max_abs_diff']:.3g} (tolerance "
                             f"{p.source_tolerance}); e.g. {cmp['disagreements'][:2]}")
        lap(sc.key)

    # 4. quality on the user's labelled data
    ref_probs = served
    if gold:
        probs = served_probabilities(staging, draft, gold_texts, p.batch, session=session)
        ref_probs = probs
        metrics.update(evaluate(probs, gold, labels))
        log.info("text %s: eval on %d rows: accuracy %.4f, macro-F1 %.4f", job.name, len(gold),
                 metrics["eval_accuracy"], metrics["eval_macro_f1"])
        if job.min_accuracy is not None:
            gates["min_accuracy"] = metrics["eval_accuracy"] >= job.min_accuracy
            if not gates["min_accuracy"]:
                raise GateFailed(f"{job.name}: eval accuracy {metrics['eval_accuracy']:.4f} < --min-accuracy "
                                 f"{job.min_accuracy}")
        lap("eval")

    final = Manifest.model_validate({**draft.model_dump(), "metrics": metrics,
                                     "parity": [c.model_dump() for c in parity], "gates": gates,
                                     "reference": top1_references(ref_probs, n)})
    for extra in staging.iterdir():  # only the served files are published
        if extra.name not in (MODEL_FILE, TOKENIZER_FILE):
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    report.update({"labels": labels, "max_length": job.max_length, "pad_token_id": job.pad_token_id,
                   "inputs": input_names, "parity_worst": {"case": worst.case, "max_abs_diff": worst.max_abs_diff},
                   "padding_invariance_max_abs_diff": inv_diff, "metrics": metrics, "gates": gates,
                   "timings_s": lap.timings})
    return ImportResult(primary=Artifact(staging=staging, manifest=final), fallback=None, report=report)


def top1_references(probs: np.ndarray, n_labels: int) -> dict:
    """The drift references of a classifier: the top-1 probability and the predicted class frequencies."""
    top1 = probs.argmax(axis=1)
    return {"top1_prob": histogram_reference(probs.max(axis=1), np.linspace(0.0, 1.0, 21)),
            "class_freq": histogram_reference(top1, np.arange(n_labels + 1))}


# -- CLI --------------------------------------------------------------------------------------------------------------
def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments every text importer takes (name, version, max length, evaluation CSV, registry, alias,
    licence)."""
    p.add_argument("--name", required=True, help="registry model name, e.g. my-intents")
    p.add_argument("--version", required=True, help="immutable version, e.g. 1.0.0")
    p.add_argument("--max-length", type=int, default=None, help="tokens per text after truncation (special tokens "
                                                                 "included)")
    p.add_argument("--eval-csv", type=Path, default=None,
                   help="labelled CSV with 'text' and 'label' columns: accuracy and macro-F1 go into the manifest")
    p.add_argument("--min-accuracy", type=float, default=None, help="refuse the import below this eval accuracy")
    add_registry_option(p)
    p.add_argument("--alias", default=None, help="also point this alias (e.g. canary, stable) at the new version")
    add_license_option(p)


