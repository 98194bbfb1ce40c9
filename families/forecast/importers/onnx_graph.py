"""Import a user's ONNX forecaster: one window in, a point or quantile forecast out.

    triserve import forecast-onnx --model model.onnx --frequencies h,D --name my-load --version 1.0.0 \\
        [--context 168] [--horizon 48] [--quantiles 0.1,0.5,0.9] [--scaling none|mean_abs] \\
        [--max-horizon h=48,D=14] [--alias canary] [--registry DIR] \\
        [--license SPDX]                             # required when the ONNX metadata states no licence

What it serves (contract "window", families/forecast/manifest.py): ONE float32 input [batch, context] holding the last
`context` regular points of the series, and ONE float32 output [batch, horizon] (a point forecast) or
[batch, horizon, len(quantiles)] (quantiles, which must include 0.5: the point forecast). `--scaling none` (default)
feeds raw values and reads the output in the series' units; `mean_abs` feeds (x - mean) / mean absolute deviation of
the window and undoes it on the output (the graph was trained on scaled windows). The context and horizon are read
from the graph when its axes are static, otherwise they must be given; a stated value that contradicts the graph is
refused. Series shorter than the context are refused by the service (series_too_short): a window graph has no mask.

Checks before publishing (any failure: ImportRefused, nothing published):
  1. the graph contract above (one input, one output, float32, shapes, quantile count);
  2. the served path (families/forecast/preprocess.model_item -> runtime.feeds -> ONNX Runtime -> postprocess) equals
     the graph run by hand on the same windows (max |diff| <= 1e-4 of the window scale), on seeded series at scales
     1e-3 .. 1e9 and every declared frequency;
  3. batch invariance: each window alone vs in a batch of 4 (<= 1e-4): a graph that mixes rows is refused; a graph
     whose batch axis is pinned to 1 is served item by item (recorded);
  4. outputs finite on every check window.
The fallback: pair the deployment with the numpy Theta fallback `forecast-theta` (`make models` publishes it), e.g.
`fallback: {name: forecast-theta}` in configs/models.yaml; it serves any frequency and history length.
"""
from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np

from triserve.families.forecast import runtime
from triserve.families.forecast.features import FREQUENCIES, SEASON
from triserve.families.forecast.manifest import ForecastPreprocess
from triserve.families.forecast.postprocess import quantile_forecast
from triserve.families.forecast.preprocess import model_item
from triserve.models.importing.graphs import ort_session
from triserve.models.importing.licenses import add_license_option, onnx_license, resolve_license
from triserve.models.importing.provenance import data_fingerprint, git_commit, package_versions, source_digest
from triserve.models.importing.publish import add_registry_option, import_and_publish, run_cli
from triserve.models.importing.result import Artifact, ImportRefused, ImportResult
from triserve.models.manifest import Manifest, ParityCheck, Source, TensorSpec, sha256_file, utcnow

log = logging.getLogger("triserve.importer")

MODEL_FILE = "model.onnx"
TOLERANCE = 1e-4
CHECK_SCALES = (1e-3, 1.0, 1e4, 1e9)


def _dims(value_info) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in
            value_info.type.tensor_type.shape.dim]


