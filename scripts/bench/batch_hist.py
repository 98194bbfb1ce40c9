"""Batch-size histograms of a triserve instance around a benchmark cell, from its own /metrics.

Why: throughput ratios say whether batching paid; the batch sizes the runner actually ran say why. Each cell takes a
/metrics snapshot before and after; the delta of `triserve_runner_batch_size` (items per ONNX Runtime call) and
`triserve_gateway_batch_requests` (requests coalesced per runner call) for one slot is what that cell produced.
Shared by scripts/bench/compare.py (slot text) and compare_detect.py (slot detection).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from scripts.bench.report import pyplot

BATCH_METRICS = ("triserve_runner_batch_size", "triserve_gateway_batch_requests")
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_histogram(text: str, metric: str, slot: str) -> dict:
    """Cumulative buckets {upper bound: count}, count and sum of a Prometheus histogram for label slot=<slot>,
    summed over its other labels (e.g. model)."""
    buckets: dict[float, float] = {}
    count = total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or not m.group(1).startswith(metric):
            continue
        name, labels, value = m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))
        if labels.get("slot") != slot:
            continue
        if name == metric + "_bucket":
            le = math.inf if labels["le"] in ("+Inf", "inf") else float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + value
        elif name == metric + "_count":
            count += value
        elif name == metric + "_sum":
            total += value
    return {"buckets": buckets, "count": count, "sum": total}


def histogram_delta(after: dict, before: dict | None) -> dict:
    """Observations between two parse_histogram snapshots, as non-cumulative counts per bucket label
    ("1", "2", "3-4", "5-8", ..., ">128"), plus count, sum and mean."""
    before = before or {"buckets": {}, "count": 0.0, "sum": 0.0}
    cum = {le: after["buckets"][le] - before["buckets"].get(le, 0.0) for le in sorted(after["buckets"])}
    per, prev_le, prev_cum = {}, 0.0, 0.0
    for le, c in cum.items():
        lo = int(prev_le) + 1
        label = f">{int(prev_le)}" if le == math.inf else (str(int(le)) if lo >= le else f"{lo}-{int(le)}")
        per[label] = round(c - prev_cum)
        prev_le, prev_cum = le, c
    count = after["count"] - before["count"]
    total = after["sum"] - before["sum"]
    return {"buckets": per, "count": round(count), "sum": round(total, 3),
            "mean": round(total / count, 3) if count else None}


def bucket_low(label: str) -> int:
    """Smallest batch size a histogram_delta bucket label covers: "1" -> 1, "3-4" -> 3, ">128" -> 129."""
    return int(label[1:]) + 1 if label.startswith(">") else int(label.split("-")[0])


def add_histograms(a: dict | None, b: dict) -> dict:
    if not a:
        return json.loads(json.dumps(b))
    buckets = dict(a["buckets"])
    for k, v in b["buckets"].items():
        buckets[k] = buckets.get(k, 0) + v
    count, total = a["count"] + b["count"], round(a["sum"] + b["sum"], 3)
    return {"buckets": buckets, "count": count, "sum": total, "mean": round(total / count, 3) if count else None}


def metrics_snapshot(url: str, slot: str) -> dict:
    """Both batch histograms of one slot from <url>/metrics; {"error": ...} when it cannot be read (never fatal)."""
    import httpx

    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    except Exception as exc:  # noqa: BLE001  # a missing snapshot is reported, never fatal
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {m: parse_histogram(text, m, slot) for m in BATCH_METRICS}


def snapshot_delta(after: dict, before: dict) -> dict:
    if "error" in after or "error" in before:
        return {"error": after.get("error") or before.get("error")}
    return {m: histogram_delta(after[m], before[m]) for m in BATCH_METRICS}


def around(url: str | None, slot: str, run: Callable[[], dict]) -> tuple[dict, dict | None]:
    """Runs one benchmark cell; with a server url, also the batch histograms' delta over it (else None)."""
    if not url:
        return run(), None
    before = metrics_snapshot(url, slot)
    cell = run()
    return cell, snapshot_delta(metrics_snapshot(url, slot), before)


def describe(delta: dict | None) -> str:
    """A progress-line suffix: the runner's mean batch over the cell."""
    if not delta:
        return ""
    rb = delta.get("triserve_runner_batch_size") or {}
    return f", runner batch mean {rb.get('mean')} over {rb.get('count')} calls"


def over_rounds(rounds: list[dict]) -> dict:
    """system -> concurrency -> metric -> histogram, summed over rounds (each round: rec["batch_histograms"])."""
    out: dict = {}
    for r in rounds:
        for system, per_c in (r.get("batch_histograms") or {}).items():
            for c, delta in per_c.items():
                if "error" in delta:
                    continue
                cell = out.setdefault(system, {}).setdefault(c, {})
                for m, h in delta.items():
                    cell[m] = add_histograms(cell.get(m), h)
    return out


def used_labels(hist: dict) -> list[str]:
    """Bucket labels any histogram in `hist` (over_rounds' shape) has observations in, smallest batch first."""
    return sorted({k for per_c in hist.values() for per_m in per_c.values() for h in per_m.values()
                   for k, v in h["buckets"].items() if v}, key=bucket_low)


def markdown(hist: dict, slot: str) -> list[str]:
    """A table: per system, concurrency and metric, the share of calls in each batch-size bucket."""
    if not hist:
        return []
    labels = used_labels(hist)
    L = ["", (f"Batch sizes per cell (deltas of /metrics around each cell, its warm-up included, summed over rounds; "
              f"slot `{slot}`):"), "",
         "| system | c | metric | calls | mean | " + " | ".join(labels) + " |",
         "|---|---|---|---|---|" + "---|" * len(labels)]
    for name, per_c in hist.items():
        for c, per_m in per_c.items():
            for m, h in per_m.items():
                n = h["count"] or 1
                cells = [f"{h['buckets'].get(k, 0) / n:.0%}" if h["buckets"].get(k) else "" for k in labels]
                L.append(f"| {name} | {c} | {m} | {h['count']} | {h['mean']} | " + " | ".join(cells) + " |")
    return L


def plot(hist: dict, path: Path, title: str, command: str, metric: str = "triserve_runner_batch_size") -> str | None:
    """Bars: share of runner calls per batch-size bucket, one panel per concurrency, one colour per system.
    Returns the file written, or None without matplotlib or data."""
    plt = pyplot()
    if plt is None:
        return None
    cs = sorted({c for per_c in hist.values() for c in per_c}, key=int)
    labels = used_labels({s: {c: {metric: m[metric]} for c, m in per_c.items() if metric in m}
                          for s, per_c in hist.items()})
    if not cs or not labels:
        return None
    fig, axes = plt.subplots(1, len(cs), figsize=(5.5 * len(cs), 4.2))
    axes = np.atleast_1d(axes)
    systems = list(hist)
    w = 0.8 / max(1, len(systems))
    x = np.arange(len(labels))
    for ax, c in zip(axes, cs):
        for i, s in enumerate(systems):
            h = (hist[s].get(c) or {}).get(metric)
            if h and h["count"]:
                ax.bar(x + i * w, [h["buckets"].get(k, 0) / h["count"] for k in labels], w,
                       label=f"{s} (mean {h['mean']})")
        ax.set_xticks(x + w * (len(systems) - 1) / 2, labels, fontsize=8)
        ax.set_xlabel("items per runner call" if metric == "triserve_runner_batch_size" else metric)
        ax.set_ylabel("share of calls")
        ax.set_title(f"{title}, c={c}")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    fig.text(0.01, 0.01, command, fontsize=6)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
