"""The soak drill's traffic (scripts/drills/soak.py): one request of a family's deployment over one transport (REST,
typed gRPC, OIP REST, OIP gRPC), or one version-pinned OIP tensor request, each recorded as a SoakRow; and the
open loop that sends them at a steady rate per deployment (times the burst factor during a burst), bounded in count
and time, to 127.0.0.1 only.

OIP goes through tritonclient (as Triton's users do); typed gRPC through the generated stubs.
"""
from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import grpc
import numpy as np
import tritonclient.grpc.aio as tgrpc
import tritonclient.http.aio as thttp
from tritonclient.utils import InferenceServerException

from scripts.drills.common import TEXTS, assert_loopback, post
from scripts.drills.soak_plan import SoakRow
from triserve.services.protocols.generated import triserve_pb2 as tpb
from triserve.services.protocols.generated import triserve_pb2_grpc as tpb_grpc

TRANSPORTS = ("rest", "grpc", "oip_rest", "oip_grpc")
# gRPC calls wait for a restarting server within their deadline (as triserve_client's gRPC clients do by default,
# and as REST requests wait in the listen backlog the arbiter keeps open) instead of failing at once with
# UNAVAILABLE while the worker that serves gRPC starts again; a call already sent when it died still fails.
WAIT_FOR_READY = [("grpc.service_config", json.dumps({"methodConfig": [{"name": [{}], "waitForReady": True}]}))]
TRITON_CHANNEL_ARGS = [("grpc.max_send_message_length", tgrpc.MAX_GRPC_MESSAGE_SIZE),  # tritonclient's own limits
                       ("grpc.max_receive_message_length", tgrpc.MAX_GRPC_MESSAGE_SIZE)]
SERIES = [round(340 + 0.1 * i + 3 * np.sin(i * np.pi / 6), 3) for i in range(48)]
STAMPS = [f"{2000 + i // 12}-{i % 12 + 1:02d}-01T00:00:00" for i in range(len(SERIES))]
# family -> (REST path, typed gRPC method, its request message); the image families share one body
IMAGE_FAMILIES = {"detection": ("/v1/detect", "Detect", tpb.DetectRequest),
                  "segmentation": ("/v1/segment", "Segment", tpb.SegmentRequest),
                  "classification": ("/v1/classify-image", "ClassifyImage", tpb.ClassifyImageRequest),
                  "pose": ("/v1/pose", "Pose", tpb.PoseRequest)}


def png() -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (96, 64), (20, 20, 20))
    ImageDraw.Draw(img).rectangle([10, 10, 50, 40], fill=(200, 30, 30))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@dataclass
class Clients:
    """The connections every sender shares: one aiohttp session, one typed gRPC channel, two tritonclients."""
    url: str
    grpc_target: str
    session: aiohttp.ClientSession
    channel: grpc.aio.Channel
    oip_http: Any
    oip_grpc: Any
    image: bytes = field(default_factory=png)

    @classmethod
    async def open(cls, url: str, grpc_target: str, limit: int = 256, timeout: float = 30) -> Clients:
        assert_loopback(url)
        assert_loopback("http://" + grpc_target)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit))
        host = url.split("://", 1)[1]
        return cls(url, grpc_target, session, grpc.aio.insecure_channel(grpc_target, options=WAIT_FOR_READY),
                   thttp.InferenceServerClient(host, conn_limit=limit, conn_timeout=timeout),
                   tgrpc.InferenceServerClient(grpc_target, channel_args=[*TRITON_CHANNEL_ARGS, *WAIT_FOR_READY]))

    async def close(self) -> None:
        await self.session.close()
        await self.channel.close()
        await self.oip_http.close()
        await self.oip_grpc.close()


def rest_request(family: str, deployment: str, image: bytes) -> tuple[str, dict]:
    if family == "text":
        return "/v1/classify", {"texts": TEXTS[:2], "top_k": 3, "deployment": deployment}
    if family == "forecast":
        return "/v1/forecast", {"values": SERIES, "start": STAMPS[0], "frequency": "MS", "horizon": 6,
                                "deployment": deployment}
    path = IMAGE_FAMILIES[family][0]
    return path, {"images": [{"data": base64.b64encode(image).decode()}], "deployment": deployment}


