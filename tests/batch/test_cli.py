"""batch/cli.py and `triserve batch`: the summary line, a refused mismatch, the wrong family."""
from __future__ import annotations

import json

import pytest

from triserve.batch import cli


def test_main_prints_the_summary_and_saves_it(tiny_registry, batch_inputs, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["classify", "--deployment", "text", "--input", str(batch_inputs["classify"]), "--output", str(out),
            "--registry", str(tiny_registry.root), "--cache-dir", str(tmp_path / "cache"), "--workers", "0"]
    assert cli.main(argv) == 0
    first, line = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(line)
    assert "40 items, 10 errors" in first and "items/s" in first
    assert summary == json.loads((out / "_SUCCESS.json").read_text())
    assert cli.main(argv + ["--top-k", "1"]) == 2  # other options, same output: refused
    assert "holds another job" in capsys.readouterr().err


def test_a_deployment_of_another_family_is_refused(tiny_registry, batch_inputs, tmp_path):
    args = cli._parser().parse_args(["detect", "--deployment", "text", "--input", str(batch_inputs["detect"]),
                                     "--output", str(tmp_path / "o"), "--registry", str(tiny_registry.root)])
    with pytest.raises(SystemExit, match="text deployment"):
        cli.run(args)


def test_triserve_lists_batch():
    from triserve.cli import COMMANDS

    assert COMMANDS["batch"][0] == "triserve.batch.cli"


def test_every_family_with_an_adapter_gets_its_command_and_options(monkeypatch):
    """The commands come from the family registry: a family (a third-party one too) with a batch adapter gets
    `triserve batch <COMMAND>` with its source's and its own options; one without an adapter gets none."""
    from triserve.configs import families
    from triserve.kernel.batch import Option

    class Adapter:
        FAMILY, COMMAND, SOURCE, CHUNK_SIZE, SHARD_SIZE = "sentiment", "sentiment", "texts", 8, 64
        OPTIONS = (Option("threshold", "decision threshold", float, 0.5),)

    builtin = families.names()
    monkeypatch.setattr(families, "names", lambda: (*builtin, "sentiment"))
    real = families.batch_adapter
    monkeypatch.setattr(families, "batch_adapter", lambda name: Adapter if name == "sentiment" else real(name))
    # pose and segmentation have no adapter; the sixth family's came with its folder
    assert set(cli.commands()) == {"detect", "classify", "forecast", "forecast-panel", "forecast-backtest",
                                  "classify-image", "pose", "segment", "sentiment"}
    args = cli._parser().parse_args(["sentiment", "--deployment", "s", "--input", "t.jsonl", "--output", "o",
                                     "--threshold", "0.7"])
    assert cli._options(args) == {"text_column": "text", "id_column": "id", "threshold": 0.7}
    assert (args.chunk_size, args.shard_size) == (8, 64)
