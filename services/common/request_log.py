"""Structured request logs and sampled payloads.

One JSON line per request (request_id, task, status, model version, stage times, batch size, degraded) on the
'triserve.requests' logger; a sampled share of request bodies goes to a size-capped, rotating JSONL file that load
tests can replay and quantisation can calibrate on.
"""
from __future__ import annotations

import json
import logging
import random
import sys
import time
from logging.handlers import RotatingFileHandler
from pathlib import Path

from prometheus_client import Counter

from configs.settings import Observability

PAYLOADS = Counter("triserve_payloads_sampled_total", "Request bodies written to the payload log, or skipped.",
                   ["task", "outcome"])


def json_logger(name: str, handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(name)
    if not logger.handlers:
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


class RequestLog:
    def __init__(self, cfg: Observability):
        self.cfg = cfg
        self.requests = json_logger("triserve.requests", logging.StreamHandler(sys.stdout))
        self.payloads: logging.Logger | None = None
        if cfg.payload_sample_rate > 0:
            Path(cfg.payload_dir).mkdir(parents=True, exist_ok=True)
            self.payloads = json_logger("triserve.payloads", RotatingFileHandler(
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
