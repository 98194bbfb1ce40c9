"""Property-based API contract run (schemathesis) against the real server's /openapi.json.

Bounded: every POST under /v1/ and GET /v1/models, 15 positive and 15 negative generated cases per operation, no
Hypothesis deadline, derandomized so CI is reproducible. Checks (scripts/drills/api_checks.py): no 5xx, 2xx bodies
match the documented response schema, every 4xx body is the error model {"error": {"code", "message", "details",
"request_id"}}. The larger run (all schemathesis phases, 200 examples) is scripts/drills/schemathesis_run.py.

Why Hypothesis `@given` over `operation.as_strategy()` instead of `schemathesis.pytest.from_fixture(...)`: the lazy
fixture integration of schemathesis 4.32 reads `request.node._nodeid`, which pytest 9 no longer has.
"""
from __future__ import annotations

import base64
import io

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402 - schemathesis' dependency: after the skip
from hypothesis.errors import Unsatisfiable  # noqa: E402 - schemathesis' dependency: after the skip
from schemathesis import GenerationMode  # noqa: E402 - after the skip

from scripts.drills.api_checks import CHECKS, selected  # noqa: E402 - imports schemathesis: after the skip

MAX_EXAMPLES = 15
EXPECTED = {"POST /v1/detect", "POST /v1/detect/upload", "POST /v1/classify", "POST /v1/forecast", "GET /v1/models"}


@pytest.fixture(scope="module")
def operations(server):
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    ops = []
    for result in schema.get_all_operations():
        op = result.ok()
        if selected(op.method, op.path):
            ops.append(op)
    return ops


def test_selected_operations(operations):
    labels = {f"{op.method.upper()} {op.path}" for op in operations}
    assert EXPECTED <= labels, f"missing from /openapi.json: {sorted(EXPECTED - labels)}"


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
def test_api_contract(server, operations, mode):
    calls: dict[str, int] = {}
    statuses: dict[int, int] = {}
    failures = [failure for op in operations if (failure := _exercise(server, op, mode, calls, statuses))]
    assert not failures, "\n\n".join(failures)
    if mode == GenerationMode.POSITIVE:  # the run really exercised every operation
        assert set(calls) == {f"{op.method.upper()} {op.path}" for op in operations}, calls
    print(f"{mode.value}: calls per operation {calls}, statuses {dict(sorted(statuses.items()))}")


def _exercise(server, op, mode, calls: dict[str, int], statuses: dict[int, int]) -> str | None:
    """The generated cases of one operation, counted into `calls` and `statuses`; its failure report, or None."""
    label = f"{op.method.upper()} {op.path}"

    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink])
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case):
        response = case.call_and_validate(base_url=server.url, checks=CHECKS, timeout=30)
        calls[label] = calls.get(label, 0) + 1
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    try:
        run()
    except Unsatisfiable:
        # nothing to negate (GET /v1/models takes no parameters): no negative case exists
        assert mode == GenerationMode.NEGATIVE and not op.body and not list(op.iter_parameters()), label
    except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - every operation's failure is reported at the end
        # (schemathesis' FailureGroup is a BaseExceptionGroup)
        return f"--- {label} ({mode.value}) ---\n{exc}"
    return None


def _png() -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (96, 64), (30, 30, 30))
    ImageDraw.Draw(img).rectangle([10, 10, 40, 40], fill=(220, 40, 40))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


# Generated cases rarely pass the semantic limits (e.g. 'start' needs 'frequency'), so each 2xx schema is also
# checked here with a valid request.
VALID = {
    "POST /v1/classify": ({"texts": ["what is my account balance", "book a flight"], "top_k": 2}, "application/json"),
    "POST /v1/forecast": ({"values": [340 + 0.1 * i + (i % 12) for i in range(48)], "start": "1990-01-01T00:00:00",
                           "frequency": "MS", "horizon": 6}, "application/json"),
    "POST /v1/detect": ({"images": [{"data": "PNG"}]}, "application/json"),
    "POST /v1/detect/upload": ({"images": ["PNG"]}, "multipart/form-data"),
    "GET /v1/models": (None, None),
}


@pytest.mark.parametrize("label", list(VALID))
def test_valid_request_matches_documented_2xx_schema(server, operations, label):
    method, path = label.split(" ", 1)
    op = next((o for o in operations if o.method.upper() == method and o.path == path), None)
    assert op is not None, f"{label} not in /openapi.json"
    body, media_type = VALID[label]
    if body is not None:
        png = _png()
        if "images" in body and media_type == "application/json":
            body = {"images": [{"data": base64.b64encode(png).decode()}]}
        elif "images" in body:
            body = {"images": [png]}
    case = op.Case(body=body, media_type=media_type) if body is not None else op.Case()
    response = case.call_and_validate(base_url=server.url, checks=CHECKS, timeout=30)
    assert response.status_code == 200, response.text[:500]
