"""The families' REST routes, one generic adapter: each route a family declares (kernel/family.RestRoute) becomes a
FastAPI endpoint that authenticates and rate-limits the caller (inference_guard), builds the request and hands it to
the family pipeline through the kernel (ServingContext.run).

- JSON routes take the declared body model as the request body.
- Multipart routes take the declared model's fields as form fields and the uploaded files (read as bytes) as the
  request field the route names, and build the family's `api.request_model` from both, as typed gRPC and OIP do.

No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations, which name models known
only when the route is built.
"""
import inspect
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, UploadFile
from pydantic import BaseModel, ConfigDict

from triserve import families
from triserve.kernel.call import CallContext
from triserve.kernel.errors import ErrorResponse
from triserve.kernel.family import Family, RestRoute
from triserve.services.gateway_deps import current_context, inference_guard

ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorResponse} for code in (400, 413, 415, 422, 503)}


def _json_endpoint(fam: Family, route: RestRoute):
    body_model = route.body

    async def endpoint(body: body_model, call: CallContext = Depends(inference_guard(fam.name))):  # type: ignore[valid-type]
        return await current_context().run(fam.name, body, call)

    return endpoint


def _multipart_endpoint(fam: Family, route: RestRoute):
    # the form model ignores the files' field (FastAPI hands the whole form to it); unknown form fields are ignored
    # as FastAPI ignores them for single form parameters
    form_model = type(route.body.__name__ + "Form", (route.body,), {"model_config": ConfigDict(extra="ignore")})

    async def endpoint(**params: Any):
        options: BaseModel = params["form"]
        files: list[UploadFile] = params[route.files]
        fields = {**options.model_dump(exclude_unset=True), route.files: [await f.read() for f in files]}
        return await current_context().run(fam.name, fam.api.request_model.model_validate(fields), params["call"])

    keyword = inspect.Parameter.KEYWORD_ONLY
    endpoint.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("form", keyword, annotation=Annotated[form_model, Form()]),
        inspect.Parameter(route.files, keyword, annotation=list[UploadFile],
                          default=File(description=route.files_description)),
        inspect.Parameter("call", keyword, annotation=CallContext, default=Depends(inference_guard(fam.name)))])
    return endpoint


def operation_name(path: str) -> str:
    """A REST route's endpoint name, its OpenAPI operation and BentoML client method (a Python identifier):
    /v1/forecast/panel -> forecast_panel, /v1/classify-image -> classify_image."""
    return path.removeprefix("/v1/").strip("/").replace("/", "_").replace("-", "_")


def family_router(family_name: str) -> APIRouter:
    """The REST endpoints a family declares."""
    fam = families.family(family_name)
    router = APIRouter(tags=[fam.name])
    for route in fam.api.routes:
        build = _multipart_endpoint if route.files else _json_endpoint
        endpoint = build(fam, route)
        endpoint.__name__ = operation_name(route.path)  # operation ids
        router.add_api_route(route.path, endpoint, methods=["POST"], responses=ERRORS, summary=route.summary,
                             response_model=route.response or fam.api.response_model)
    return router
