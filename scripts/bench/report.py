"""Every benchmark saves the same way: <out>.json (numbers) and <out>.md (the table), and prints the table."""
from __future__ import annotations

import json
from pathlib import Path


def write_report(out: Path, res: dict, markdown: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str))
    text = markdown if markdown.endswith("\n") else markdown + "\n"
    out.with_suffix(".md").write_text(text)
    print(text, end="")


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (benchmarks and drills run headless), or None when
    matplotlib is not installed (the numbers are saved either way)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
