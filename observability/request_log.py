"""Structured request logs and sampled payloads.

One JSON line per request (request_id, task, status, model version, stage times, batch size, degraded) on the
'triserve.requests' logger; a sampled share of request bodies goes to a size-capped, rotating JSONL file that load
tests can replay and quantisation can calibrate on.
"""
from __future__ import annotations

import atexit
import collections
import json
import logging
import random
import sys
import threading
import time
from collections.abc import Callable
from logging.handlers import RotatingFileHandler
from pathlib import Path

from prometheus_client import Counter

from triserve.configs.settings import Observability

PAYLOADS = Counter("triserve_payloads_sampled_total", "Request bodies written to the payload log, or skipped.",
                   ["task", "outcome"])


LOG_LINES_DROPPED = Counter("triserve_log_lines_dropped_total", "Log lines dropped because the output stream did "
                            "not keep up (more than BackgroundLineWriter.max_pending waiting).", ["logger"])


class BackgroundLineWriter(logging.Handler):
    """Formats records on the caller's thread and writes them from a daemon thread, many lines per write.

    Why: a StreamHandler writes and flushes per record, a syscall on the event loop for every request; it was 12% of
    the API worker's main thread at c=32 (docs/performance.md). Lines keep their order, reach the stream within
    `interval_s`, and are flushed at exit; if the stream stalls, more than `max_pending` waiting lines are dropped
    and counted instead of growing memory without bound.
    """

    def __init__(self, stream, name: str, interval_s: float = 0.05, max_pending: int = 100_000):
        super().__init__()
        self.stream, self.logger_name = stream, name
        self.interval_s, self.max_pending = interval_s, max_pending
        self._pending: collections.deque[str] = collections.deque()
        self._write_lock = threading.Lock()
        threading.Thread(target=self._run, name=f"log-writer:{name}", daemon=True).start()
        atexit.register(self.flush)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - logging must never raise into the request
            self.handleError(record)
            return
        if len(self._pending) >= self.max_pending:
            LOG_LINES_DROPPED.labels(self.logger_name).inc()
            return
        self._pending.append(line)

    def flush(self) -> None:
        with self._write_lock:
            lines = []
            while self._pending:
                lines.append(self._pending.popleft())
            if lines:
                try:
                    self.stream.write("\n".join(lines) + "\n")
                    self.stream.flush()
                except (OSError, ValueError):  # closed or broken stream at shutdown: nothing left to tell
                    pass

    def _run(self) -> None:
        while True:
            time.sleep(self.interval_s)
            self.flush()


def stdout_json_logger(name: str) -> logging.Logger:
    """A JSON-lines logger on stdout written off the caller's thread (BackgroundLineWriter): one writer (and one
    thread) per logger name and process, however often it is asked for."""
    return json_logger(name, lambda: BackgroundLineWriter(sys.stdout, name))


def json_logger(name: str, make_handler: Callable[[], logging.Handler]) -> logging.Logger:
    """The logger `name` writing bare messages through one handler, made only when the logger has none yet (a handler
    may own a thread or a file: asked for per request, it must not be made per request)."""
    logger = logging.getLogger(name)
    if not logger.handlers:
        handler = make_handler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


class RequestLog:
    def __init__(self, cfg: Observability):
        self.cfg = cfg
        self.requests = stdout_json_logger("triserve.requests")
        self.payloads: logging.Logger | None = None
        if cfg.payload_sample_rate > 0:
            Path(cfg.payload_dir).mkdir(parents=True, exist_ok=True)
            self.payloads = json_logger("triserve.payloads", lambda: RotatingFileHandler(
                Path(cfg.payload_dir) / "payloads.jsonl", maxBytes=cfg.payload_file_bytes,
                backupCount=cfg.payload_files))

    def request(self, record: dict) -> None:
        if self.cfg.request_log:
            self.requests.info(json.dumps({"ts": round(time.time(), 3), **record}, default=str))

    def payload(self, task: str, path: str, request_id: str, body: bytes) -> None:
        if self.payloads is None or random.random() >= self.cfg.payload_sample_rate:
            return
        if len(body) > self.cfg.payload_max_bytes:
            PAYLOADS.labels(task, "too_large").inc()
            return
        try:
            parsed = json.loads(body)
        except ValueError:
            PAYLOADS.labels(task, "not_json").inc()
            return
        self.payloads.info(json.dumps({"ts": round(time.time(), 3), "task": task, "path": path,
                                       "request_id": request_id, "body": parsed}))
        PAYLOADS.labels(task, "written").inc()
