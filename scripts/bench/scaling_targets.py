"""The autoscaling targets and the saturation alert's thresholds, derived from the latency knee, and written where the
autoscalers read them (`python -m scripts.bench.knee --write-config`; or `python -m scripts.bench.scaling_targets`
alone, from docs/bench/knee.json).

Little's law: the items an instance holds (triserve_deployment_pending_items, what the HPA/KEDA scale on) = arrival
rate x time an item spends inside the gauge. Per deployment (the default of each measured family), from one knee
measurement of one instance (docs/operations.md, "Autoscaling"):

    K  knee (req/s, median of the ramps)       C = floor(0.8 K), the 429 capacity limit (access.deployment_rate_per_s)
    r  operating rate = 0.8 C (~0.64 K: 25% headroom to C while new pods pull and warm their models)
    p50(x)  end-to-end p50 at rate x, linear between the measured steps (mean over the ramps)
    o  the part of a request outside the gauge (HTTP in/out, preprocess, postprocess: client p50 - queue - infer at
       c=1, docs/bench/compare_text.md and compare_detect.md; 0 where unmeasured, an upper bound on the target)

    HPA/KEDA/Yatai target   = r x (p50(r) - o)               (items per pod)
    at capacity             = C x (p50(C) - o)               (the most a pod holds under the 429 limit)
    alert threshold         = median over ramps of K x (p50(K) - o)
    BentoCloud concurrency  = ceil(API workers x min over deployments of r x p50(r))   (whole requests, o = 0)

Not the knee itself as the target: under the limit C a pod never holds more than `at capacity`, so a target at the
knee's L could never be reached (the failure of the former target). The HPA needs the metric 10% above target to act;
tests/services/test_scaling_signal.py checks target x 1.1 < at capacity < alert threshold and that every file below
holds these numbers.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
KNEE_JSON = ROOT / "docs" / "bench" / "knee.json"
MODELS = ROOT / "configs" / "models.yaml"

# Part of a request's end-to-end time outside the gauge (ms): client p50 - queue - infer at c=1, triserve remote,
# fresh server. Text: docs/bench/compare_text.md (5.706 - 1.534 - 2.933); detection: docs/bench/compare_detect.md
# (15.195 - 2.006 - 8.912); forecast: no stage split measured, 0 (an upper bound on the target).
OUTSIDE_MS = {"text": 5.706 - 1.534 - 2.933, "detection": 15.195 - 2.006 - 8.912, "forecast": 0.0}
OPERATING_SHARE = 0.8  # of the capacity C: pods run at 0.8 C = 0.64 K

HPA_FILES = ("configs/deploy/k8s/hpa.yaml", "configs/deploy/k8s/split/hpa.yaml",
             "configs/deploy/yatai/bentodeployment.yaml")
KEDA_FILES = ("configs/deploy/k8s/components/keda/scaledobject.yaml",
              "configs/deploy/k8s/components/keda-split/scaledobjects.yaml")
ALERTS = "configs/prometheus/alerts.yml"
DASHBOARD = "configs/grafana/triserve-dashboard.json"
BENTOCLOUD = "configs/deploy/bentocloud.yaml"
OPERATIONS = "docs/operations.md"
TABLE_HEADER = "| deployment | K req/s | C req/s | r req/s | p50(r) ms | o ms |"


@dataclass(frozen=True)
class Targets:
    """One deployment's numbers (items per instance unless said otherwise)."""

    deployment: str
    family: str
    knee_rps: float
    capacity_rps: int
    rate_rps: float  # the operating rate r
    p50_ms: float  # p50(r)
    outside_ms: float
    target: float  # r x (p50(r) - o): the autoscalers' target per pod
    target_e2e: float  # r x p50(r): the same in whole requests (BentoCloud's in-flight count)
    at_capacity: float  # C x (p50(C) - o)
    knee_items: float  # median over the ramps of K x (p50(K) - o): the alert's threshold
    knee_terms: tuple[tuple[float, float], ...]  # (K, p50(K)) per ramp, for the record


def p50_at(steps: list[dict], rate: float) -> float:
    """End-to-end p50 (ms) at `rate`, linear between the measured steps around it. Below the first step: the first
    step's p50 (latency only grows with the rate, so this errs towards a larger target); above the last: an error."""
    by_rate: dict[float, float] = {}
    for s in sorted(steps, key=lambda s: bool(s.get("held", True))):  # a rate measured twice: the held step wins
        if s.get("latency_ms", {}).get("p50") is not None:
            by_rate[s["rate"]] = s["latency_ms"]["p50"]
    pts = sorted(by_rate.items())
    if not pts:
        raise ValueError("no measured step")
    if rate <= pts[0][0]:
        return pts[0][1]
    for (r0, p0), (r1, p1) in zip(pts, pts[1:]):
        if r0 <= rate <= r1:
            return p0 + (rate - r0) / (r1 - r0) * (p1 - p0)
    raise ValueError(f"{rate}/s is above the measured steps {pts[0][0]}-{pts[-1][0]}")


