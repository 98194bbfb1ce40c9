"""The typed gRPC task APIs (triserve.v1.Triserve): each request becomes the REST request model and runs through the
same pipeline method as /v1/*, and the REST response model is copied field by field into the response message.

Proto3 `optional` fields that are unset are left out, so the REST defaults apply (top_k 3, horizon 12, ...).
"""
from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from pydantic import BaseModel

import families
from services.protocols.generated import triserve_pb2, triserve_pb2_grpc
from services.protocols.grpc_common import RpcScope, handle

SERVICE_NAME = triserve_pb2.DESCRIPTOR.services_by_name["Triserve"].full_name
_CHOICES: dict[int, str] = {triserve_pb2.MODEL_CHOICE_AUTO: "auto", triserve_pb2.MODEL_CHOICE_PRIMARY: "primary",
            triserve_pb2.MODEL_CHOICE_FALLBACK: "fallback"}


def model_choice(value: int) -> str:
    # An unknown enum number stays unknown, so the request model refuses it like any other bad value.
    return _CHOICES.get(value, f"unknown_model_choice_{value}")


def set_fields(message, names: tuple[str, ...]) -> dict[str, Any]:
    """The proto3 optional fields that are set (unset ones take the REST model's defaults)."""
    return {n: getattr(message, n) for n in names if message.HasField(n)}


def to_message(response: BaseModel, message):
    """A REST response model -> the proto message with the same field names (None fields left unset)."""
    json_format.ParseDict(response.model_dump(mode="json", exclude_none=True), message, ignore_unknown_fields=True)
    return message


def _method(family_name: str):
    """The family's RPC: request message -> REST request model -> the family's pipeline -> response message."""
    fam = families.family(family_name)
    response_type = getattr(triserve_pb2, f"{fam.grpc_method}Response")

    async def rpc(self, request, context):
        async def work(scope: RpcScope):
            call = scope.call(fam.name)
            resp = await fam.handle(scope.ctx, fam.grpc_request(request), call)
            return to_message(resp, response_type())

        return await handle(context, self.gateway, work, f"Triserve/{fam.grpc_method}")

    rpc.__name__ = fam.grpc_method
    return rpc


class TriserveServicer(triserve_pb2_grpc.TriserveServicer):
    """One method per family, as the family declares it (families/<family>/family.py: grpc_method)."""

    def __init__(self, gateway):
        self.gateway = gateway


for _name in families.names():
    setattr(TriserveServicer, families.family(_name).grpc_method, _method(_name))
