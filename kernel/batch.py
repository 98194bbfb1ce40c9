"""The offline contract of a family: what a batch job (batch/) asks of `families/<name>/batch.py`.

Why here: the families implement it and batch/ drives it, so it lives below both (as kernel/family.py does for the
online pipeline). A job reads input records (an image's bytes, a text, one series of a long table), and for each chunk
of records the family's adapter

  1. `prepare(records)` -> Prepared: the runner items (what `families/<name>/runtime.feeds` reads, exactly what the
     service sends the runner), which record each item belongs to, a small picklable state per record (what
     postprocessing needs back: a letterbox, a token count, a regular history) and the records refused, each with
     its error code and message (a corrupt image is a row, not a stopped job);
  2. `finish(prepared, outputs)` -> one flat row per record, in order: the model's output rows (one per item) turned
     into the family's columns, or the record's error.

Both run anywhere (a worker process, a Ray actor, a Spark executor): the adapter is built from the model's directory,
its manifest, the deployment's limits and the job's options, never from a service.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

# Columns every output row has, before the family's: the record's key, the deployment and model that answered it, and
# for a refused record its error code and message (both null when it succeeded).
COMMON_COLUMNS = {"key": "str", "deployment": "str", "model": "str", "version": "str", "error_code": "str",
                  "error": "str"}


@dataclass
class Prepared:
    """One chunk of records made ready for the model."""

    keys: list[str]
    items: list[np.ndarray] = field(default_factory=list)  # runner items, in record order
    owners: list[int] = field(default_factory=list)  # per item: the index (in keys) of the record it belongs to
    states: list[Any] = field(default_factory=list)  # per record: what finish() needs (None for a refused one)
    errors: dict[int, tuple[str, str]] = field(default_factory=dict)  # record index -> (code, message)

    def without_items(self) -> Prepared:
        """The same chunk with its items dropped (what goes back to a worker for finish: the outputs replace them)."""
        return Prepared(self.keys, [], self.owners, self.states, self.errors)

    def outputs_of(self, outputs: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
        """The model's output rows grouped per record (in item order)."""
        grouped: list[list[np.ndarray]] = [[] for _ in self.keys]
        for owner, out in zip(self.owners, outputs):
            grouped[owner].append(out)
        return grouped

    def rows(self, outputs: Sequence[np.ndarray], columns: dict[str, str],
             row: Callable[[list[np.ndarray], Any], dict[str, Any]]) -> list[dict[str, Any]]:
        """One row per record, in order: `row(its output rows, its state)` (the family's columns) with null errors,
        or a refused record's error row."""
        return [error_row(columns, *self.errors[i]) if i in self.errors
                else {**row(outs, self.states[i]), "error_code": None, "error": None}
                for i, outs in enumerate(self.outputs_of(outputs))]


@dataclass(frozen=True)
class Option:
    """A job option of a family's batch command: `--<name with dashes>` of `triserve batch <COMMAND>`, handed to the
    adapter as options[name] (None when not given)."""

    name: str
    help: str
    type: Callable[[str], Any] = str
    default: Any = None


class Adapter(Protocol):
    """`families/<name>/batch.py` `Adapter(directory, manifest, limits, options)`; a family without that module has no
    batch command. `triserve batch` builds one subcommand per family that has one (batch/cli.py)."""

    FAMILY: str
    COMMAND: str  # the subcommand: `triserve batch <COMMAND>` (the family's REST operation, e.g. detect, classify)
    CHUNK_SIZE: int  # default records per chunk: one model call's worth, the unit of preprocessing
    SHARD_SIZE: int  # default records per shard: the unit of resumption and of distribution
    OPTIONS: tuple[Option, ...]  # the family's own job options (the source's are batch/sources.OPTIONS)
    COLUMNS: dict[str, str]  # the family's output columns -> type (batch/sinks.py: str f64 i64 bool list<...>)
    SOURCE: str  # which inputs it reads: "images" | "texts" | "series"
    HEAVY_FINISH: bool  # finish costs more than moving the outputs between processes (run it in the workers)

    def prepare(self, records: Sequence[dict]) -> Prepared: ...

    def finish(self, prepared: Prepared, outputs: Sequence[np.ndarray]) -> list[dict[str, Any]]: ...


def error_row(columns: dict[str, str], code: str, message: str) -> dict[str, Any]:
    """A refused record's family columns: all null, with its error."""
    return {**{name: None for name in columns}, "error_code": code, "error": message}
