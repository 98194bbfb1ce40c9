"""The scaling signal (issue 19): triserve_deployment_pending_items / _requests, the work a deployment holds in an
instance from admission to the runner's answer.

* Through a real `bentoml serve` (2 API workers, the text primary slowed to 300 ms per batch by the runner's fault
  injection): while a burst waits in the batchers the gauge crosses the autoscaler's target and the alert's knee
  threshold, where the former signal (runner calls in flight) stays at one per API worker; afterwards it returns to 0.
* Offline: the targets in the Kubernetes HPA, Yatai, BentoCloud, the alert rule and the dashboard are the ones the
  README's derivation gives from docs/bench/knee.json (Little's law), and the HPA can act before the 429 capacity
  limit does.
"""
from __future__ import annotations

import json
import math
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from scripts.bench import scaling_targets
from tests.conftest import NO_CAPACITY_LIMITS, Server

ROOT = Path(__file__).resolve().parents[2]
KNEE = ROOT / "docs" / "bench" / "knee.json"
HPA = ROOT / "configs" / "deploy" / "k8s" / "hpa.yaml"
YATAI = ROOT / "configs" / "deploy" / "yatai" / "bentodeployment.yaml"
BENTOCLOUD = ROOT / "configs" / "deploy" / "bentocloud.yaml"
ALERTS = ROOT / "configs" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "configs" / "grafana" / "triserve-dashboard.json"
SERVING = ROOT / "configs" / "serving.yaml"
MODELS = ROOT / "configs" / "models.yaml"

ITEMS, REQUESTS, CALLS = ("triserve_deployment_pending_items", "triserve_deployment_pending_requests",
                          "triserve_runner_queue_depth")

HPA_TOLERANCE = 0.1  # Kubernetes' default: no scaling while |metric / target - 1| <= 0.1


# ----------------------------------------------------------------------------------------------------- derivation
def derive() -> dict[str, dict]:
    """Per deployment (the default of each measured family): the autoscaler's target per instance and the alert's
    knee threshold, in items, from the knee measurement (scripts/bench/scaling_targets.py, the code that
    `knee --write-config` writes them with; docs/operations.md's "Autoscaling" paragraph, step by step)."""
    defaults = yaml.safe_load(MODELS.read_text())["defaults"]
    return {dep: {"family": t.family, "capacity": t.capacity_rps, "target": t.target, "target_e2e": t.target_e2e,
                  "at_capacity": t.at_capacity, "knee": t.knee_items}
            for dep, t in scaling_targets.derive(json.loads(KNEE.read_text()), defaults).items()}


def _quantity(value) -> float:
    s = str(value)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def _by_deployment(metrics: list[dict], kind: str) -> dict[str, float]:
    out = {}
    for m in metrics:
        if m["type"] == kind:
            spec = m[kind.lower()]
            assert spec["metric"]["name"] == ITEMS
            out[spec["metric"]["selector"]["matchLabels"]["deployment"]] = _quantity(spec["target"]["averageValue"])
    return out


def _label_replace_constants(expr: str) -> dict[str, float]:
    return {dep: float(v) for v, dep in re.findall(r'label_replace\(vector\(([0-9.]+)\), "deployment", "([a-z0-9-]+)"',
                                                   expr)}


def test_targets_are_derived_from_the_knee():
    derived = derive()
    assert set(derived) == {"intent", "coco", "series"}
    # printed for the record (pytest -s)
    for dep, d in derived.items():
        print(f"{dep}: target {d['target']:.3f}  at capacity {d['at_capacity']:.3f}  knee {d['knee']:.3f}")

    hpa = yaml.safe_load(HPA.read_text())
    targets = _by_deployment(hpa["spec"]["metrics"], "Pods")
    assert set(targets) == set(derived)
    for dep, d in derived.items():
        assert targets[dep] == pytest.approx(d["target"], rel=0.02), dep  # 2 significant digits

    yatai = yaml.safe_load(YATAI.read_text())["spec"]
    assert _by_deployment(yatai["autoscaling"]["metrics"], "Pods") == targets
    for runner in yatai["runners"]:
        assert _by_deployment(runner["autoscaling"]["metrics"], "External") == targets

    (rule,) = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]
               if r["alert"] == "TriserveQueueSaturated"]
    assert ITEMS in rule["expr"]
    thresholds = _label_replace_constants(rule["expr"])
    assert set(thresholds) == set(derived)
    for dep, d in derived.items():
        assert thresholds[dep] == pytest.approx(d["knee"], rel=0.02), dep

    panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if ITEMS in json.dumps(p.get("targets", [])))
    exprs = {t["refId"]: t["expr"] for t in panel["targets"]}
    assert _label_replace_constants(exprs["C"]) == pytest.approx(targets, rel=0.02)
    assert _label_replace_constants(exprs["D"]) == thresholds

    # BentoCloud scales on its own in-flight count per replica (whole requests: o = 0), 2 API workers per replica,
    # from the lowest deployment (scale early)
    cloud = yaml.safe_load(BENTOCLOUD.read_text())["services"]
    gateway = cloud["triserve"]["config_overrides"]
    want = math.ceil(gateway["workers"] * min(d["target_e2e"] for d in derived.values()))
    assert gateway["traffic"]["concurrency"] == want


