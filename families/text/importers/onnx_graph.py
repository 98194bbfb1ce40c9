"""Import a text classifier given as an ONNX graph + tokenizer.json + labels.

    triserve import text-onnx --model model.onnx --tokenizer tokenizer.json --labels labels.txt \\
        --outputs logits --name my-text --version 1.0.0 [--max-length 128] [--pad-token-id 0] \\
        [--eval-csv data.csv] [--min-accuracy 0.8] [--alias canary] [--registry DIR] \\
        [--license SPDX]                             # required when the ONNX metadata states no licence

The graph is checked and rewritten here, then goes through the last mile every text import shares (finish.py:
parity against the given graph itself, padding invariance, the served path, the optional evaluation, publishing).

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
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triserve.families.text.importers.finish import (
    MODEL_FILE,
    OUTPUT,
    PARAMS,
    TEXT_INPUTS,
    TextImport,
    TextParams,
    add_common_arguments,
    check_eval_args,
    check_texts,
    finish_import,
    long_text,
    token_feeds,
)
from triserve.families.text.importers.tokenizer import (
    TOKENIZER_FILE,
    stage_tokenizer,
    tokenizer_max_length,
    tokenizer_pad_id,
)
from triserve.families.text.preprocess import TextTokenizer
from triserve.models.importing.graphs import ort_session, value_dims
from triserve.models.importing.labels import read_labels
from triserve.models.importing.licenses import onnx_license, resolve_license
from triserve.models.importing.provenance import package_versions
from triserve.models.importing.publish import import_and_publish, run_cli
from triserve.models.importing.result import ImportRefused, ImportResult
from triserve.models.manifest import Source, sha256_file

log = logging.getLogger("triserve.importer")


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
        dims = value_dims(v)
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
    odims = value_dims(out)
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
    n_labels = value_dims(out)[1]
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
    for k, v in props + [("triserve_import", f"families/text/importers/onnx_graph.py ({changes['appended']})")]:
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
    LicenseRequired with `require_license`: models/importing/licenses.py)."""
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
        f"{sha256_file(tokenizer_path)}); imported by families/text/importers/onnx_graph.py: "
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
def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    return run_cli(lambda: publish_text_onnx(
        args.model, args.tokenizer, args.labels, args.name, args.version, LocalRegistry(args.registry),
        outputs=args.outputs, max_length=args.max_length, pad_token_id=args.pad_token_id, eval_csv=args.eval_csv,
        min_accuracy=args.min_accuracy, alias=args.alias, license=args.license, require_license=True))


def add_parser(subparsers) -> None:
    """Register `text-onnx` on the `triserve import` parser (triserve/importers.py)."""
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
