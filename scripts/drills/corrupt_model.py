"""Drill: one corrupted byte in one model.onnx (same size), then the file restored and the server restarted.

    python -m scripts.drills.corrupt_model [--registry models/store] [--model minilm-intent] [--observe-seconds 20]

Copies the registry to a temp dir (the source is never touched), flips one byte in the middle of the model file of
--model (its 'stable' version), starts the server on the copy and for --observe-seconds polls /readyz, /livez,
/v1/models and one inference per task. Expected: /readyz 503 throughout, /livez 200, /v1/models naming the
IntegrityError (sha256 mismatch), inference answered with a clear 503 (not a crash, not garbage), no worker restart
loop. Then the byte is restored, the server restarted, and the time to readiness measured.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx

from scripts.drills.common import assert_loopback, base_parser, log_path, save
from scripts.drills.server import Server
from scripts.drills.starts import (
    Attempt,
    StartCheckFailed,
    StartOnce,
    check_answer,
    check_get,
    drill_main,
    serve_once,
)
from triserve.models.registry import LocalRegistry
from triserve_client import (
    NO_RETRY,
    ClassifyResponse,
    ForecastResponse,
    TriserveAPIError,
    TriserveClient,
    TriserveError,
)

NAME = "corrupt_model"
TEXTS = ["what is my account balance"]
SERIES = [round(340 + 0.1 * i + 3 * ((i % 12) - 6) / 6, 3) for i in range(48)]
PROBES = ("/v1/classify", "/v1/forecast")


def probe(api: TriserveClient, path: str) -> tuple[str, dict]:
    """One inference probe through the client (no retries: each poll is one request): ("<status>:<error code>",
    the answer or the error model as JSON)."""
    try:
        answer: ClassifyResponse | ForecastResponse
        if path == "/v1/classify":
            answer = api.classify(TEXTS)
        else:
            answer = api.forecast(SERIES, start="1990-01-01T00:00:00", frequency="MS", horizon=6)
        return "200:", answer.model_dump(mode="json")
    except TriserveAPIError as err:
        return f"{err.status}:{err.code}", {"error": err.error.model_dump(mode="json")}


def corrupt(path: Path) -> dict:
    data = bytearray(path.read_bytes())
    offset = len(data) // 2
    original = data[offset]
    data[offset] = original ^ 0xFF
    path.write_bytes(bytes(data))
    return {"file": str(path), "size": len(data), "offset": offset, "original": original, "written": data[offset]}


def restore(path: Path, info: dict) -> None:
    data = bytearray(path.read_bytes())
    data[info["offset"]] = info["original"]
    path.write_bytes(bytes(data))


def observe(srv: Server, seconds: float, interval: float = 0.5) -> dict:
    assert_loopback(srv.url)
    # status code, or the transport failure's name -> count
    readyz: Counter[int | str] = Counter()
    livez: Counter[int | str] = Counter()
    models_status: Counter[int | str] = Counter()
    inference: dict[str, Counter] = {p: Counter() for p in PROBES}
    models_body = None
    models_last_status: int | str = 0
    inference_body: dict[str, dict] = {}
    runner_pids: set[int] = set()
    end = time.monotonic() + seconds
    # /readyz and /livez raw: the drill records their exact HTTP statuses (the client's ready() is a yes/no)
    with httpx.Client(base_url=srv.url, timeout=5) as c, TriserveClient(srv.url, timeout=5, retry=NO_RETRY) as api:
        while time.monotonic() < end:
            for path, counter in (("/readyz", readyz), ("/livez", livez)):
                try:
                    counter[c.get(path).status_code] += 1
                except httpx.HTTPError as exc:
                    counter[type(exc).__name__] += 1
            try:
                models_body = api.models().model_dump(mode="json", exclude={"request_id"})
                models_status[200] += 1
                models_last_status = 200
            except TriserveAPIError as err:
                models_status[err.status] += 1
                models_body = {"error": err.error.model_dump(mode="json")}
                models_last_status = err.status
            except TriserveError as exc:
                models_status[type(exc.__cause__ or exc).__name__] += 1
            for path in PROBES:
                try:
                    key, inference_body[path] = probe(api, path)
                    inference[path][key] += 1
                except TriserveError as exc:
                    inference[path][type(exc.__cause__ or exc).__name__] += 1
            runner_pids.update(srv.runner_pids())
            time.sleep(interval)
    return {"seconds": seconds, "readyz": dict(readyz), "livez": dict(livez), "v1_models_status": dict(models_status),
            "v1_models_body": models_body, "v1_models_last_status": models_last_status,
            "inference": {p: dict(c) for p, c in inference.items()},
            "inference_body": inference_body, "runner_pids_seen": sorted(runner_pids),
            "server_alive": srv.proc.poll() is None}


def copy_registry(registry: Path, model: str, ref: str, work: Path) -> tuple[Path, Path, str]:
    """The registry copied into `work` (the source is never touched): (the copy, the model file of `model` at
    `ref` in it, its version)."""
    copy = work / "store"
    shutil.copytree(registry, copy, symlinks=True)
    reg = LocalRegistry(copy)
    version = reg.resolve(model, ref)
    return copy, reg.path(model, version) / reg.manifest(model, version).model_file, version


def integrity_errors(url: str) -> list[str]:
    """The IntegrityErrors (sha256 mismatch) /v1/models names now (named_integrity_errors)."""
    r = httpx.get(url + "/v1/models", timeout=10)
    try:
        body = r.json()
    except ValueError:
        return []
    return named_integrity_errors(r.status_code, body)


def named_integrity_errors(status: int, body: object) -> list[str]:
    """The IntegrityErrors (sha256 mismatch) a /v1/models answer names: in its `errors` when it answers 200, or as the
    reason of its 503 not_ready (a model that fails verification keeps the whole service from loading)."""
    if not isinstance(body, dict):
        return []
    if status == 200:
        texts = [str(v) for v in (body.get("errors") or {}).values()]
    else:
        texts = [str(((body.get("error") or {}).get("details") or {}).get("reason") or "")]
    return [t for t in texts if "IntegrityError" in t and "sha256 mismatch" in t]


STARTS = ("two `bentoml serve` on a copy of the registry, one after the other: --model with one byte flipped "
          "(listening, /readyz 503, the IntegrityError in /v1/models, inference 503), then the byte restored (ready, "
          "inference 200)")


@contextlib.contextmanager
def start_phase(args) -> Iterator[StartOnce]:
    """The registry copied once; each start flips the byte, starts the server on the copy and checks that it is up but
    not ready for the reason the drill expects, restores the byte and starts the server again until ready."""
    work = Path(tempfile.mkdtemp(prefix="triserve-drill-registry-"))
    try:
        copy, target, _ = copy_registry(args.registry, args.model, args.ref, work)

        def once(attempt: Attempt) -> None:
            info = corrupt(target)
            try:
                with Server(copy, log_path=attempt.log("serve-corrupt")) as srv:
                    attempt.ready_s["corrupt_listening"] = srv.wait_listening()
                    deadline = time.monotonic() + 60  # until the runner has finished its (failing) load
                    while not (errors := integrity_errors(srv.url)) and time.monotonic() < deadline:
                        time.sleep(0.5)
                    if not errors:
                        raise StartCheckFailed("/v1/models names no IntegrityError (sha256 mismatch) after 60 s")
                    for path, want in (("/readyz", 503), ("/livez", 200)):
                        check_get(srv.url, path, want=want)
                    attempt.checks += [f"/v1/models names {errors[0][:120]}; /readyz 503, /livez 200",
                                       check_answer(srv.url, "/v1/classify", {"texts": TEXTS, "top_k": 1}, want=503)]
            finally:
                restore(target, info)
            serve_once(attempt, copy, {}, "serve-restored",
                       lambda srv: check_answer(srv.url, "/v1/classify", {"texts": TEXTS, "top_k": 1}))

        yield once
    finally:
        shutil.rmtree(work, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = base_parser(__doc__, NAME)
    ap.add_argument("--model", default="minilm-intent", help="registry model whose model.onnx gets the bad byte")
    ap.add_argument("--ref", default="stable")
    ap.add_argument("--observe-seconds", type=float, default=20)
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.starts:
        drill_main(NAME, args, start_phase)
        return
    log = log_path(args, NAME)
    work = Path(tempfile.mkdtemp(prefix="triserve-drill-registry-"))
    res: dict = {"drill": NAME, "registry": str(args.registry), "model": args.model}
    try:
        copy, target, version = copy_registry(args.registry, args.model, args.ref, work)
        info = corrupt(target)
        res["corruption"] = {**info, "file": str(target.relative_to(copy)), "version": version}
        print(f"flipped byte {info['offset']} of {args.model}:{version}/{target.name} "
              f"({info['original']:#04x} -> {info['written']:#04x}, size {info['size']} unchanged)", flush=True)

        with Server(copy, log_path=log.with_name("serve-corrupt.log")) as srv:
            res["corrupt_listening_s"] = round(srv.wait_listening(), 1)
            time.sleep(3)  # let the runner finish its (failing) load
            res["corrupt"] = observe(srv, min(args.observe_seconds, 120))
        res["checks"] = {
            "readyz_always_503": set(res["corrupt"]["readyz"]) == {503},
            "livez_always_200": set(res["corrupt"]["livez"]) == {200},
            "v1_models_names_integrity_error": bool(named_integrity_errors(res["corrupt"]["v1_models_last_status"],
                                                                           res["corrupt"]["v1_models_body"])),
            "no_runner_restart_loop": len(res["corrupt"]["runner_pids_seen"]) == 1,
            "server_alive": res["corrupt"]["server_alive"],
            "no_5xx_other_than_503": all(k.startswith(("503", "200", "4")) for c in res["corrupt"]["inference"].values()
                                         for k in c),
        }

        restore(target, info)
        with Server(copy, log_path=log.with_name("serve-restored.log")) as srv:
            res["restored_ready_s"] = round(srv.wait_ready(), 1)
            with TriserveClient(srv.url, timeout=10, retry=NO_RETRY) as api:
                res["restored"] = {"v1_models_errors": api.models().errors,
                                   "classify": int(probe(api, "/v1/classify")[0].split(":")[0])}
        res["server_logs"] = [str(log.with_name("serve-corrupt.log")), str(log.with_name("serve-restored.log"))]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    cor = res["corrupt"]
    print(f"corrupt_model: {args.model} byte flipped; server listening after {res['corrupt_listening_s']} s; "
          f"observed {cor['seconds']} s:")
    print(f"  /readyz {cor['readyz']}   /livez {cor['livez']}   /v1/models {cor['v1_models_status']} "
          f"(server alive: {cor['server_alive']}, runner PIDs seen: {cor['runner_pids_seen']})")
    named = named_integrity_errors(cor["v1_models_last_status"], cor["v1_models_body"])
    print(f"  /v1/models names: {json.dumps(named)}")
    for path, counts in cor["inference"].items():
        err = (cor["inference_body"].get(path) or {}).get("error") or {}
        print(f"  {path}: {counts}  last error: {err.get('code')}: {err.get('message')} {err.get('details')}")
    print(f"  checks: {res['checks']}")
    print(f"  restored byte + restart: ready after {res['restored_ready_s']} s; /v1/models errors "
          f"{res['restored']['v1_models_errors']}; classify -> {res['restored']['classify']}")
    save(res, args.out)


if __name__ == "__main__":
    main()
