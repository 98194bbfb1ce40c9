"""How the runner splits a ragged text batch, measured in process: cost-based groups vs a fixed length ratio.

    taskset -c 0 python -m scripts.bench.length_groups     # ~2 min; docs/bench/length_groups.{json,md}

Same ONNX file (minilm-intent:stable), one core, ONNX Runtime intra-op 1, batches of --batch-sizes texts drawn from
the benchmark's text mix. Strategies, interleaved over --reps repetitions (medians [min-max] of texts/s):
  ratio_1.5     the former rule: a new group whenever a text is longer than 1.5x the group's shortest
  cost_<c>      triserve.runners.ragged.length_buckets(call_cost_tokens=c): the cheapest split when a call costs c
  padded tokens
  one_call      the whole batch padded to its longest text
The serving default is runner.bucket_call_cost_tokens (configs/settings.py).
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from scripts.bench.report import write_report
from scripts.bench.textmix import ROOT, model_dir
from scripts.bench.textmix import texts as mix_texts


def ratio_groups(seqs: list[np.ndarray], max_ratio: float = 1.5) -> list[list[int]]:
    """The baseline: the runner's split before the cost model (kept here only to measure against)."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    groups: list[list[int]] = []
    for i in order:
        if groups and len(seqs[i]) <= max_ratio * len(seqs[groups[-1][0]]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    from triserve.families.text.preprocess import TextTokenizer
    from triserve.kernel.ragged import pad_sequences
    from triserve.runners.ragged import length_buckets

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-sizes", default="8,16,32")
    ap.add_argument("--costs", default="6,12,24", help="call_cost_tokens values measured")
    ap.add_argument("--batches", type=int, default=40, help="batches per strategy and repetition")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "length_groups")
    args = ap.parse_args(argv)

    d, manifest = model_dir()
    pre = manifest["preprocess"]
    tok = TextTokenizer(d / pre["tokenizer_file"], pre["max_length"])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(d / manifest["model_file"]), opts, providers=["CPUExecutionProvider"])
    texts, source = mix_texts(512)
    enc = tok.encode(texts)

    def run(group: list[np.ndarray]) -> None:
        ids, mask = pad_sequences(group, tok.pad_token_id)
        sess.run(None, {"input_ids": ids, "attention_mask": mask})

    strategies: dict[str, Callable[[list[np.ndarray]], list[list[int]]]] = {
        "ratio_1.5": ratio_groups, "one_call": lambda b: [list(range(len(b)))]}
    for c in (float(x) for x in args.costs.split(",")):
        strategies[f"cost_{c:g}"] = partial(length_buckets, call_cost_tokens=c)
    for _ in range(3):
        run(enc[:16])
    rng = random.Random(0)
    results: dict = {}
    for bs in (int(x) for x in args.batch_sizes.split(",")):
        batches = [[enc[rng.randrange(len(enc))] for _ in range(bs)] for _ in range(args.batches)]
        speeds: dict[str, list[float]] = {k: [] for k in strategies}
        calls: dict[str, float] = {}
        for _ in range(args.reps):
            for name, split in strategies.items():
                n_calls, t0 = 0, time.perf_counter()
                for b in batches:
                    for g in split(b):
                        run([b[i] for i in g])
                        n_calls += 1
                speeds[name].append(len(batches) * bs / (time.perf_counter() - t0))
                calls[name] = n_calls / len(batches)
        base = statistics.median(speeds["ratio_1.5"])
        results[str(bs)] = {k: {"texts_per_s": round(statistics.median(v), 1), "min": round(min(v), 1),
                                "max": round(max(v), 1), "calls_per_batch": round(calls[k], 2),
                                "vs_ratio_1.5": round(statistics.median(v) / base, 3)} for k, v in speeds.items()}
        print(f"[length_groups] batch {bs}: " + ", ".join(f"{k} {v['texts_per_s']}" for k, v in
                                                          results[str(bs)].items()))
    res = {"command": "taskset -c 0 python -m scripts.bench.length_groups" + (" " + " ".join(argv) if argv else ""),
           "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "model": manifest["version"],
           "texts": source, "reps": args.reps, "batches": args.batches, "results": results}
    L = ["# Length groups for ragged text batches (in process, one core)", "", f"Reproduce: `{res['command']}`", "",
         f"minilm-intent {res['model']}, ONNX Runtime intra-op 1, {args.batches} random batches per size from the "
         f"text mix ({source}); medians [min-max] over {args.reps} interleaved repetitions.", "",
         "| batch | strategy | texts/s | vs ratio 1.5 | calls per batch |", "|---|---|---|---|---|"]
    for bs, per in results.items():
        L += [f"| {bs} | {k} | {v['texts_per_s']:.0f} [{v['min']:.0f}-{v['max']:.0f}] | {v['vs_ratio_1.5']:.2f}x | "
              f"{v['calls_per_batch']} |" for k, v in per.items()]
    write_report(args.out, res, "\n".join(L) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
