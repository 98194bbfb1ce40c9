"""Schemathesis checks for triserve's API contract, shared by tests/services/test_schemathesis.py and
scripts/drills/schemathesis_run.py (loaded there through SCHEMATHESIS_HOOKS=scripts.drills.api_checks).

  schema_conformance_2xx - a 2xx body matches the response schema documented in /openapi.json;
  error_model_on_4xx     - every 4xx body is {"error": {"code", "message", "details", "request_id"}};
plus schemathesis' own not_a_server_error (no 5xx).
"""
from __future__ import annotations

import json

import schemathesis
from schemathesis.specs.openapi.checks import response_schema_conformance

ERROR_KEYS = {"code", "message", "details", "request_id"}
SELECTED_GET = {"/v1/models"}


def selected(method: str, path: str) -> bool:
    """The operations under test: every POST under /v1/ and GET /v1/models."""
    return path.startswith("/v1/") and (method.upper() == "POST" or (method.upper() == "GET" and path in SELECTED_GET))


@schemathesis.check
def schema_conformance_2xx(ctx, response, case):
    if 200 <= response.status_code < 300:
        return response_schema_conformance(ctx, response, case)
    return None


@schemathesis.check
def error_model_on_4xx(ctx, response, case):
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"{response.status_code} body is not JSON: {response.content[:200]!r}") from None
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        raise AssertionError(f"{response.status_code} body has no 'error' object: {str(body)[:300]}")
    missing = ERROR_KEYS - set(err)
    if missing:
        raise AssertionError(f"{response.status_code} error body lacks {sorted(missing)}: {str(body)[:300]}")
    for key in ("code", "message", "request_id"):
        if not isinstance(err[key], str) or not err[key]:
            raise AssertionError(f"{response.status_code} error.{key} is not a non-empty string: {str(body)[:300]}")
    return None


CHECKS = [schemathesis.checks.not_a_server_error, schema_conformance_2xx, error_model_on_4xx]