def inspect(path: Path, context: int | None, horizon: int | None, quantiles: list[float]) -> dict:
    """The graph's contract, with the user's statements checked against it."""
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # an unreadable file is a refusal
        raise ImportRefused(f"{Path(path).name}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1 or len(model.graph.output) != 1:
        raise ImportRefused(f"a window forecaster has one input and one output; this graph has inputs "
                            f"{[i.name for i in inputs]} and outputs {[o.name for o in model.graph.output]}")
    inp, out = inputs[0], model.graph.output[0]
    for vi in (inp, out):
        if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise ImportRefused(f"{vi.name!r} must be float32 (ONNX elem_type {vi.type.tensor_type.elem_type})")
    in_dims, out_dims = _dims(inp), _dims(out)
    if len(in_dims) != 2:
        raise ImportRefused(f"input {inp.name!r} must be [batch, context], has {in_dims}")
    want_rank = 3 if quantiles else 2
    if len(out_dims) != want_rank:
        shape = "[batch, horizon, quantiles]" if quantiles else "[batch, horizon]"
        raise ImportRefused(f"output {out.name!r} must be {shape}"
                            f" ({'--quantiles given' if quantiles else 'no --quantiles: a point forecast'}), has "
                            f"{out_dims}")
    context = _resolve("context", context, in_dims[1])
    horizon = _resolve("horizon", horizon, out_dims[1])
    if quantiles and isinstance(out_dims[2], int) and out_dims[2] != len(quantiles):
        raise ImportRefused(f"the output has {out_dims[2]} quantiles, --quantiles lists {len(quantiles)}")
    batch_pinned = in_dims[0] == 1
    return {"input": inp.name, "output": out.name, "context": context, "horizon": horizon,
            "batch_pinned": batch_pinned, "opset": max((o.version for o in model.opset_import if o.domain in ("",
                                                                                                             "ai.onnx")),
                                                       default=17)}


def _resolve(what: str, stated: int | None, dim) -> int:
    if isinstance(dim, int) and dim > 0:
        if stated is not None and stated != dim:
            raise ImportRefused(f"--{what} {stated} contradicts the graph ({what} axis is {dim})")
        return dim
    if stated is None:
        raise ImportRefused(f"the graph's {what} axis is dynamic ({dim!r}): pass --{what}")
    return int(stated)


def check_series(frequency: str, n: int, seed: int) -> np.ndarray:
    """A seeded series with a season and trend (shape only: the checks compare paths, not accuracy)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    m = max(SEASON[frequency], 2)
    return 10 + np.sin(2 * np.pi * t / m) + 0.01 * t + 0.1 * rng.standard_normal(n)


def prove(path: Path, pre: ForecastPreprocess, info: dict) -> tuple[list[ParityCheck], dict]:
    """Served path vs the graph by hand, and batch invariance; refuses on any miss."""
    try:
        session = ort_session(path, threads=1)
    except Exception as exc:  # a graph ONNX Runtime cannot load is a refusal
        raise ImportRefused(f"ONNX Runtime cannot load the graph ({type(exc).__name__}: {exc})") from exc
    # a stand-in for the manifest with what feeds() reads of it: the preprocessing record
    manifest = cast(Manifest, SimpleNamespace(preprocess=pre))
    checks, worst = [], 0.0
    t0 = np.datetime64("2026-01-01T00:00:00", "s")
    for k, frequency in enumerate(pre.frequencies):
        windows, items = [], []
        for j, level in enumerate(CHECK_SCALES):
            history = level * check_series(frequency, pre.context + 7, seed=31 * k + j)
            items.append(model_item(pre, history, frequency, t0))
            window = history[-pre.context:]
            loc, scale = ((0.0, 1.0) if pre.scaling == "none" else
                          (window.mean(), max(np.abs(window - window.mean()).mean(), 1e-300)))
            windows.append(((window - loc) / scale, loc, scale))
        feeds = runtime.feeds(manifest, [info["input"]], [it.x for it in items])
        if info["batch_pinned"]:
            batched = np.concatenate([session.run(None, {info["input"]: feeds[info["input"]][i: i + 1]})[0]
                                      for i in range(len(items))])
        else:
            batched = session.run(None, feeds)[0]
        for i, ((w, loc, scale), item) in enumerate(zip(windows, items)):
            alone = session.run(None, {info["input"]: w[None, :].astype(np.float32)})[0][0]
            if not np.isfinite(alone).all():
                raise ImportRefused(f"non-finite forecast at {frequency}, scale {CHECK_SCALES[i]:g}")
            invariance = float(np.abs(batched[i] - alone).max())
            _, served = quantile_forecast(batched[i], pre, item.loc, item.scale, pre.horizon)
            _, by_hand = quantile_forecast(alone, pre, loc, scale, pre.horizon)
            diff = float(np.abs(served - by_hand).max() / (scale if pre.scaling != "none" else
                                                          max(np.abs(by_hand).max(), 1.0)))
            worst = max(worst, invariance)
            ok = diff <= TOLERANCE and invariance <= TOLERANCE
            checks.append(ParityCheck(case=f"{frequency}/scale{CHECK_SCALES[i]:g}/batch{len(items)}",
                                      max_abs_diff=max(diff, invariance), tolerance=TOLERANCE, passed=ok))
            if not ok:
                raise ImportRefused(f"{frequency}, scale {CHECK_SCALES[i]:g}: served path differs from the graph by "
                                    f"{diff:.3g} (relative) or a row changes with its batch by {invariance:.3g}")
    return checks, {"max_batch_invariance_diff": worst}


def import_forecast_onnx(model: Path, name: str, version: str, work: Path, *, frequencies: list[str],
                         context: int | None = None, horizon: int | None = None, quantiles: list[float] | None = None,
                         scaling: str = "none", max_horizon: dict[str, int] | None = None,
                         license: str | None = None, require_license: bool = False) -> ImportResult:
    """`license`: SPDX expression of the weights (else the ONNX metadata's `license`, else NOASSERTION, or
    LicenseRequired with `require_license`: models/importing/licenses.py)."""
    quantiles = sorted(quantiles or [])
    unknown = sorted(set(frequencies) - set(FREQUENCIES))
    if not frequencies or unknown:
        raise ImportRefused(f"--frequencies must list some of {list(FREQUENCIES)} (unknown: {unknown})")
    info = inspect(model, context, horizon, quantiles)
    weights_license = resolve_license(license, onnx_license(Path(model)), Path(model).name, required=require_license)
    try:
        pre = ForecastPreprocess(contract="window", context=info["context"], horizon=info["horizon"],
                                 frequencies=list(frequencies),
                                 max_horizon={f: (max_horizon or {}).get(f, info["horizon"]) for f in frequencies},
                                 quantiles=quantiles, scaling=scaling, min_history=info["context"],
                                 season={f: SEASON[f] for f in frequencies})
    except ValueError as exc:
        raise ImportRefused(f"the declared contract is invalid: {exc}") from exc
    staging = Path(work) / name
    staging.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model, staging / MODEL_FILE)
    checks, report = prove(staging / MODEL_FILE, pre, info)
    out_shape: list[int | str] = ["batch", pre.horizon, *([len(quantiles)] if quantiles else [])]
    manifest = Manifest(
        name=name, version=version, task="forecast", variant="primary", model_file=MODEL_FILE, files=[],
        opset=info["opset"], preprocess=pre,
        inputs=[TensorSpec(name=info["input"], dtype="float32", shape=[1 if info["batch_pinned"] else "batch",
                                                                      pre.context])],
        outputs=[TensorSpec(name=info["output"], dtype="float32", shape=out_shape)],
        source=Source(kind="user", description=f"user ONNX forecaster {Path(model).name} (window contract, "
                      f"scaling {scaling})", packages=package_versions("onnx", "onnxruntime"), license=weights_license,
                      recipe={"importer": "forecast-onnx", "frequencies": frequencies, "quantiles": quantiles,
                              "scaling": scaling, "code": source_digest([Path(__file__)])}),
        data_fingerprint=data_fingerprint(Path(model)), metrics={"parity_cases": float(len(checks)), **report},
        parity=checks, gates={"parity": True, "batch_invariance": True},
        recipe_hash=sha256_file(staging / MODEL_FILE), created_at=utcnow(), git_commit=git_commit())
    return ImportResult(primary=Artifact(staging, manifest), fallback=None,
                        report={"contract": pre.model_dump(), "graph": info, **report})


def publish_forecast_onnx(model: Path, name: str, version: str, registry, *, alias: str | None = None, **kw):
    """import_forecast_onnx + publish; (published manifests, report). Nothing is published on refusal."""
    return import_and_publish(registry, name, version, alias, "forecast-onnx",
                              lambda work: import_forecast_onnx(model, name, version, work, **kw))


def _floats(text: str | None) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()] if text else []


def _max_horizon(text: str | None) -> dict[str, int]:
    return {k.strip(): int(v) for k, v in (p.split("=", 1) for p in text.split(",") if p.strip())} if text else {}


def add_parser(subparsers) -> None:
    """Register `forecast-onnx` on the `triserve import` parser (triserve/importers.py)."""
    p = subparsers.add_parser("forecast-onnx", help="import a user's ONNX forecaster (window in, forecast out)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="the .onnx graph")
    p.add_argument("--frequencies", required=True, help=f"comma list of the frequencies it serves: {FREQUENCIES}")
    p.add_argument("--context", type=int, default=None, help="input window length (default: from the graph)")
    p.add_argument("--horizon", type=int, default=None, help="output steps (default: from the graph)")
    p.add_argument("--quantiles", default=None, help="comma list of the output's quantile levels (must include 0.5); "
                                                     "omit for a point forecast [batch, horizon]")
    p.add_argument("--scaling", choices=("none", "mean_abs"), default="none",
                   help="what the graph expects: raw values (none) or (x - mean) / mean abs deviation (mean_abs)")
    p.add_argument("--max-horizon", default=None, help="per-frequency caps, e.g. h=48,D=14 (default: --horizon)")
    p.add_argument("--name", required=True, help="registry model name")
    p.add_argument("--version", required=True, help="immutable version, e.g. 1.0.0")
    add_registry_option(p)
    p.add_argument("--alias", default=None, help="also point this alias (e.g. canary, stable) at the new version")
    add_license_option(p)
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    from triserve.models.registry import LocalRegistry

    return run_cli(lambda: publish_forecast_onnx(
        args.model, args.name, args.version, LocalRegistry(args.registry), alias=args.alias,
        frequencies=[f.strip() for f in args.frequencies.split(",") if f.strip()], context=args.context,
        horizon=args.horizon, quantiles=_floats(args.quantiles), scaling=args.scaling,
        max_horizon=_max_horizon(args.max_horizon), license=args.license, require_license=True))
