"""CUDA throughput per model at batch 1/8/32, FP32 and FP16, with and without IO binding: the short GPU check.

    python -m scripts.bench.gpu_check [--seconds 2] [--out docs/bench/gpu_check.json]

Prepared for a machine with an NVIDIA GPU and onnxruntime-gpu. For each model (the stable primaries and, when the
registry holds them, their -fp16 variants built by `python -m scripts.variants build`) it creates a session on
CUDAExecutionProvider, checks that CUDA really runs it (the session's providers), and reports items/s at each batch:
plain `run` (host inputs copied per call) and IO binding (inputs placed on the device once, outputs left there), the
gap being the host<->device copy cost that IO binding removes. Exits 2 without a CUDA provider, saying so.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

from scripts.bench.textmix import ROOT
from scripts.bench.tuning import MODELS, model_inputs


def throughput(sess, feeds: dict, batch: int, seconds: float, io_binding: bool) -> float:
    import onnxruntime as ort

    if io_binding:
        binding = sess.io_binding()
        for name, value in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
        for out in sess.get_outputs():
            binding.bind_output(out.name, "cuda")
        call = partial(sess.run_with_iobinding, binding)
    else:
        call = partial(sess.run, None, feeds)
    for _ in range(5):
        call()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        call()
        n += 1
    return round(n * batch / (time.perf_counter() - t0), 1)


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    ap = argparse.ArgumentParser(prog="python -m scripts.bench.gpu_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "gpu_check.json")
    args = ap.parse_args(argv)
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        print(f"no CUDAExecutionProvider (available: {ort.get_available_providers()}); install onnxruntime-gpu on a "
              "GPU machine", file=sys.stderr)
        return 2
    from triserve.models.registry import LocalRegistry

    reg = LocalRegistry(ROOT / "models" / "store")
    results: dict[str, float | dict[str, str]] = {}  # key -> items/s, or model -> why it was skipped
    for task, name in MODELS.items():
        for precision, model in (("fp32", name), ("fp16", f"{name}-fp16")):
            if model not in reg.models():
                results[f"{model}"] = {"skipped": "not in the registry"}
                continue
            d, m = reg.load_verified(model, "stable")
            sess = ort.InferenceSession(str(d / m.model_file), providers=["CUDAExecutionProvider"])
            if sess.get_providers()[0] != "CUDAExecutionProvider":
                results[model] = {"skipped": f"CUDA not used: {sess.get_providers()}"}
                continue
            for batch in (1, 8, 32):
                _, feeds = model_inputs(task, batch)
                for io in (False, True):
                    key = f"{model}/{precision}/b{batch}/{'iobinding' if io else 'run'}"
                    results[key] = throughput(sess, feeds, batch, args.seconds, io)
                    print(f"{key:<50} {results[key]:>10} items/s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": ort.get_device(), "onnxruntime": ort.__version__,
                                    "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
