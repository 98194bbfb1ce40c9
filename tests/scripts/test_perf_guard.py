"""The CI performance guard's verdict (scripts/bench/perf_guard.py): the median over rounds of head / base CPU per
request, every server process summed, against the limit."""
from __future__ import annotations

from scripts.bench.perf_guard import cpu_per_request, text_models_file, verdict


def _round(base: tuple[float, float], head: tuple[float, float]) -> dict:
    def side(gateway: float, runner: float) -> dict:
        return {"text:16": {"per_s": 500.0, "cpu_ms_per_request[triserve]": gateway,
                            "cpu_ms_per_request[triserve-runner]": runner}}
    return {"base": side(*base), "head": side(*head)}


def test_cpu_per_request_sums_every_process():
    assert cpu_per_request(_round((1.0, 0.5), (1.0, 0.5))["base"]["text:16"]) == 1.5


def test_the_median_round_decides_and_one_noisy_round_does_not():
    rounds = [_round((1.0, 0.5), (1.05, 0.5)), _round((1.0, 0.5), (1.6, 0.5)), _round((1.0, 0.5), (1.0, 0.5))]
    passed, median, values = verdict(rounds, "text:16", 1.15)
    assert passed and round(median, 4) == round(1.55 / 1.5, 4) and len(values) == 3


def test_a_regression_beyond_the_limit_fails():
    rounds = [_round((1.0, 0.5), (1.3, 0.5))] * 3
    passed, median, _ = verdict(rounds, "text:16", 1.15)
    assert not passed and median > 1.15


def test_the_guard_serves_only_the_text_deployment(tmp_path):
    import yaml

    repo = yaml.safe_load(text_models_file(tmp_path / "models.yaml").read_text())
    assert [d["name"] for d in repo["deployments"]] == ["text"]
