"""Import a text classifier given as an ONNX graph + tokenizer.json + labels; and the last mile of every text import.

    python -m scripts.importer text-onnx --model model.onnx --tokenizer tokenizer.json --labels labels.txt \\
        --outputs logits --name my-text --version 1.0.0 [--max-length 128] [--pad-token-id 0] \\
        [--eval-csv data.csv] [--min-accuracy 0.8] [--alias canary] [--registry DIR] \\
        [--license SPDX]                             # required when the ONNX metadata states no licence

Every text import (this one, text-hf, text-sklearn) ends the same way, and that part lives here: a staged folder with
`model.onnx` (int64 `input_ids` / `attention_mask` [/ `token_type_ids`] [batch, sequence] -> `probabilities` float32
[batch, num_labels]) and `tokenizer.json` (no padding, truncation at max_length) is
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
  6. published as an immutable version with its manifest, optionally aliased.
Any failure raises ImportRefused / GateFailed and nothing is published.

text-onnx accepts: inputs named input_ids, attention_mask (both required) and optionally token_type_ids, int64, with
dynamic batch and sequence axes (renamed 'batch' / 'sequence'); ONE output [batch, num_labels] with num_labels ==
the number of labels. `--outputs logits` appends a Softmax node (onnx.helper) so the served graph outputs
probabilities; `--outputs probabilities` keeps the graph's output (renamed 'probabilities' through an Identity) and
checks that its rows are distributions. Refused, with the reason: other input names (position_ids, pixel_values, ...),
int32 or float inputs, fixed batch or sequence sizes, several outputs, a label count that differs from the output,
logits declared as probabilities and the reverse, a graph that does not run at max_length.
"""
from __future__ import annotations

import argparse
import csv
import functools
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np

from families.text.manifest import TextPreprocess
from models.manifest import Manifest, Source, TensorSpec, preprocess_as, sha256_file, utcnow
from scripts.common import (
    Artifact,
    GateFailed,
    data_fingerprint,
    git_commit,
    ort_session,
    package_versions,
    parity_gate,
    source_digest,
    stable_hash,
)
from scripts.importer.detection_onnx import ImportRefused, ImportResult, publish, read_labels
from scripts.importer.licenses import add_license_option, onnx_license, resolve_license

log = logging.getLogger("triserve.importer")

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "probabilities"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
CODE_FILES = [Path(__file__).resolve().parent / f for f in ("text_onnx.py", "text_hf.py", "text_sklearn.py")]
PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>", "[pad]", "<PAD>")


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


# -- small readers ----------------------------------------------------------------------------------------------------
def tokenizer_lowercases(tokenizer_json: Path) -> bool:
    """Whether the tokenizer.json normaliser lowercases (BertNormalizer(lowercase) or a Lowercase step)."""
    def walk(node) -> bool:
        if not isinstance(node, dict):
            return False
        kind = node.get("type")
        if kind == "Lowercase" or (kind == "BertNormalizer" and node.get("lowercase")):
            return True
        return any(walk(n) for n in node.get("normalizers", []) or [])

    return walk(json.loads(Path(tokenizer_json).read_text()).get("normalizer"))


def tokenizer_pad_id(tokenizer_json: Path, explicit: int | None = None) -> int:
    """The pad id the runner pads with: --pad-token-id, else the file's padding config, else a known pad token."""
    if explicit is not None:
        return int(explicit)
    data = json.loads(Path(tokenizer_json).read_text())
    pad = (data.get("padding") or {}).get("pad_id")
    if pad is not None:
        return int(pad)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    for t in PAD_TOKENS:
        tid = tok.token_to_id(t)
        if tid is not None:
            return int(tid)
    raise ImportRefused(f"{Path(tokenizer_json).name}: no pad token found (no padding config, none of {PAD_TOKENS}); "
                        f"pass --pad-token-id N (the runner pads batches with it; the mask hides it)")


def tokenizer_max_length(tokenizer_json: Path) -> int | None:
    """The truncation length written in tokenizer.json, if any."""
    trunc = json.loads(Path(tokenizer_json).read_text()).get("truncation") or {}
    return int(trunc["max_length"]) if trunc.get("max_length") else None


