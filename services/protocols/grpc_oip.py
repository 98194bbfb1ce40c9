"""Open Inference Protocol v2 over gRPC (inference.GRPCInferenceService): protobuf <-> the core in oip.py.

Inputs may come as raw_input_contents (what tritonclient sends) or typed `contents`; outputs are always returned in
raw_output_contents (what tritonclient reads). Request parameters map to Python values (bool, int, float, str).
Triton extensions: ModelConfig (the configuration oip.model_config builds, parsed into the message),
ModelStatistics (oip.statistics' JSON parsed into the message; an empty name: every model) and RepositoryIndex
(`ready` filters; `repository_name` is ignored: there is one repository).

Note: this module registers the standard `inference.*` message names in protobuf's default descriptor pool; a process
that also imports tritonclient.grpc (which registers the same names) cannot import it. Clients use their own stubs.
"""
from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from triserve.kernel.errors import ApiError
from triserve.services.protocols import oip, oip_codec
from triserve.services.protocols.generated import grpc_predict_v2_pb2 as pb
from triserve.services.protocols.generated import grpc_predict_v2_pb2_grpc as pb_grpc
from triserve.services.protocols.grpc_common import RpcScope, handle

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
CONTENTS_FIELD = {
    "BOOL": "bool_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}
_INT64_MAX = 2**63 - 1


def param_value(p: pb.InferParameter) -> Any:
    which = p.WhichOneof("parameter_choice")
    return getattr(p, which) if which else None


def set_param(p: pb.InferParameter, value: Any) -> None:
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        if value > _INT64_MAX:
            p.uint64_param = value
        else:
            p.int64_param = value
    elif isinstance(value, float):
        p.double_param = value
    elif isinstance(value, str):
        p.string_param = value
    else:
        p.string_param = json.dumps(value, default=str)


def _params(entries) -> dict[str, Any]:
    return {k: param_value(v) for k, v in entries.items()}


def request_from_pb(msg: pb.ModelInferRequest) -> oip_codec.InferRequest:
    raw = list(msg.raw_input_contents)
    if raw and len(raw) != len(msg.inputs):
        raise ApiError(400, "invalid_request", "raw_input_contents must hold exactly one entry per input",
                       {"inputs": len(msg.inputs), "raw_input_contents": len(raw)})
    inputs = []
    for i, t in enumerate(msg.inputs):
        shape = [int(d) for d in t.shape]
        if raw:
            data = oip_codec.array_from_raw(t.name, t.datatype, shape, raw[i])
        else:
            field = CONTENTS_FIELD.get(t.datatype)
            if field is not None:
                data = oip_codec.array_from_values(t.name, t.datatype, shape, list(getattr(t.contents, field)))
            elif t.datatype in oip_codec.DATATYPES:
                raise ApiError(400, "invalid_request", f"input {t.name!r}: {t.datatype} needs raw_input_contents",
                               {"input": t.name})
            else:
                data = oip_codec.array_from_values(t.name, t.datatype, shape, [])  # raises unsupported_datatype
        inputs.append(oip_codec.Tensor(t.name, t.datatype, shape, data, _params(t.parameters)))
    outputs = [oip_codec.RequestedOutput(o.name, _params(o.parameters)) for o in msg.outputs] or None
    return oip_codec.InferRequest(model_name=msg.model_name, model_version=msg.model_version, id=msg.id or None,
                            inputs=inputs, outputs=outputs, parameters=_params(msg.parameters))


def response_to_pb(resp: oip_codec.InferResponse) -> pb.ModelInferResponse:
    msg = pb.ModelInferResponse(model_name=resp.model_name, model_version=resp.model_version, id=resp.id or "")
    for k, v in resp.parameters.items():
        set_param(msg.parameters[k], v)
    for t in resp.outputs:
        msg.outputs.add(name=t.name, datatype=t.datatype, shape=[int(d) for d in t.shape])
        msg.raw_output_contents.append(oip_codec.raw_of(t))
    return msg


def metadata_to_pb(meta: dict) -> pb.ModelMetadataResponse:
    msg = pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"])
    for t in meta["inputs"]:
        msg.inputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
    for t in meta["outputs"]:
        msg.outputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
    return msg


def config_to_pb(doc: dict) -> pb.ModelConfigResponse:
    """Triton model-configuration JSON -> the message (field names and enum names are the proto's)."""
    return pb.ModelConfigResponse(config=json_format.ParseDict(doc, pb.ModelConfig()))


def statistics_to_pb(model_stats: list[dict]) -> pb.ModelStatisticsResponse:
    """Triton's statistics JSON (the HTTP body's model_stats) -> the message (same field names)."""
    return json_format.ParseDict({"model_stats": model_stats}, pb.ModelStatisticsResponse())


def index_to_pb(index: list[dict]) -> pb.RepositoryIndexResponse:
    msg = pb.RepositoryIndexResponse()
    for i in index:
        msg.models.add(name=i["name"], version=i["version"], state=i["state"], reason=i.get("reason", ""))
    return msg


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, gateway):
        self.gateway = gateway

    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=await oip.server_ready(self.gateway))

    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(**oip.server_metadata())

    async def ModelMetadata(self, request, context):
        async def work(scope: RpcScope):
            return metadata_to_pb(oip.model_metadata(await oip.resolve(scope.ctx, request.name, request.version)))

        return await handle(context, self.gateway, work, "ModelMetadata")

    async def ModelReady(self, request, context):
        async def work(scope: RpcScope):
            entry = await oip.resolve(scope.ctx, request.name, request.version)
            return pb.ModelReadyResponse(ready=await oip.model_ready(self.gateway, entry))

        return await handle(context, self.gateway, work, "ModelReady")

    async def ModelInfer(self, request, context):
        async def work(scope: RpcScope):
            ctx = scope.ctx
            entry = await oip.resolve(ctx, request.model_name, request.model_version)
            call = scope.call(entry.family)
            resp = await oip.infer(ctx, entry, request_from_pb(request), call)
            return response_to_pb(resp)

        return await handle(context, self.gateway, work, "ModelInfer")

    async def ModelConfig(self, request, context):
        async def work(scope: RpcScope):
            ctx = scope.ctx
            return config_to_pb(oip.model_config(ctx, await oip.resolve(ctx, request.name, request.version)))

        return await handle(context, self.gateway, work, "ModelConfig")

    async def ModelStatistics(self, request, context):
        async def work(scope: RpcScope):
            return statistics_to_pb(await oip.statistics(scope.ctx, request.name, request.version))

        return await handle(context, self.gateway, work, "ModelStatistics")

    async def RepositoryIndex(self, request, context):
        async def work(scope: RpcScope):
            return index_to_pb(await oip.repository_index(scope.ctx, self.gateway, ready_only=request.ready))

        return await handle(context, self.gateway, work, "RepositoryIndex")
