"""The typed gRPC task APIs (triserve.v1.Triserve): each request becomes the REST request model and runs through the
same pipeline method as /v1/*, and the REST response model is copied field by field into the response message.

Proto3 `optional` fields that are unset are left out, so the REST defaults apply (top_k 3, horizon 12, ...).
"""
from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from pydantic import BaseModel

from services.detection.schemas import DetectOptions
from services.forecast.schemas import ForecastRequest
from services.protocols.calls import detect_encoded
from services.protocols.generated import triserve_pb2, triserve_pb2_grpc
from services.protocols.grpc_common import RpcScope, handle
from services.text.schemas import ClassifyRequest

SERVICE_NAME = triserve_pb2.DESCRIPTOR.services_by_name["Triserve"].full_name
_CHOICES = {triserve_pb2.MODEL_CHOICE_AUTO: "auto", triserve_pb2.MODEL_CHOICE_PRIMARY: "primary",
            triserve_pb2.MODEL_CHOICE_FALLBACK: "fallback"}


def model_choice(value: int) -> str:
    # An unknown enum number stays unknown, so the request model refuses it like any other bad value.
    return _CHOICES.get(value, f"unknown_model_choice_{value}")


def _set(message, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: getattr(message, n) for n in names if message.HasField(n)}


def to_message(response: BaseModel, message):
    """A REST response model -> the proto message with the same field names (None fields left unset)."""
    json_format.ParseDict(response.model_dump(mode="json", exclude_none=True), message, ignore_unknown_fields=True)
    return message


def classify_request(msg: triserve_pb2.ClassifyRequest) -> ClassifyRequest:
    return ClassifyRequest(texts=list(msg.texts), model=model_choice(msg.model), **_set(msg, ("top_k",)))


def forecast_request(msg: triserve_pb2.ForecastRequest) -> ForecastRequest:
    fields: dict[str, Any] = {"values": list(msg.values), "model": model_choice(msg.model)}
    if len(msg.timestamps):
        fields["timestamps"] = list(msg.timestamps)
    fields.update(_set(msg, ("start", "frequency", "horizon")))
    return ForecastRequest(**fields)


def detect_options(msg: triserve_pb2.DetectRequest) -> DetectOptions:
    return DetectOptions(model=model_choice(msg.model),
                         **_set(msg, ("conf_threshold", "iou_threshold", "max_detections", "class_aware")))


class TriserveServicer(triserve_pb2_grpc.TriserveServicer):
    def __init__(self, gateway):
        self.gateway = gateway

    async def Classify(self, request, context):
        async def work(scope: RpcScope):
            call = scope.call("text")
            gateway = scope.gateway
            resp = await gateway.pipeline("text").classify(gateway, classify_request(request), call)
            return to_message(resp, triserve_pb2.ClassifyResponse())

        return await handle(context, self.gateway, work, "Triserve/Classify")

    async def Forecast(self, request, context):
        async def work(scope: RpcScope):
            call = scope.call("forecast")
            gateway = scope.gateway
            resp = await gateway.pipeline("forecast").forecast(gateway, forecast_request(request), call)
            return to_message(resp, triserve_pb2.ForecastResponse())

        return await handle(context, self.gateway, work, "Triserve/Forecast")

    async def Detect(self, request, context):
        async def work(scope: RpcScope):
            call = scope.call("detection")
            opts = detect_options(request)
            resp = await detect_encoded(scope.gateway, list(request.images), opts, call)
            return to_message(resp, triserve_pb2.DetectResponse())

        return await handle(context, self.gateway, work, "Triserve/Detect")
