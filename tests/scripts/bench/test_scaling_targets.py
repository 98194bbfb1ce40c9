"""The autoscaling targets from the knee (scripts/bench/scaling_targets.py): Little's law step by step on a knee
record with hand-computed answers, the number formats, and the writer: the repository's knee gives back exactly the
numbers in every config, and a new knee changes all of them (HPA, split HPA, Yatai, KEDA, alert, dashboard,
BentoCloud, the docs' table) and nothing else."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import yaml

from scripts.bench import scaling_targets as st

ROOT = Path(__file__).resolve().parents[3]
FILES = (*st.HPA_FILES, *st.KEDA_FILES, st.ALERTS, st.DASHBOARD, st.BENTOCLOUD, st.OPERATIONS)


def ramp(points: list[tuple[float, float]]) -> dict:
    return {"steps": [{"rate": r, "latency_ms": {"p50": p, "p99": 2 * p}} for r, p in points]}


# a knee of 40/s in both ramps; p50 10 ms at 10/s, 20 ms at 20/s, 60 ms at 40/s, broke at 50/s (no p50 kept)
KNEE = {"tasks": {"text": {"knee_rps": 40, "knees": [40, 40], "limit_rps": 32,
                           "rounds": [ramp([(10, 10.0), (20, 20.0), (40, 60.0)]),
                                      {"steps": [*ramp([(10, 10.0), (20, 20.0), (40, 60.0)])["steps"],
                                                 {"rate": 50, "error": "broke"}]}]}}}


def test_targets_follow_littles_law_at_the_operating_rate_the_capacity_and_the_knee():
    (t,) = st.derive(KNEE, {"text": "intent"}, {"text": 1.0}).values()
    assert t.deployment == "intent" and t.capacity_rps == 32
    assert t.rate_rps == pytest.approx(25.6)  # r = 0.8 C
    assert t.p50_ms == pytest.approx(31.2)  # 20 + (25.6 - 20) / 20 x 40
    assert t.target == pytest.approx(25.6 * (31.2 - 1.0) / 1000)  # 0.773 items per pod
    assert t.target_e2e == pytest.approx(25.6 * 31.2 / 1000)
    assert t.at_capacity == pytest.approx(32 * (44.0 - 1.0) / 1000)  # p50(32) = 20 + 12 / 20 x 40
    assert t.knee_items == pytest.approx(40 * (60.0 - 1.0) / 1000)
    assert t.target * 1.1 < t.at_capacity < t.knee_items  # the HPA acts before the 429 limit; the alert above


def test_p50_between_steps_below_the_first_and_above_the_last():
    steps = ramp([(10, 10.0), (20, 30.0)])["steps"]
    assert st.p50_at(steps, 15) == pytest.approx(20.0)
    assert st.p50_at(steps, 4) == 10.0  # below the first step: its p50 (errs towards a larger target)
    with pytest.raises(ValueError, match="above the measured steps"):
        st.p50_at(steps, 21)


def test_a_family_without_a_knee_is_refused():
    bad = {"tasks": {"text": {**KNEE["tasks"]["text"], "knees": [0, 0], "knee_rps": 0, "limit_rps": 0}}}
    assert st.derive(bad, {"text": "intent"}) == {}  # nothing measured: nothing to write
    with pytest.raises(ValueError, match="no ramp held"):
        st.derive_one("intent", "text", {**KNEE["tasks"]["text"], "knees": [0, 0]}, 0.0)


def test_formats_carry_two_significant_digits():
    assert [st.quantity(x) for x in (0.646, 0.438, 3.09, 12.4)] == ["650m", "440m", "3100m", "12000m"]
    assert [st.plain(x) for x in (0.646, 3.09, 2.03, 11.94, 3.794)] == ["0.65", "3.1", "2.0", "12", "3.8"]


@pytest.fixture
def copy(tmp_path) -> Path:
    for f in FILES:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    return tmp_path


def repo_targets(scale: float = 1.0) -> dict[str, st.Targets]:
    knee = json.loads(st.KNEE_JSON.read_text())
    out = st.derive(knee, yaml.safe_load(st.MODELS.read_text())["defaults"])
    if scale != 1.0:
        from dataclasses import replace

        out = {d: replace(t, target=t.target * scale, target_e2e=t.target_e2e * scale, knee_items=t.knee_items * scale)
               for d, t in out.items()}
    return out


def test_the_repositorys_knee_writes_back_exactly_the_configs_numbers(copy):
    written = st.write_targets(repo_targets(), copy, render=False)
    assert [p.relative_to(copy).as_posix() for p in written if p.name != "operations.md"] == []
    for f in FILES:
        if f != st.OPERATIONS:
            assert (copy / f).read_text() == (ROOT / f).read_text(), f


def _hpa_values(doc: dict) -> tuple[dict[str, str], list[str]]:
    by_dep, others = {}, []
    for m in json.loads(json.dumps(doc)).get("metrics", []):
        spec = m.get("pods") or m.get("external")
        if not spec:
            continue
        sel = spec["metric"]["selector"]
        if "matchLabels" in sel:
            by_dep[sel["matchLabels"]["deployment"]] = spec["target"]["averageValue"]
        else:
            others.append(spec["target"]["averageValue"])
    return by_dep, others


def test_a_new_knee_changes_every_target_and_threshold(copy):
    targets = repo_targets(scale=2.0)
    want = {d: st.quantity(t.target) for d, t in targets.items()}
    smallest = st.quantity(min(t.target for t in targets.values()))
    st.write_targets(targets, copy, render=False)

    for f in st.HPA_FILES:
        docs = list(yaml.safe_load_all((copy / f).read_text()))
        specs = [d["spec"] for d in docs if d]
        if "yatai" in f:
            specs = [specs[0]["autoscaling"], *(r["autoscaling"] for r in specs[0]["runners"])]
        for spec in specs:
            by_dep, others = _hpa_values(spec)
            assert by_dep == want, f
            assert all(o == smallest for o in others), f
    for f in st.KEDA_FILES:
        for doc in yaml.safe_load_all((copy / f).read_text()):
            trig = {t["name"]: t["metadata"]["threshold"] for t in doc["spec"]["triggers"] if t["type"] == "prometheus"}
            assert trig == {**{d: st.plain(t.target) for d, t in targets.items()},
                            "others": st.plain(min(t.target for t in targets.values()))}, f
    alerts = (copy / st.ALERTS).read_text()
    for d, t in targets.items():
        assert f'label_replace(vector({st.plain(t.knee_items)}), "deployment", "{d}"' in alerts
    panel = next(p for p in json.loads((copy / st.DASHBOARD).read_text())["panels"]
                 if "triserve_deployment_pending_items" in json.dumps(p.get("targets", [])))
    exprs = {t["refId"]: t["expr"] for t in panel["targets"]}
    for d, t in targets.items():
        assert f'vector({st.plain(t.target)}), "deployment", "{d}"' in exprs["C"]
        assert f'vector({st.plain(t.knee_items)}), "deployment", "{d}"' in exprs["D"]
    cloud = yaml.safe_load((copy / st.BENTOCLOUD).read_text())["services"]["triserve"]["config_overrides"]
    assert cloud["traffic"]["concurrency"] == math.ceil(cloud["workers"] * min(t.target_e2e for t in targets.values()))
    table = (copy / st.OPERATIONS).read_text()
    for d, t in targets.items():
        row = rf"^\| `{d}` .*\*\*{re.escape(st.plain(t.target))}\*\* \({st.quantity(t.target)}\)"
        assert re.search(row, table, re.M), d
    # only the numbers moved: the same lines, the same comments
    for f in FILES:
        old, new = (ROOT / f).read_text().splitlines(), (copy / f).read_text().splitlines()
        assert len(old) == len(new), f
        assert [ln for ln in new if ln.lstrip().startswith("#")] == [ln for ln in old if ln.lstrip().startswith("#")]


def test_a_file_without_the_expected_place_is_refused_and_nothing_is_written(copy):
    hpa = copy / st.HPA_FILES[0]
    hpa.write_text(hpa.read_text().replace("deployment: coco", "deployment: kaput"))
    before = {f: (copy / f).read_text() for f in FILES}
    with pytest.raises(ValueError, match="coco"):
        st.write_targets(repo_targets(scale=2.0), copy, render=False)
    assert {f: (copy / f).read_text() for f in FILES} == before