def derive_one(deployment: str, family: str, task: dict, outside_ms: float) -> Targets:
    """One family's knee record (docs/bench/knee.json `tasks.<family>`) -> its default deployment's targets."""
    capacity = int(task["limit_rps"])
    if capacity <= 0:
        raise ValueError(f"{family}: no knee measured (limit {capacity})")
    rate = OPERATING_SHARE * capacity
    rounds = task["rounds"]
    p50 = statistics.mean(p50_at(r["steps"], rate) for r in rounds)
    p50_c = statistics.mean(p50_at(r["steps"], capacity) for r in rounds)
    terms = []
    for knee_rps, rnd in zip(task["knees"], rounds):
        step = next((s for s in rnd["steps"] if s["rate"] == knee_rps and s.get("held", True)), None)
        if knee_rps and step is not None:
            terms.append((float(knee_rps), float(step["latency_ms"]["p50"])))
    if not terms:
        raise ValueError(f"{family}: no ramp held a step")
    return Targets(deployment=deployment, family=family, knee_rps=float(task["knee_rps"]), capacity_rps=capacity,
                   rate_rps=rate, p50_ms=p50, outside_ms=outside_ms, target=rate * (p50 - outside_ms) / 1000,
                   target_e2e=rate * p50 / 1000, at_capacity=capacity * (p50_c - outside_ms) / 1000,
                   knee_items=statistics.median(k * (p - outside_ms) / 1000 for k, p in terms),
                   knee_terms=tuple(terms))


def derive(knee: Mapping, defaults: Mapping[str, str], outside_ms: Mapping[str, float] = OUTSIDE_MS
           ) -> dict[str, Targets]:
    """Every measured family of a knee result (knee.json's content) -> its default deployment's Targets."""
    return {defaults[family]: derive_one(defaults[family], family, task, outside_ms.get(family, 0.0))
            for family, task in knee["tasks"].items() if family in defaults and task.get("limit_rps")}


def two_digits(x: float) -> float:
    """Two significant digits: the precision a target carries (the HPA tolerance alone is 10%)."""
    return float(f"{x:.2g}")


def quantity(x: float) -> str:
    """A Kubernetes quantity in milli-units: 0.646 -> 650m, 3.09 -> 3100m."""
    return f"{round(two_digits(x) * 1000)}m"


def plain(x: float) -> str:
    """0.646 -> 0.65, 3.09 -> 3.1, 12.3 -> 12, 2.0 -> 2.0 (PromQL and KEDA thresholds)."""
    v = two_digits(x)
    return str(int(v)) if v >= 10 else repr(v)


# ---------------------------------------------------------------------------------------------------- writing

def _sub(text: str, pattern: str, value: str, what: str, path: str, count: int) -> str:
    new, n = re.subn(pattern, lambda m: str(m.group(1)) + value, text)
    if n != count:
        raise ValueError(f"{path}: {what}: expected {count} place(s), found {n}")
    return new


def _count(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text))


def write_hpa(text: str, path: str, targets: Mapping[str, Targets], others: float) -> str:
    """Pods/External metrics of an HPA or Yatai spec: `deployment: NAME` selector -> its averageValue; the NotIn
    metric (every deployment not listed) -> the smallest target."""
    for dep, t in targets.items():
        pattern = rf"(deployment: {re.escape(dep)}\n(?:[^\n]*\n){{0,3}}?\s*averageValue: )\S+"
        text = _sub(text, pattern, quantity(t.target), dep, path, max(1, _count(text, rf"deployment: {dep}\n")))
    pattern = r"(operator: NotIn\n(?:[^\n]*\n){0,4}?\s*averageValue: )\S+"
    n = _count(text, r"operator: NotIn\n")
    return _sub(text, pattern, quantity(others), "others", path, n) if n else text


def write_keda(text: str, path: str, targets: Mapping[str, Targets], others: float) -> str:
    """KEDA prometheus triggers named after the deployment -> threshold; the `others` trigger -> the smallest."""
    for name, value in [*((d, t.target) for d, t in targets.items()), ("others", others)]:
        pattern = rf"(- type: prometheus\n\s*name: {re.escape(name)}\n(?:[^\n]*\n){{0,4}}?\s*threshold: )\"[^\"]*\""
        text = _sub(text, pattern, f'"{plain(value)}"', name, path, _count(text, rf"name: {name}\n"))
    return text


def _label_constants(text: str, values: Mapping[str, float], path: str, quote: str = '"') -> str:
    for dep, v in values.items():
        pattern = rf"(label_replace\(vector\()[0-9.]+(?=\), {quote}deployment{quote}, {quote}{re.escape(dep)}{quote})"
        new, n = re.subn(pattern, rf"\g<1>{plain(v)}", text)
        if n == 0:
            raise ValueError(f"{path}: no label_replace constant for {dep}")
        text = new
    return text