def typed_request(family: str, deployment: str, image: bytes) -> tuple[str, Any]:
    if family == "text":
        return "Classify", tpb.ClassifyRequest(texts=TEXTS[:2], top_k=3, deployment=deployment)
    if family == "forecast":
        return "Forecast", tpb.ForecastRequest(values=SERIES, start=STAMPS[0], frequency="MS", horizon=6,
                                               deployment=deployment)
    _, method, message = IMAGE_FAMILIES[family]
    return method, message(images=[image], deployment=deployment)


def oip_inputs(module: Any, family: str, image: bytes) -> list:
    def strings(name: str, items: list) -> Any:
        inp = module.InferInput(name, [len(items)], "BYTES")
        data = np.array([i.encode() if isinstance(i, str) else i for i in items], dtype=object)
        inp.set_data_from_numpy(data)
        return inp

    if family == "text":
        return [strings("TEXT", TEXTS[:2])]
    if family == "forecast":
        values = module.InferInput("VALUES", [len(SERIES)], "FP64")
        values.set_data_from_numpy(np.array(SERIES, dtype=np.float64))
        return [values, strings("TIMESTAMPS", STAMPS)]
    return [strings("IMAGE", [image])]


def tensor_inputs(module: Any, metadata: dict) -> list:
    """Inputs for a tensor model from its OIP metadata: variable dims 1 (batch) or 8, integer ids 1, floats 0."""
    out = []
    for t in metadata["inputs"]:
        shape = [d if d > 0 else (1 if i == 0 else 8) for i, d in enumerate(t["shape"])]
        dtype = {"INT64": np.int64, "INT32": np.int32, "FP32": np.float32, "FP64": np.float64}[t["datatype"]]
        inp = module.InferInput(t["name"], shape, t["datatype"])
        inp.set_data_from_numpy(np.ones(shape, dtype=dtype) if np.issubdtype(dtype, np.integer)
                                else np.zeros(shape, dtype=dtype))
        out.append(inp)
    return out


def _deadline(transport: str, timeout: float) -> dict:
    """tritonclient's client-side deadline over gRPC; over HTTP it is the session's (conn_timeout in Clients.open:
    the HTTP client's own `timeout` argument is a server-side request parameter)."""
    return {} if transport == "oip_rest" else {"client_timeout": timeout}


def _params(transport: str, result: Any) -> dict:
    if transport == "oip_rest":
        return result.get_response().get("parameters", {})
    params = result.get_response().parameters
    return {k: (v.bool_param if v.WhichOneof("parameter_choice") == "bool_param" else v.string_param)
            for k, v in params.items()}


# A REST connection that broke before any answer (its gateway worker SIGKILLed mid-request, or a keep-alive
# connection to that worker): every inference call is free of side effects, and the product's client
# (triserve_client's RetryPolicy) sends it once more; so does the drill, and the row keeps the first failure.
RETRIED_TRANSPORT_ERRORS = ("ServerDisconnectedError", "ClientOSError", "ClientConnectorError")


async def send(c: Clients, transport: str, family: str, deployment: str, t0: float, timeout: float = 30,
               pinned: tuple[str, str, dict] | None = None) -> SoakRow:
    """One request, sent once more after a broken REST connection (RETRIED_TRANSPORT_ERRORS); see send_once."""
    first = await send_once(c, transport, family, deployment, t0, timeout, pinned)
    if first.status not in RETRIED_TRANSPORT_ERRORS:
        return first
    await asyncio.sleep(0.2)
    again = await send_once(c, transport, family, deployment, t0, timeout, pinned)
    again.sent, again.retried = first.sent, str(first.status)
    return again


