"""`triserve rollout` (triserve/rollout.py): each command line's admin request, the key and URL from the environment,
and what an operator sees when the service is unreachable or answers something else than JSON; against
httpx.MockTransport. The same command against a real server: tests/services/test_rollout.py."""
from __future__ import annotations

import json

import httpx
import pytest

from triserve import rollout


def run(argv: list[str], answer: httpx.Response | None = None) -> tuple[int, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer if answer is not None else httpx.Response(200, json={"ok": True})

    return rollout.main(argv, transport=httpx.MockTransport(handler)), seen


@pytest.mark.parametrize("argv, method, path, body", [
    (["status"], "GET", "/admin/models", None),
    (["promote", "text", "1.1.0"], "POST", "/admin/models/text/promote", {"ref": "1.1.0", "alias": "stable"}),
    (["promote", "text", "canary", "--alias", "prod"], "POST", "/admin/models/text/promote",
     {"ref": "canary", "alias": "prod"}),
    (["rollback", "text"], "POST", "/admin/models/text/rollback", {"alias": "stable"}),
    (["canary", "text", "1.1.0", "--weight", "0.25"], "POST", "/admin/models/text/canary",
     {"ref": "1.1.0", "weight": 0.25}),
    (["canary", "text", "--off"], "DELETE", "/admin/models/text/canary", None),
    (["shadow", "text", "1.1.0"], "POST", "/admin/models/text/shadow", {"ref": "1.1.0"}),
    (["shadow", "text", "--off"], "DELETE", "/admin/models/text/shadow", None),
])
def test_each_command_is_one_admin_request(argv, method, path, body, monkeypatch):
    monkeypatch.setenv("TRISERVE_ADMIN_KEY", "k-env")
    monkeypatch.setenv("TRISERVE_URL", "http://svc.example:8080/")
    code, (request,) = run(argv)
    assert code == 0
    assert (request.method, str(request.url)) == (method, f"http://svc.example:8080{path}")
    assert request.headers["X-API-Key"] == "k-env"
    assert (json.loads(request.content) if request.content else None) == body


def test_options_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("TRISERVE_ADMIN_KEY", "k-env")
    _, (request,) = run(["--url", "https://other:1", "--api-key", "k-opt", "status"])
    assert str(request.url) == "https://other:1/admin/models" and request.headers["X-API-Key"] == "k-opt"


def test_a_canary_without_a_ref_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        run(["canary", "text"])
    assert exc.value.code == 2 and "canary needs a ref (or --off)" in capsys.readouterr().err


def test_status_prints_the_answer_and_one_split_line_per_slot(capsys):
    routing = {"text": {"active": "1.0.0", "canary": {"version": "1.1.0", "weight": 0.3},
                        "split": {"total": 10, "requests": {"1.0.0": 7, "1.1.0": 3}, "since": 0}}}
    code, _ = run(["status"], httpx.Response(200, json=routing))
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out) == routing
    assert "text: active 1.0.0; 1.0.0 7 (70.0%), canary 1.1.0 3 (30.0%, weight 0.3); 10 requests since" in err
    assert "status: HTTP 200 in " in err


def test_a_refusal_exits_1_with_the_services_error(capsys):
    error = {"error": {"code": "unauthorized", "message": "an admin key is required"}}
    code, _ = run(["rollback", "text"], httpx.Response(401, json=error))
    out, err = capsys.readouterr()
    assert code == 1 and json.loads(out) == error and "rollback: HTTP 401 in " in err


def test_an_answer_that_is_not_json_is_shown_as_is(capsys):
    code, _ = run(["status"], httpx.Response(502, text="<html>bad gateway</html>"))
    out, err = capsys.readouterr()
    assert code == 1 and "<html>bad gateway</html>" in out and "status: HTTP 502" in err


def test_an_unreachable_service_is_one_line_not_a_traceback(capsys):
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    code = rollout.main(["--url", "http://127.0.0.1:9", "status"], transport=httpx.MockTransport(refuse))
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip() == ("triserve rollout status: GET http://127.0.0.1:9/admin/models failed: ConnectError: "
                           "connection refused")
