"""The request lifecycle, run once for every family and transport (KServe's Model.__call__, MLServer's DataPlane):
validate -> capacity -> bind -> items per served version -> runner call(s) with fallback/canary/shadow
(kernel/routing/inference.run_task) -> respond -> the common envelope -> metrics and the request log's outcome.

A family fills the hooks of kernel/family.Family; it never sees the serving context, the admission, the breakers or
the metrics, so a new family cannot forget a step of the lifecycle or take one in the wrong order.
"""
from __future__ import annotations

from typing import Any

from triserve.configs.deployments import Deployment
from triserve.kernel.call import CallContext, bind, finish
from triserve.kernel.family import Answer, DeploymentView, Family
from triserve.kernel.request_context import StageClock
from triserve.kernel.routing.inference import InferenceHost, run_task
from triserve.kernel.schemas import ModelInfo
from triserve.kernel.served import ServedModel
from triserve.observability.metrics import ITEMS, labelled


def response_model(family: Family, request: Any) -> type:
    """The response model of the route whose body the request is (a panel answers a panel), else the family's."""
    for route in family.api.routes:
        if route.response is not None and isinstance(request, route.body):
            return route.response
    return family.api.response_model


async def serve(host: InferenceHost, dep: Deployment, family: Family, view: DeploymentView, request: Any,
                call: CallContext) -> Any:
    """One request to one deployment, from the validated request model to the family's response model."""
    clock = StageClock()
    work = family.validate(view, request)
    host.protection.access.capacity(dep.name, dep.family)
    bind(call, dep.name)
    labelled(ITEMS, dep.name).observe(len(work))
    keep = family.keep(view, request)
    choice = getattr(request, "model", "auto")
    answers: list[Answer] = []
    for part in family.parts(view, work):
        kept: dict[ServedModel, Any] = {}

        def items_for(model: ServedModel, part: Any = part, kept: dict = kept) -> list:
            xs, kept[model] = family.items(view, part, model)
            return xs

        result = await run_task(host, dep, items_for, choice, clock, call.deadline, request_id=call.request_id,
                                route_key=call.route_key, arrived=call.arrived, keep=keep)
        answers.append(Answer(part, result, kept[result.served]))
    fields = family.respond(view, request, work, answers)
    clock.stage("postprocess")
    first = answers[0].result
    degraded = next((a.result for a in answers if a.result.degraded), None)
    response = response_model(family, request)(
        request_id=call.request_id, deployment=dep.name, model=ModelInfo(name=first.model, version=first.version),
        degraded=degraded is not None, degraded_reason=degraded.degraded_reason if degraded else None,
        timings=clock.timings(sum(a.result.infer_ms for a in answers)), **fields)
    return finish(dep.name, response, call, max(a.result.batch for a in answers))