async def send_once(c: Clients, transport: str, family: str, deployment: str, t0: float, timeout: float = 30,
                    pinned: tuple[str, str, dict] | None = None) -> SoakRow:
    """One request; every outcome a row (HTTP status, "grpc:<CODE>", or the transport exception's name). `pinned`:
    (tensor model, version, its OIP metadata) for a version-pinned OIP REST request instead of the family's own."""
    sent = time.monotonic() - t0

    def row(status: int | str, **kw: Any) -> SoakRow:
        return SoakRow(f"{transport} {deployment}", sent, time.monotonic() - t0, status, transport=transport,
                       deployment=deployment, pinned=pinned[1] if pinned else None, **kw)

    try:
        if transport == "rest":
            path, body = rest_request(family, deployment, c.image)
            r = await post(c.session, c.url, path, body, t0, timeout=timeout)
            return row(r.status, code=r.code, degraded=r.degraded, reason=r.reason, model=r.model)
        if transport == "grpc":
            method, message = typed_request(family, deployment, c.image)
            call = getattr(tpb_grpc.TriserveStub(c.channel), method)
            resp = await call(message, timeout=timeout)
            return row(200, degraded=resp.degraded, model=resp.model.name, version=resp.model.version)
        client = c.oip_http if transport == "oip_rest" else c.oip_grpc
        module = thttp if transport == "oip_rest" else tgrpc
        if pinned:
            model, version, meta = pinned
            result = await client.infer(model, tensor_inputs(module, meta), model_version=version,
                                        **_deadline(transport, timeout))
        else:
            result = await client.infer(deployment, oip_inputs(module, family, c.image),
                                        **_deadline(transport, timeout))
        p = _params(transport, result)
        got = result.get_response()
        answered = got.get("model_version") if isinstance(got, dict) else got.model_version
        return row(200, degraded=bool(p.get("degraded")), model=p.get("served_model"),
                   version=p.get("served_version") or answered)
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - t0 - sent >= timeout:
            return row("client_deadline")  # ours, not the server's: never answered
        return row(f"grpc:{exc.code().name}", code=(exc.details() or "").split(":", 1)[0][:60] or None)
    except InferenceServerException as exc:
        status, code = str(exc.status() or ""), (exc.message() or "").split(":", 1)[0][:60] or None
        if status == "StatusCode.DEADLINE_EXCEEDED" and time.monotonic() - t0 - sent >= timeout:
            return row("client_deadline")
        if status.startswith("StatusCode."):
            return row(f"grpc:{status.removeprefix('StatusCode.')}", code=code)
        return row(int(status) if status.isdigit() else "oip_error", code=code)
    except Exception as exc:  # noqa: BLE001  # every failure is a row, none is hidden
        return row(type(exc).__name__, code=str(exc)[:120] or None)


async def open_loop(c: Clients, deployment: str, family: str, rate: float, seconds: float, t0: float,
                    factor: Callable[[float], float], rows: list[SoakRow], max_requests: int,
                    pinned: Callable[[], tuple[str, str, dict] | None] = lambda: None, max_inflight: int = 64,
                    active: Callable[[], bool] = lambda: True) -> dict:
    """Arrivals for one deployment at rate x factor(t) until `seconds` pass, `max_requests` are sent or active() says
    it is gone; transports in turn; every 8th arrival version-pinned when pinned() names a version. Waits for every
    request sent; returns {"sent", "skipped"} (skipped: arrivals over max_inflight, the client's own limit)."""
    inflight: set[asyncio.Task] = set()
    sent = skipped = 0

    def done(task: asyncio.Task) -> None:
        inflight.discard(task)
        rows.append(task.result())

    start = time.monotonic()
    next_at = start
    for i in range(max_requests):
        now = time.monotonic()
        if next_at > now:
            await asyncio.sleep(next_at - now)
        t = time.monotonic() - start
        if t > seconds:
            break
        next_at += 1 / (rate * factor(time.monotonic() - t0))
        if not active():
            continue
        if len(inflight) >= max_inflight:
            skipped += 1
            continue
        pin = pinned() if i % 8 == 7 else None
        transport = "oip_rest" if pin else TRANSPORTS[i % len(TRANSPORTS)]
        task = asyncio.create_task(send(c, transport, family, deployment, t0, pinned=pin))
        task.add_done_callback(done)
        inflight.add(task)
        sent += 1
    if inflight:
        await asyncio.gather(*list(inflight))
    return {"sent": sent, "skipped": skipped}
