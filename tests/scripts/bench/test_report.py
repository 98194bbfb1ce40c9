"""Benchmark results are saved as <out>.json + <out>.md and the table is printed."""
from __future__ import annotations

import json
from pathlib import Path

from scripts.bench.report import write_report


def test_write_report_saves_both_files_and_prints_the_table(tmp_path, capsys):
    out = tmp_path / "nested" / "result"
    write_report(out, {"rps": 1.5, "path": Path("/x")}, "# title\n\n| a |")
    assert json.loads(out.with_suffix(".json").read_text()) == {"rps": 1.5, "path": "/x"}
    assert out.with_suffix(".md").read_text() == "# title\n\n| a |\n"
    assert capsys.readouterr().out == "# title\n\n| a |\n"
