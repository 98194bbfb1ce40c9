"""Helpers shared by the drills: arguments, one HTTP call recorded as a row, percentiles, saving JSON, and the one
counting rule of every drill and benchmark (answer_kind): a 200 whose answer says `degraded: true` came from a
fallback model and is counted apart, never as throughput; throughput and latency count primary answers only."""
from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import numpy as np

from scripts.drills.server import ROOT

DEFAULT_REGISTRY = ROOT / "models" / "store"
OUT_DIR = ROOT / "docs" / "drills"
TEXTS = ["what is my account balance", "book a flight to paris next monday", "set a timer for ten minutes",
         "how do you say good morning in german", "transfer 200 dollars to my savings account", "tell me a joke",
         "is my card blocked", "what's the weather tomorrow", "play jazz", "cancel my dinner reservation at eight"]


PRIMARY, DEGRADED, FAILED = "primary", "degraded", "failed"
_DEGRADED = re.compile(rb'"degraded"\s*:\s*true')


def says_degraded(body: bytes) -> bool:
    """Whether an answer's JSON says a fallback model answered: triserve's REST answers carry `degraded: true|false`
    (forecast: per series too; OIP: in its parameters), the peers' answers carry nothing (never degraded)."""
    return _DEGRADED.search(body) is not None


def answer_kind(status: int | str, degraded: bool | None) -> str:
    """The counting rule of every benchmark and drill: a 200 from the primary model is a primary answer (throughput,
    latency); a 200 that says degraded is a degraded answer (counted and timed apart, never as throughput); any other
    status or a transport error is failed."""
    if status != 200:
        return FAILED
    return DEGRADED if degraded else PRIMARY


def base_parser(doc: str, name: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", type=Path, default=DEFAULT_REGISTRY, help="registry root (default models/store)")
    ap.add_argument("--out", type=Path, default=OUT_DIR / f"{name}.json", help="where the JSON result goes")
    ap.add_argument("--log", type=Path, default=None, help="server log (default: a temp file, path in the JSON)")
    ap.add_argument("--starts", type=int, default=0, metavar="N",
                    help="only the drill's start phase, N times in a row: its servers with its settings, ready, one "
                         "request checked, stopped; counted (scripts/drills/starts.py; no report files)")
    return ap


def log_path(args, name: str) -> Path:
    if args.log:
        return args.log
    return Path(tempfile.mkdtemp(prefix=f"triserve-drill-{name}-")) / "serve.log"


def assert_loopback(url: str) -> None:
    if urlparse(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("refusing to send traffic to a non-loopback address")


def text_body(rng: random.Random, model: str = "auto", max_texts: int = 4) -> dict:
    return {"texts": rng.sample(TEXTS, rng.randint(1, max_texts)), "top_k": 3, "model": model}


@dataclass
class Row:
    """One request as seen by the client. Times are seconds relative to the drill's t0."""

    path: str
    sent: float
    done: float
    status: int | str  # HTTP status, or the transport exception's class name
    code: str | None = None  # error.code for error answers
    degraded: bool | None = None
    reason: str | None = None  # degraded_reason
    slot: str | None = None  # error.details.slot where given
    model: str | None = None
    server_ms: float | None = None  # timings.total_ms of a 200 (time inside the handler)

    @property
    def ms(self) -> float:
        return (self.done - self.sent) * 1000

    @property
    def ok(self) -> bool:
        """Answered with 200, by the primary or a fallback model (see `primary`)."""
        return self.status == 200

    @property
    def kind(self) -> str:
        return answer_kind(self.status, self.degraded)

    @property
    def primary(self) -> bool:
        """A 200 from the primary model: what throughput and latency count."""
        return self.kind == PRIMARY


async def post(session: aiohttp.ClientSession, url: str, path: str, body: dict, t0: float,
               headers: dict | None = None, timeout: float = 60) -> Row:
    sent = time.monotonic() - t0
    try:
        async with session.post(url + path, json=body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            raw = await resp.read()
            row = Row(path, sent, time.monotonic() - t0, resp.status)
            try:
                data = json.loads(raw)
            except ValueError:
                data = None
            if isinstance(data, dict):
                if resp.status == 200:
                    row.degraded = data.get("degraded")
                    if row.degraded is None and says_degraded(raw):  # an OIP answer: in its parameters
                        row.degraded = True
                    row.reason = data.get("degraded_reason")
                    row.model = (data.get("model") or {}).get("name")
                    row.server_ms = (data.get("timings") or {}).get("total_ms")
                elif isinstance(data.get("error"), dict):
                    row.code = data["error"].get("code")
                    details = data["error"].get("details")
                    if isinstance(details, dict):
                        row.slot = details.get("slot")
            return row
    except Exception as exc:  # noqa: BLE001  # every failure is a row, none is hidden
        return Row(path, sent, time.monotonic() - t0, type(exc).__name__, code=str(exc)[:120] or None)


def pct(values, q) -> float | None:
    return round(float(np.percentile(values, q)), 1) if len(values) else None


def lat(rows: list[Row]) -> dict:
    ms = [r.ms for r in rows]
    return {"n": len(ms), "p50": pct(ms, 50), "p90": pct(ms, 90), "p99": pct(ms, 99),
            "max": round(max(ms), 1) if ms else None}


def by_status(rows: list[Row]) -> dict[str, int]:
    c = Counter(f"{r.status}" + (f":{r.code}" if r.code and isinstance(r.status, int) else "") for r in rows)
    return dict(sorted(c.items()))


def degraded_reasons(rows: list[Row]) -> dict[str, int]:
    return dict(Counter(r.reason or "?" for r in rows if r.kind == DEGRADED))


def by_kind(rows: Iterable[Row]) -> dict[str, list[Row]]:
    """The rows split by answer_kind: {"primary": [...], "degraded": [...], "failed": [...]}."""
    out: dict[str, list[Row]] = {PRIMARY: [], DEGRADED: [], FAILED: []}
    for r in rows:
        out[r.kind].append(r)
    return out


def save(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"saved {out}")


def rows_json(rows: list[Row]) -> list[dict]:
    return [{**asdict(r), "sent": round(r.sent, 3), "done": round(r.done, 3)} for r in rows]


def transport_errors(rows: list[Row]) -> dict[str, int]:
    return dict(Counter(f"{r.status}: {r.code}" for r in rows if not isinstance(r.status, int)).most_common(10))


def access_log(path) -> list[tuple[float, str, int, float]]:
    """(epoch seconds, path, status, server-side ms) of each task request the gateway logged: its triserve.requests
    JSON lines (observability.request_log), timed from the app receiving the request to the response, i.e. without
    the wait before the event loop got to it."""
    out: list[tuple[float, str, int, float]] = []
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        if not line.startswith('{"ts"'):
            continue
        try:
            r = json.loads(line)
            out.append((float(r["ts"]), r["path"], int(r["status"]), float(r["duration_ms"])))
        except (ValueError, KeyError, TypeError):
            continue
    return out