def test_the_autoscaler_acts_before_the_capacity_limit():
    """The failure of the former target, generalised: with a 429 limit at C an instance never holds more than L(C),
    so a target must sit far enough under it for the HPA to add pods (more than its 10% tolerance) before clients
    get 429; and the alert's knee threshold must lie above the target (else it fires at the operating point)."""
    limits = yaml.safe_load(SERVING.read_text())["access"]["deployment_rate_per_s"]
    derived = derive()
    assert limits, "no measured capacity in configs/serving.yaml"
    for dep, rate in limits.items():
        assert rate == derived[dep]["capacity"], f"{dep}: serving.yaml's capacity is not the knee's 80%"
    targets = _by_deployment(yaml.safe_load(HPA.read_text())["spec"]["metrics"], "Pods")
    for dep, d in derived.items():
        assert d["at_capacity"] > (1 + HPA_TOLERANCE) * targets[dep], (dep, d["at_capacity"], targets[dep])
        assert d["knee"] > d["at_capacity"] > targets[dep]


# ----------------------------------------------------------------------------------------------------- live
SLOW_MS = 300
WORKERS = 2
BURST = 16


@pytest.fixture(scope="module")
def slow_text(tiny_registry, tmp_path_factory):
    env = {**NO_CAPACITY_LIMITS, "TRISERVE_RUNNER__FAULTS__LATENCY_MS": json.dumps({"text": SLOW_MS}),
           "TRISERVE_GATEWAY__WORKERS": str(WORKERS)}
    with Server(tiny_registry.root, env=env, log_path=tmp_path_factory.mktemp("logs") / "slow_text.log") as srv:
        srv.wait_ready()
        yield srv


def _scrape(srv) -> dict[tuple[str, str], float]:
    """(metric, deployment or slot) -> value, for the three gauges."""
    text = httpx.get(f"{srv.url}/metrics", timeout=10).text
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name in (ITEMS, REQUESTS, CALLS):
            for s in family.samples:
                out[(family.name, s.labels.get("deployment") or s.labels.get("slot"))] = s.value
    return out


def _classify(srv, n_texts: int, i: int) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/classify", json={"texts": [f"burst {i} text {k}" for k in range(n_texts)]},
                      headers={"X-Request-Timeout-Ms": "30000"}, timeout=60)


def test_pending_work_crosses_the_targets_while_requests_wait_then_returns_to_zero(slow_text):
    derived = derive()
    target = _by_deployment(yaml.safe_load(HPA.read_text())["spec"]["metrics"], "Pods")["intent"]
    knee = _label_replace_constants(next(r["expr"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
                                         for r in g["rules"] if r["alert"] == "TriserveQueueSaturated"))["intent"]
    assert derived["intent"]["family"] == "text"  # the test server's `text` deployment stands in for intent

    # one request first: every deployment's gauges exist from then on, at 0 (an HPA metric without series is invalid)
    assert _classify(slow_text, 1, -1).status_code == 200
    metrics = _scrape(slow_text)
    for dep in ("text", "detection", "forecast"):
        assert metrics.get((ITEMS, dep)) == 0 and metrics.get((REQUESTS, dep)) == 0, (dep, metrics)

    # a burst: half the requests carry one text, half three; each API worker sends one batch at a time and the
    # runner takes 300 ms per text batch, so the rest waits in the batchers
    sizes = [1 + 2 * (i % 2) for i in range(BURST)]
    peak: dict[tuple[str, str], float] = {}
    samples = []
    started = time.monotonic()
    with ThreadPoolExecutor(BURST) as pool:
        futures = [pool.submit(_classify, slow_text, n, i) for i, n in enumerate(sizes)]
        while not all(f.done() for f in futures) and time.monotonic() - started < 60:
            m = _scrape(slow_text)
            samples.append((round(time.monotonic() - started, 2), m.get((ITEMS, "text")), m.get((REQUESTS, "text")),
                            m.get((CALLS, "text"))))
            for key, value in m.items():
                peak[key] = max(peak.get(key, 0.0), value)
            time.sleep(0.05)
        responses = [f.result() for f in futures]
    print("t s, items, requests, runner calls (text):", samples)
    assert [r.status_code for r in responses] == [200] * BURST, [r.text for r in responses if r.status_code != 200]
    assert max(r.json()["timings"]["total_ms"] for r in responses) >= SLOW_MS  # they did wait

    items, requests, calls = peak[(ITEMS, "text")], peak[(REQUESTS, "text")], peak[(CALLS, "text")]
    print(f"peak: {items:g} items in {requests:g} requests; runner calls in flight {calls:g}; "
          f"intent target {target:g}, knee threshold {knee:g} -> HPA asks for {math.ceil(items / target)} pods")
    assert requests >= BURST // 2, samples  # most of the burst waited at the same time, counted once per request
    assert items > requests, samples  # and the items they carry
    assert items > knee > target, samples  # past the alert's knee threshold and the autoscaler's target
    assert calls <= WORKERS * 1, samples  # the former signal: one call per API worker (gateway.batch_inflight 1)

    # everything answered: back to 0 (the gauges are per process and summed over the live API workers)
    deadline = time.monotonic() + 10
    while True:
        m = _scrape(slow_text)
        if (m[(ITEMS, "text")], m[(REQUESTS, "text")]) == (0, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (m[(ITEMS, "text")], m[(REQUESTS, "text")]) == (0, 0), m
