"""kernel/lifecycle.serve: the one request lifecycle every family runs through, with a family of plain hooks and a
fake runner call (triserve.kernel.routing.inference.run_task is exercised end to end by the served tests)."""
from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import BaseModel

from tests.families.hooks import view
from triserve.configs.deployments import Deployment
from triserve.kernel import lifecycle
from triserve.kernel.call import CallContext
from triserve.kernel.errors import ApiError
from triserve.kernel.family import Family, FamilyApi, OipSurface, RestRoute
from triserve.kernel.protection.access import Client
from triserve.kernel.protection.deadlines import Deadline
from triserve.kernel.request_context import Timings
from triserve.kernel.schemas import ModelInfo, ServedBy
from triserve.kernel.served import RunnerResult, ServedModel


class Body(BaseModel):
    values: list[int]
    model: str = "auto"


class Panel(Body):
    pass


class Answered(ServedBy):
    doubled: list[int]


class PanelAnswered(Answered):
    calls: int


class NoOip(OipSurface):
    def tensor_items(self, view, served, arrays, batch_cap):
        return []


class Doubler(Family):
    """Items are the values; the 'model' doubles them; a panel goes in parts of two."""

    name = "doubler"
    api = FamilyApi(request_model=Body, response_model=Answered, grpc_method="", oip=NoOip("", (), (), ()),
                    routes=(RestRoute("/v1/double", "application/json", Body, "double"),
                            RestRoute("/v1/double/panel", "application/json", Panel, "double many",
                                      response=PanelAnswered)))

    def __init__(self):
        self.steps: list[str] = []

    def validate(self, view, request):
        self.steps.append("validate")
        if any(v < 0 for v in request.values):
            raise ApiError(422, "negative", "no negative values")
        return list(request.values)

    def parts(self, view, work):
        return [work[i: i + 2] for i in range(0, len(work), 2)] if len(work) > 2 else [work]

    def items(self, view, work, model):
        self.steps.append(f"items {model.slot}")
        return [np.array(v) for v in work], len(work)

    def respond(self, view, request, work, answers):
        self.steps.append("respond")
        doubled = [int(y) for a in answers for y in a.result.outputs]
        assert [a.state for a in answers] == [len(a.part) for a in answers]
        return {"doubled": doubled, **({"calls": len(answers)} if isinstance(request, Panel) else {})}

    def check_outputs(self, manifest, outputs):
        pass

    def agreement(self, manifest, served, shadow):
        return 1.0


@pytest.fixture
def fake_runner(monkeypatch):
    calls = []

    async def run_task(host, dep, items_for, choice, clock, deadline, **kw):
        served = ServedModel("d", "1", Path("."), None)  # type: ignore[arg-type]
        xs = items_for(served)
        calls.append((choice, len(xs)))
        degraded = len(calls) == 2  # the second call of a request answers from the fallback
        return RunnerResult(outputs=[2 * x for x in xs], model="m", version="1", infer_ms=1.5, batch=len(calls) + 3,
                            slot="d", degraded=degraded, degraded_reason="overload" if degraded else None,
                            served=served)

    monkeypatch.setattr(lifecycle, "run_task", run_task)
    return calls


def host():
    capacity = []
    return SimpleNamespace(protection=SimpleNamespace(access=SimpleNamespace(
        capacity=lambda dep, fam: capacity.append(dep))), capacity=capacity)


def call():
    return CallContext(request_id="r1", deadline=Deadline.from_budget(1000),
                       client=Client("addr:127.0.0.1", False, 10.0))


def serve(fam, request, h=None):
    dep = Deployment.model_construct(name="d", family="doubler")
    return asyncio.run(lifecycle.serve(h or host(), dep, fam, view(None), request, call()))


def test_one_call_gets_the_envelope_and_the_family_fields(fake_runner):
    fam = Doubler()
    out = serve(fam, Body(values=[1, 2], model="primary"))
    assert isinstance(out, Answered) and out.doubled == [2, 4]
    assert (out.request_id, out.deployment, out.model, out.degraded) == ("r1", "d", ModelInfo(name="m", version="1"),
                                                                        False)
    assert isinstance(out.timings, Timings) and out.timings.infer_ms <= 1.5
    assert fake_runner == [("primary", 2)]  # the request's model choice reaches the runner call
    assert fam.steps == ["validate", "items d", "respond"]


def test_parts_are_runner_calls_in_order_and_the_envelope_sums_them(fake_runner):
    out = serve(Doubler(), Panel(values=[1, 2, 3, 4, 5]))
    assert isinstance(out, PanelAnswered)  # the route's response model
    assert out.doubled == [2, 4, 6, 8, 10] and out.calls == 3
    assert out.degraded and out.degraded_reason == "overload"  # any part degraded: the answer says so
    assert fake_runner == [("auto", 2), ("auto", 2), ("auto", 1)]


def test_a_refused_request_reaches_neither_capacity_nor_the_runner(fake_runner):
    h = host()
    with pytest.raises(ApiError) as err:
        serve(Doubler(), Body(values=[1, -1]), h)
    assert err.value.code == "negative" and h.capacity == [] and fake_runner == []


def test_response_model_follows_the_route_of_the_body():
    fam = Doubler()
    assert lifecycle.response_model(fam, Panel(values=[1])) is PanelAnswered
    assert lifecycle.response_model(fam, Body(values=[1])) is Answered