def stage_tokenizer(src: Path, dst: Path, max_length: int) -> Path:
    """tokenizer.json with the serving settings: no fixed padding, truncation at max_length (scripts/text/build.py)."""
    from scripts.text.build import write_tokenizer

    try:
        return write_tokenizer(Path(src), Path(dst), max_length)
    except Exception as exc:  # an unreadable tokenizer is a refusal
        raise ImportRefused(f"{Path(src).name}: not a readable tokenizers file ({type(exc).__name__}: {exc})") from exc


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
    """Texts for the checks: scripts/text/utterances.py's English utterances (varied case, punctuation, length), a
    medium and a long one, then up to n of the user's own texts (their domain, their lengths)."""
    from scripts.text.utterances import evaluation_utterances, parity_texts

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
def _dims(value_info) -> list[int | str | None]:
    out = []
    for d in value_info.type.tensor_type.shape.dim:
        out.append(d.dim_param if d.HasField("dim_param") else (int(d.dim_value) if d.HasField("dim_value") else None))
    return out


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
        if t.elem_type != onnx.TensorProto.INT64 or _dims(v) != ["batch", "sequence"]:
            raise GateFailed(f"{path.name}: input {v.name} is {onnx.TensorProto.DataType.Name(t.elem_type)}{_dims(v)}, "
                             f"expected int64['batch', 'sequence']")
    if [o.name for o in graph.output] != [OUTPUT]:
        raise GateFailed(f"{path.name}: outputs {[o.name for o in graph.output]}, expected exactly ['{OUTPUT}']")
    out = graph.output[0]
    if out.type.tensor_type.elem_type != onnx.TensorProto.FLOAT or _dims(out) != ["batch", n_labels]:
        raise GateFailed(f"{path.name}: output {OUTPUT} is {_dims(out)}, expected float32['batch', {n_labels}]")
    return names


