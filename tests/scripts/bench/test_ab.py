"""The paired A/B harness: cells parse strictly, drift shared by a round cancels, refs check out once."""
from __future__ import annotations

import subprocess

import pytest

from scripts.bench import ab
from scripts.imagetools import StepFailed, system_tool


def test_cells_parse_and_bad_ones_are_refused():
    assert ab.parse_cells("text:1, detection:1,text:32") == [("text", 1), ("detection", 1), ("text", 32)]
    for bad in ("text", "text:0", "audio:1", "text:x"):
        with pytest.raises(ValueError):
            ab.parse_cells(bad)


def test_each_side_is_measured_twice_symmetrically_and_goes_first_every_other_round():
    assert ab.cell_order(0) == ["base", "head", "head", "base"]
    assert ab.cell_order(1) == ["head", "base", "base", "head"]
    # a drift linear in time lands equally on both sides: mean positions 0+3 and 1+2
    order = ab.cell_order(0)
    assert sum(i for i, s in enumerate(order) if s == "base") == sum(i for i, s in enumerate(order) if s == "head")


def _round(base: dict, head: dict) -> dict:
    return {"base": {"text:1": base}, "head": {"text:1": head}}


def test_differences_are_taken_within_each_round_so_shared_drift_cancels():
    # round 2 runs on a host 50% slower for both sides; head is 1 ms / 10 req/s better in each round
    rounds = [_round({"p50_ms": 5.0, "per_s": 100.0}, {"p50_ms": 4.0, "per_s": 110.0}),
              _round({"p50_ms": 7.5, "per_s": 50.0}, {"p50_ms": 6.5, "per_s": 60.0}),
              _round({"p50_ms": 5.2, "per_s": 98.0}, {"p50_ms": 4.2, "per_s": 108.0})]
    s = ab.paired(rounds)["text:1"]
    assert s["p50_ms"]["diff"] == {"median": -1.0, "min": -1.0, "max": -1.0, "n": 3}
    assert s["per_s"]["diff"]["median"] == 10.0
    assert s["p50_ms"]["head_wins"] == 3 and s["per_s"]["head_wins"] == 3  # lower latency, higher throughput
    assert s["p50_ms"]["base"]["min"] == 5.0 and s["p50_ms"]["base"]["max"] == 7.5  # the drift is still visible


def test_a_worse_head_is_not_counted_as_a_win():
    rounds = [_round({"p50_ms": 5.0, "per_s": 100.0}, {"p50_ms": 6.0, "per_s": 90.0})]
    s = ab.paired(rounds)["text:1"]
    assert s["p50_ms"]["head_wins"] == 0 and s["per_s"]["head_wins"] == 0 and s["p50_ms"]["diff"]["median"] == 1.0


def test_markdown_shows_every_metric_with_its_paired_difference():
    rounds = [_round({"p50_ms": 5.0, "per_s": 100.0, "non_200": 0}, {"p50_ms": 4.0, "per_s": 110.0, "non_200": 0})]
    res = {"when": "now", "command": "python -m scripts.bench.ab --base X", "rounds": 1, "warmup_s": 1, "duration_s": 2,
           "generator": "wrk", "server_cpu": 0, "load_cpu": 1, "env": {}, "base": {"label": "X", "commit": "a" * 40},
           "head": {"label": "working tree"}, "summary": ab.paired(rounds)}
    md = ab.to_markdown(res)
    assert "| text:1 | p50_ms | 5 [5 - 5] | 4 [4 - 4] | **-1 [-1 - -1]** | 1/1 |" in md
    assert "| text:1 | per_s |" in md and "| text:1 | non_200 |" not in md


def _system_git() -> str | None:
    try:
        return system_tool("git")
    except StepFailed:
        return None


@pytest.mark.skipif(_system_git() is None, reason="needs git (Debian package git)")
def test_a_ref_is_checked_out_once_into_its_own_worktree(tmp_path, monkeypatch):
    if subprocess.run([system_tool("git"), "rev-parse", "HEAD"], cwd=ab.ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    monkeypatch.setattr(ab, "WORKTREES", tmp_path / "ab")
    tree, sha = ab.checkout("HEAD")
    try:
        assert sha == ab.git("rev-parse", "HEAD") and tree == tmp_path / "ab" / sha[:12]
        assert (tree / "services" / "gateway.py").exists() and ab.git("rev-parse", "HEAD", cwd=tree) == sha
        assert ab.checkout("HEAD") == (tree, sha)  # reused, not added twice
        with pytest.raises(subprocess.CalledProcessError):
            ab.checkout("no-such-ref-anywhere")
    finally:
        ab.git("worktree", "remove", "--force", str(tree))
