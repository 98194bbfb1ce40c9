"""The typed gRPC task APIs (triserve.v1.Triserve), one generic adapter for every family: the request message's
fields become the family's request model (`api.request_model`, the same validation as REST), the family pipeline runs
through the kernel (ServingContext.run), and the response model is copied field by field into the response message.

The family declares only its method name (`api.grpc_method`; a route of its own may add one, RestRoute.grpc: the
route's body and response models); the messages are `<Method>Request` / `<Method>Response` in
services/protocols/protos/triserve.proto (a family whose method is not there has no typed method). Field mapping:
repeated fields when non-empty (bytes stay bytes), proto3 `optional` fields only when set (unset ones take the
request model's defaults: top_k 3, horizon 12, ...), enums by their value's name without the enum's prefix,
lower-cased (MODEL_CHOICE_PRIMARY -> "primary"; an unknown number stays unknown, so the request model refuses it like
any other bad value); a map of one-field wrapper messages (map<string, Doubles>) as a dict of lists, a map of scalars
(map<string, string>) as a dict; nested messages
(repeated or not) by the same rules, as dicts.
"""
from __future__ import annotations

import functools
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from pydantic import BaseModel

from triserve import families
from triserve.services.protocols.generated import triserve_pb2, triserve_pb2_grpc
from triserve.services.protocols.grpc_common import RpcScope, handle

SERVICE_NAME = triserve_pb2.DESCRIPTOR.services_by_name["Triserve"].full_name


def _enum_value(field: FieldDescriptor, number: int) -> str:
    enum = field.enum_type
    value = enum.values_by_number.get(number)
    prefix = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(enum.name)).upper() + "_"
    if value is None:
        return f"unknown_{prefix.lower()}{number}"
    return value.name.removeprefix(prefix).lower()


def message_fields(message) -> dict[str, Any]:
    """A request message -> the request model's fields (see the module docstring for the rules)."""
    fields: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            if len(value):  # map<string, Wrapper>: each value's single repeated field (Doubles.values -> list)
                wrapped = field.message_type.fields_by_name["value"].message_type is not None
                fields[field.name] = {k: list(getattr(v, v.DESCRIPTOR.fields[0].name)) if wrapped else v
                                      for k, v in value.items()}
        elif field.is_repeated:
            if len(value):
                nested = field.type == FieldDescriptor.TYPE_MESSAGE
                fields[field.name] = [message_fields(v) for v in value] if nested else list(value)
        elif field.has_presence and not message.HasField(field.name):
            continue
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            fields[field.name] = message_fields(value)
        elif field.type == FieldDescriptor.TYPE_ENUM:
            fields[field.name] = _enum_value(field, value)
        else:
            fields[field.name] = value
    return fields


_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)


@functools.cache
def _has_float_list(descriptor) -> bool:
    """Whether a message (or one nested in it) has a repeated double/float field: only those answers can carry a
    null inside a list, so every other answer skips the walk below (asked once per message type)."""
    return any((f.is_repeated and f.type in _FLOATS)
               or (f.message_type is not None and f.message_type is not descriptor and _has_float_list(f.message_type))
               for f in descriptor.fields)


def _nan_for_null(value: Any) -> Any:
    """JSON's null inside a list (a per-step metric without a scale) -> NaN, quoted as protobuf's JSON parser takes
    it: a repeated double has no null."""
    if isinstance(value, dict):
        return {k: _nan_for_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return ["NaN" if v is None else _nan_for_null(v) for v in value]
    return value


def to_message(response: BaseModel, message):
    """A REST response model -> the proto message with the same field names (None fields left unset, None inside a
    list of numbers NaN)."""
    doc = response.model_dump(mode="json", exclude_none=True)
    json_format.ParseDict(_nan_for_null(doc) if _has_float_list(message.DESCRIPTOR) else doc, message,
                          ignore_unknown_fields=True)
    return message


def _method(family_name: str, method: str, request_model: type[BaseModel]):
    """One RPC: request message -> request model -> the family's pipeline -> response message."""
    fam = families.family(family_name)
    response_type = getattr(triserve_pb2, f"{method}Response")

    async def rpc(self, request, context):
        async def work(scope: RpcScope):
            body = request_model.model_validate(message_fields(request))
            resp = await scope.ctx.run(fam.name, body, scope.call(fam.name))
            return to_message(resp, response_type())

        return await handle(context, self.gateway, work, f"Triserve/{method}")

    rpc.__name__ = method
    return rpc


def methods(family_name: str) -> list[tuple[str, type[BaseModel], type[BaseModel]]]:
    """(method, request model, response model) of every typed RPC the family declares."""
    fam = families.family(family_name)
    return [(fam.api.grpc_method, fam.api.request_model, fam.api.response_model)] + [
        (r.grpc, r.body, r.response or fam.api.response_model) for r in fam.api.routes if r.grpc]


class TriserveServicer(triserve_pb2_grpc.TriserveServicer):
    """The methods the families declare (families/<family>/family.py: api.grpc_method, RestRoute.grpc)."""

    def __init__(self, gateway):
        self.gateway = gateway


# A family whose method is not in triserve.proto (a third-party family's: the proto is this distribution's) has no
# typed method; it is served over REST, OIP (REST and gRPC) and batch like any other.
_METHODS = triserve_pb2.DESCRIPTOR.services_by_name["Triserve"].methods_by_name
for _name in families.names():
    for _rpc, _request, _ in methods(_name):
        if _rpc in _METHODS:
            setattr(TriserveServicer, _rpc, _method(_name, _rpc, _request))