def token_feeds(pad_token_id: int, input_names: list[str], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The runner's feeds (families/text/runtime.feeds) for ragged id rows."""
    from families.text import runtime

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
    """(case, feeds) per batch x sequence length, made as serving makes them: families.text.preprocess.TextTokenizer
    truncating at that length, padded per batch by families.text.runtime.feeds. Each batch holds one text cut at the
    length plus real, mostly shorter texts, so padding and the mask are exercised."""
    from families.text.preprocess import TextTokenizer

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


@functools.lru_cache(maxsize=1)
def gateway_clean_text() -> Callable[[str], str]:
    """The gateway's text cleaning (families.text.preprocess.clean_text: NFC, control characters dropped, stripped).

    It lives in the service module, which imports the whole serving stack; when that stack cannot be imported here
    (an export machine without it, a tree mid-refactor) the texts go in as given, with a warning: the check texts
    and most user texts are unchanged by the cleaning anyway."""
    try:
        from families.text.preprocess import clean_text
    except ImportError as exc:
        log.warning("families.text.preprocess.clean_text is not importable (%s): texts are used as given", exc)
        return lambda text: text
    return clean_text


def served_probabilities(artifact_dir: Path, manifest: Manifest, texts: Sequence[str], batch: int = PARAMS.batch,
                         session=None) -> np.ndarray:
    """triserve's in-process text path: the gateway's clean_text and tokenizer (the manifest's tokenizer file and
    max_length), the runner's feeds (pad per batch, token_type_ids when the graph has them), ONNX Runtime, the
    family's output check. Returns probabilities [n, labels] in manifest.labels order (float64)."""
    from families.text import runtime
    from families.text.postprocess import check_probabilities
    from families.text.preprocess import TextTokenizer

    clean_text = gateway_clean_text()
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


def _opset(path: Path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return int(next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0))


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
    t0 = time.monotonic()
    timings: dict[str, float] = {}

    def lap(key: str) -> None:
        timings[key] = round(time.monotonic() - t0 - sum(timings.values()), 2)

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
                     files=[], opset=_opset(model_path), inputs=inputs, outputs=outputs, preprocess=preprocess,
                     labels=labels, source=job.source.model_copy(update={"recipe": recipe}),
                     data_fingerprint=data_fingerprint(*job.fingerprint, *([job.eval_csv] if job.eval_csv else [])),
                     recipe_hash=stable_hash({"recipe": recipe,
                                              "code": source_digest([f for f in CODE_FILES if f.is_file()])}),
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

    from scripts.text.build import top1_references

    final = Manifest.model_validate({**draft.model_dump(), "metrics": metrics,
                                     "parity": [c.model_dump() for c in parity], "gates": gates,
                                     "reference": top1_references(ref_probs, n)})
    for extra in staging.iterdir():  # only the served files are published
        if extra.name not in (MODEL_FILE, TOKENIZER_FILE):
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    report.update({"labels": labels, "max_length": job.max_length, "pad_token_id": job.pad_token_id,
                   "inputs": input_names, "parity_worst": {"case": worst.case, "max_abs_diff": worst.max_abs_diff},
                   "padding_invariance_max_abs_diff": inv_diff, "metrics": metrics, "gates": gates,
                   "timings_s": timings})
    return ImportResult(primary=Artifact(staging=staging, manifest=final), fallback=None, report=report)


def import_and_publish(registry, name: str, version: str, alias: str | None, importer: str,
                       build: Callable[[Path], ImportResult]) -> tuple[list, dict]:
    """The last mile of every text and forecast import: refuse an existing version before any work, build the
    import in a scratch folder (build(work) -> ImportResult), publish it (immutable) and move the alias; (published
    manifests, report). Nothing is published on refusal; the scratch folder is always removed."""
    refuse_existing(registry, name, version)
    work = Path(tempfile.mkdtemp(prefix=f"triserve-{importer}-"))
    try:
        result = build(work)
        return publish(registry, result, alias, by=f"scripts.importer {importer}"), result.report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def refuse_existing(registry, name: str, version: str) -> None:
    from models.registry import VersionExists

    if registry.has(name, version):
        raise VersionExists(f"{name}:{version} already exists; versions are immutable")


# -- text-onnx --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OnnxTextInfo:
    path: Path
    sha256: str
    input_names: list[str]
    output_name: str
    num_labels: int
    opset: int


def inspect_text_onnx(path: Path, labels: Sequence[str], outputs: str, tokenizer_path: Path,
                      max_length: int) -> OnnxTextInfo:
    """Read and check a text classification graph; ImportRefused (with the reason) for anything else.

    outputs: 'logits' or 'probabilities' (what the graph's output is; checked on a probe run of two real texts
    tokenised by `tokenizer_path`, one cut at max_length, one short and padded)."""
    import onnx

    from families.text.preprocess import TextTokenizer

    path = Path(path)
    if outputs not in ("logits", "probabilities"):
        raise ImportRefused(f"--outputs must be 'logits' or 'probabilities', got {outputs!r}")
    try:
        model = onnx.load(str(path))
    except Exception as exc:
        raise ImportRefused(f"{path.name}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    inits = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    names = [v.name for v in inputs]
    unknown = [x for x in names if x not in TEXT_INPUTS]
    if unknown:
        raise ImportRefused(f"{path.name}: input(s) {unknown} are not fed by the text runner, which feeds input_ids, "
                            f"attention_mask and (when the graph has it) all-zero token_type_ids; re-export without "
                            f"them (e.g. position_ids computed inside the graph)")
    for required in ("input_ids", "attention_mask"):
        if required not in names:
            raise ImportRefused(f"{path.name}: no {required} input (inputs {names}); the runner pads batches and "
                                f"needs a graph that takes the attention mask")
    for v in inputs:
        t = v.type.tensor_type
        dims = _dims(v)
        if t.elem_type != onnx.TensorProto.INT64:
            raise ImportRefused(f"{path.name}: input {v.name} is {onnx.TensorProto.DataType.Name(t.elem_type)}; "
                                f"the runner feeds int64 (re-export with int64 ids)")
        if len(dims) != 2:
            raise ImportRefused(f"{path.name}: input {v.name} has dims {dims}, expected [batch, sequence]")
        fixed = [d for d in dims if isinstance(d, int)]
        if fixed:
            raise ImportRefused(f"{path.name}: input {v.name} has fixed dims {dims}: the runner batches requests and "
                                f"pads each batch to its longest text, so batch and sequence must both be dynamic "
                                f"(export with dynamic_axes)")
    if len(model.graph.output) != 1:
        raise ImportRefused(f"{path.name}: {len(model.graph.output)} outputs {[o.name for o in model.graph.output]}; "
                            f"expected one [batch, num_labels] output")
    out = model.graph.output[0]
    odims = _dims(out)
    if len(odims) != 2:
        raise ImportRefused(f"{path.name}: output {out.name} has dims {odims}; expected [batch, num_labels] "
                            f"(token classification and embedding graphs are not text classifiers)")
    if out.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        raise ImportRefused(f"{path.name}: output {out.name} is "
                            f"{onnx.TensorProto.DataType.Name(out.type.tensor_type.elem_type)}, expected float32")
    n = len(labels)
    if isinstance(odims[1], int) and odims[1] != n:
        raise ImportRefused(f"{path.name}: output {out.name} has {odims[1]} classes but {n} labels were given")

    # one probe at batch 2 and max_length: the real class count, the graph runs at that length, logits vs probabilities
    try:
        tok = TextTokenizer(tokenizer_path, max_length)
    except Exception as exc:
        raise ImportRefused(f"{Path(tokenizer_path).name}: not a readable tokenizers file ({type(exc).__name__}: "
                            f"{exc})") from exc
    texts = check_texts(8)
    feeds = token_feeds(0, names, tok.encode([long_text(tok, texts), texts[0]]))  # pad id: the mask hides it
    try:
        session = ort_session(path, threads=1)
        y = session.run(None, feeds)[0]
    except Exception as exc:
        raise ImportRefused(f"{path.name}: ONNX Runtime cannot run it on [2, {max_length}] ids: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:300]} (a graph with fewer positions than max_length? pass "
                            f"--max-length)") from exc
    if y.ndim != 2 or y.shape[0] != 2:
        raise ImportRefused(f"{path.name}: output shape {list(y.shape)} for a batch of 2; expected [2, num_labels]")
    if y.shape[1] != n:
        raise ImportRefused(f"{path.name}: the graph outputs {y.shape[1]} classes but {n} labels were given")
    if not np.isfinite(y).all():
        raise ImportRefused(f"{path.name}: non-finite outputs on a probe batch")
    rows_are_dists = bool(y.min() >= -1e-6 and y.max() <= 1 + 1e-6 and np.allclose(y.sum(1), 1.0, atol=1e-4))
    if outputs == "probabilities" and not rows_are_dists:
        raise ImportRefused(f"{path.name}: --outputs probabilities, but output rows are not distributions (range "
                            f"{y.min():.3g}..{y.max():.3g}, row sums {np.round(y.sum(1), 4).tolist()}); these look "
                            f"like logits: pass --outputs logits")
    if outputs == "logits" and rows_are_dists:
        raise ImportRefused(f"{path.name}: --outputs logits, but every output row is already a distribution in [0, 1] "
                            f"summing to 1; a second softmax would flatten it: pass --outputs probabilities")
    opset = int(next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0))
    return OnnxTextInfo(path=path, sha256=sha256_file(path), input_names=names, output_name=out.name, num_labels=n,
                        opset=opset)


def rewrite_text_graph(src: Path, dst: Path, outputs: str) -> dict:
    """The served graph: input/output axes named 'batch' / 'sequence', one output 'probabilities' (a Softmax node
    over the last axis appended for logits, an Identity for probabilities). Returns what was changed."""
    import onnx
    from onnx import helper

    model = onnx.load(str(src))
    graph = model.graph
    changes: dict = {"renamed_axes": {}, "appended": None}
    inits = {t.name for t in graph.initializer}
    renames: dict[str, str] = {}
    for v in graph.input:
        if v.name in inits:
            continue
        dims = v.type.tensor_type.shape.dim
        for d, want in zip(dims, ("batch", "sequence")):
            if d.dim_param != want:
                if d.dim_param:
                    renames[d.dim_param] = want
                d.dim_param = want
        changes["renamed_axes"][v.name] = ["batch", "sequence"]
    for vi in list(graph.value_info) + list(graph.output):  # keep symbolic dims consistent inside the graph
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in renames:
                d.dim_param = renames[d.dim_param]
    out = graph.output[0]
    n_labels = _dims(out)[1]
    source_name = out.name
    if source_name == OUTPUT:  # free the name for the new output
        source_name = OUTPUT + "_source"
        for node in graph.node:
            node.output[:] = [source_name if o == OUTPUT else o for o in node.output]
            node.input[:] = [source_name if i == OUTPUT else i for i in node.input]
    del graph.output[:]
    if outputs == "logits":
        graph.node.append(helper.make_node("Softmax", [source_name], [OUTPUT], name="triserve/Softmax", axis=-1))
        changes["appended"] = "Softmax(axis=-1)"
    else:
        graph.node.append(helper.make_node("Identity", [source_name], [OUTPUT], name="triserve/Identity"))
        changes["appended"] = "Identity"
    graph.output.append(helper.make_tensor_value_info(OUTPUT, onnx.TensorProto.FLOAT, ["batch", n_labels]))
    props = [(p.key, p.value) for p in model.metadata_props if p.key != "triserve_import"]
    del model.metadata_props[:]
    for k, v in props + [("triserve_import", f"scripts/importer/text_onnx.py ({changes['appended']})")]:
        model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return changes


def softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def import_text_onnx(model_path: Path, tokenizer_path: Path, labels: Sequence[str], name: str, version: str,
                     work_dir: Path, *, outputs: str, max_length: int | None = None, pad_token_id: int | None = None,
                     eval_csv: Path | None = None, min_accuracy: float | None = None,
                     params: TextParams = PARAMS, license: str | None = None,
                     require_license: bool = False) -> ImportResult:
    """Check, rewrite, prove and describe an ONNX text classifier; the artifact is staged under work_dir/name.
    `license`: SPDX expression of the weights (else the ONNX metadata's `license`, else NOASSERTION, or
    LicenseRequired with `require_license`: scripts/importer/licenses.py)."""
    model_path, tokenizer_path = Path(model_path), Path(tokenizer_path)
    weights_license = resolve_license(license, onnx_license(model_path), model_path.name, required=require_license)
    labels = [str(x) for x in labels]
    check_eval_args(eval_csv, min_accuracy, labels)
    if max_length is None:
        max_length = tokenizer_max_length(tokenizer_path)
        if max_length is None:
            raise ImportRefused(f"{tokenizer_path.name} has no truncation length; pass --max-length N (tokens per "
                                f"text, special tokens included, at most the model's position embeddings)")
    pad = tokenizer_pad_id(tokenizer_path, pad_token_id)
    info = inspect_text_onnx(model_path, labels, outputs, tokenizer_path, int(max_length))
    staging = Path(work_dir) / name
    staging.mkdir(parents=True, exist_ok=True)
    stage_tokenizer(tokenizer_path, staging / TOKENIZER_FILE, int(max_length))
    changes = rewrite_text_graph(model_path, staging / MODEL_FILE, outputs)

    original = ort_session(model_path, threads=1)

    def reference(feeds: dict[str, np.ndarray]) -> np.ndarray:
        y = original.run(None, {k: v for k, v in feeds.items() if k in info.input_names})[0]
        return softmax(y) if outputs == "logits" else np.asarray(y, dtype=np.float64)

    source = Source(kind="user", license=weights_license,
                    packages=package_versions("onnx", "onnxruntime", "tokenizers"), description=(
        f"ONNX text classifier {model_path.name} (sha256 {info.sha256}, opset {info.opset}, inputs "
        f"{info.input_names}, output {info.output_name} = {outputs}) with {tokenizer_path.name} (sha256 "
        f"{sha256_file(tokenizer_path)}); imported by scripts/importer/text_onnx.py: "
        f"{changes['appended']} appended as output 'probabilities', axes named batch/sequence"))
    job = TextImport(name=name, version=version, labels=labels, max_length=int(max_length), pad_token_id=pad,
                     reference=reference, source=source, fingerprint=[model_path, tokenizer_path, labels],
                     recipe={"kind": "text-onnx", "model_sha256": info.sha256,
                             "tokenizer_sha256": sha256_file(tokenizer_path), "labels": labels, "outputs": outputs,
                             "max_length": int(max_length), "pad_token_id": pad},
                     eval_csv=eval_csv, min_accuracy=min_accuracy, params=params,
                     report={"source_graph": {"inputs": info.input_names, "output": info.output_name,
                                              "outputs": outputs, "opset": info.opset}, "rewrite": changes})
    return finish_import(staging, job)


def publish_text_onnx(model_path: Path, tokenizer_path: Path, labels_file: Path, name: str, version: str, registry, *,
                      outputs: str, max_length: int | None = None, pad_token_id: int | None = None,
                      eval_csv: Path | None = None, min_accuracy: float | None = None, alias: str | None = None,
                      params: TextParams = PARAMS, license: str | None = None, require_license: bool = False):
    """import_text_onnx + publish into `registry`; (published manifests, report). Nothing is published on refusal."""
    labels = read_labels(labels_file)
    return import_and_publish(registry, name, version, alias, "text-onnx", lambda work: import_text_onnx(
        model_path, tokenizer_path, labels, name, version, work, outputs=outputs, max_length=max_length,
        pad_token_id=pad_token_id, eval_csv=eval_csv, min_accuracy=min_accuracy, params=params, license=license,
        require_license=require_license))


# -- CLI --------------------------------------------------------------------------------------------------------------
def run_cli(fn: Callable[[], tuple[list, dict]]) -> int:
    """Run an import, answer JSON on stdout; refusals (GateFailed, RegistryError) exit 2 with the reason logged."""
    from models.registry import RegistryError
    from scripts.importer.detection_onnx import print_result, quiet_stdout

    try:
        with quiet_stdout():
            published, report = fn()
    except (GateFailed, RegistryError) as exc:
        log.error("nothing published: %s", exc)
        return 2
    print_result(published, report)
    return 0


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    from scripts.importer.detection_onnx import default_registry

    p.add_argument("--name", required=True, help="registry model name, e.g. my-intents")
    p.add_argument("--version", required=True, help="immutable version, e.g. 1.0.0")
    p.add_argument("--max-length", type=int, default=None, help="tokens per text after truncation (special tokens "
                                                                 "included)")
    p.add_argument("--eval-csv", type=Path, default=None,
                   help="labelled CSV with 'text' and 'label' columns: accuracy and macro-F1 go into the manifest")
    p.add_argument("--min-accuracy", type=float, default=None, help="refuse the import below this eval accuracy")
    p.add_argument("--registry", type=Path, default=default_registry(),
                   help="registry root (default: $TRISERVE_REGISTRY_DIR or models/store)")
    p.add_argument("--alias", default=None, help="also point this alias (e.g. canary, stable) at the new version")
    add_license_option(p)


def _cmd(args) -> int:
    from models.registry import LocalRegistry

    return run_cli(lambda: publish_text_onnx(
        args.model, args.tokenizer, args.labels, args.name, args.version, LocalRegistry(args.registry),
        outputs=args.outputs, max_length=args.max_length, pad_token_id=args.pad_token_id, eval_csv=args.eval_csv,
        min_accuracy=args.min_accuracy, alias=args.alias, license=args.license, require_license=True))


def add_parser(subparsers) -> None:
    """Register `text-onnx` on the `python -m scripts.importer` parser."""
    p = subparsers.add_parser("text-onnx", help="import an ONNX text classifier + tokenizer.json + labels",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="the .onnx graph")
    p.add_argument("--tokenizer", type=Path, required=True, help="its tokenizer.json (Hugging Face tokenizers)")
    p.add_argument("--labels", type=Path, required=True,
                   help="class names in output order: one per line, or a JSON/YAML list or {index: name} dict")
    p.add_argument("--outputs", choices=("logits", "probabilities"), required=True,
                   help="what the graph outputs: logits get a Softmax appended")
    p.add_argument("--pad-token-id", type=int, default=None, help="pad id (default: from tokenizer.json)")
    add_common_arguments(p)
    p.set_defaults(func=_cmd)