def write_alerts(text: str, targets: Mapping[str, Targets]) -> str:
    """TriserveQueueSaturated: the per-deployment constants it compares the gauge with (the only label_replace
    constants of alerts.yml)."""
    return _label_constants(text, {d: t.knee_items for d, t in targets.items()}, ALERTS)


def write_dashboard(text: str, targets: Mapping[str, Targets]) -> str:
    """The "work pending" panel: query C draws the targets, query D the alert's thresholds."""
    board = json.loads(text)
    panels = [p for p in board["panels"] if "triserve_deployment_pending_items" in json.dumps(p.get("targets", []))]
    if len(panels) != 1:
        raise ValueError(f"{DASHBOARD}: expected one pending-items panel, found {len(panels)}")
    for t in panels[0]["targets"]:
        if t["refId"] == "C":
            t["expr"] = _label_constants(t["expr"], {d: v.target for d, v in targets.items()}, DASHBOARD)
        elif t["refId"] == "D":
            t["expr"] = _label_constants(t["expr"], {d: v.knee_items for d, v in targets.items()}, DASHBOARD)
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def write_bentocloud(text: str, targets: Mapping[str, Targets]) -> str:
    """The gateway's traffic.concurrency: requests in flight per replica = its API workers x the smallest target in
    whole requests (scale early; a mix heavy in the cheapest deployment over-provisions)."""
    workers = int(yaml.safe_load(text)["services"]["triserve"]["config_overrides"]["workers"])
    want = math.ceil(workers * min(t.target_e2e for t in targets.values()))
    return _sub(text, r"(concurrency: )\d+(?=  # per replica; BentoCloud scales out above it)", str(want),
                "gateway concurrency", BENTOCLOUD, 1)


def table(targets: Mapping[str, Targets]) -> str:
    """docs/operations.md's derivation table (replaced in place by write_targets)."""
    lines = [f"{TABLE_HEADER} **HPA target** r x (p50(r) - o) | at C | **alert**: at the knee, median of the ramps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for dep, t in targets.items():
        terms = ", ".join(f"{k:g}/s x {p - t.outside_ms:.1f} ms" for k, p in t.knee_terms)
        lines.append(f"| `{dep}` ({t.family}) | {t.knee_rps:g} | {t.capacity_rps} | {t.rate_rps:.1f} | "
                     f"{t.p50_ms:.2f} | {t.outside_ms:.2f} | **{plain(t.target)}** ({quantity(t.target)}) | "
                     f"{t.at_capacity:.2f} | **{plain(t.knee_items)}** ({terms}) |")
    return "\n".join(lines)


def write_table(text: str, targets: Mapping[str, Targets]) -> str:
    lines = text.split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.startswith(TABLE_HEADER)), None)
    if start is None:
        raise ValueError(f"{OPERATIONS}: no derivation table (a line starting {TABLE_HEADER!r})")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join([*lines[:start], table(targets), *lines[end:]])


def write_targets(targets: Mapping[str, Targets], root: Path = ROOT, render: bool = True) -> list[Path]:
    """Write the targets into every file that holds them (only the numbers change), then regenerate the files
    generated from alerts.yml and the dashboard (tests/configs/render_k8s.py). Returns the files written."""
    if not targets:
        raise ValueError("no targets")
    others = min(t.target for t in targets.values())  # deployments nobody measured: the smallest measured target
    edits: dict[str, Callable[[str], str]] = {
        **{f: partial(write_hpa, path=f, targets=targets, others=others) for f in HPA_FILES},
        **{f: partial(write_keda, path=f, targets=targets, others=others) for f in KEDA_FILES},
        ALERTS: partial(write_alerts, targets=targets), DASHBOARD: partial(write_dashboard, targets=targets),
        BENTOCLOUD: partial(write_bentocloud, targets=targets), OPERATIONS: partial(write_table, targets=targets)}
    new = {f: edit((root / f).read_text()) for f, edit in edits.items()}  # all or nothing: any error before writing
    written = []
    for f, text in new.items():
        if (root / f).read_text() != text:
            (root / f).write_text(text)
            written.append(root / f)
    if render:
        subprocess.run([sys.executable, "-m", "tests.configs.render_k8s"], cwd=root, check=True)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.scaling_targets", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--knee", type=Path, default=KNEE_JSON, help="a knee result (scripts/bench/knee.py's JSON)")
    ap.add_argument("--write", action="store_true", help="write them into the deploy configs, alerts and dashboard")
    args = ap.parse_args(argv)
    targets = derive(json.loads(args.knee.read_text()), yaml.safe_load(MODELS.read_text())["defaults"])
    print(json.dumps({d: asdict(t) for d, t in targets.items()}, indent=2))
    if args.write:
        for path in write_targets(targets):
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
