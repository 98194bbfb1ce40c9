"""Rollouts from the console's page in a real headless Chromium (conftest.py's server): with the admin key each change
(canary with a weight, shadow on and off, promote, rollback, adding a deployment from a registry version and removing
it) asks its confirmation, shows the server's answer, and shows in the API afterwards; a dismissed confirmation sends
nothing, a refusal shows the server's error; without an admin key (or with a key the admin routes refuse) the page is
read-only. The admin key travels as a header only, never in a URL or a cookie."""
from __future__ import annotations

import json

import pytest

from scripts.console_screenshots import FORECAST_CANARY, run_page
from tests.services.console.helpers import ADMIN_KEY, USER_KEY, api, deployments, until

pytestmark = pytest.mark.timeout(300)


def routing(url: str) -> dict:
    answer = api(url, "GET", "/admin/models", key=ADMIN_KEY)
    answer.raise_for_status()
    return answer.json()


def field(t, slot: str, name: str) -> str:
    return t.page.locator(f"[data-slot={slot}] [data-field={name}]").text_content() or ""


def click(t, slot: str, button: str, path: str, **inputs: str):
    """Fill a slot card's inputs, press its button, accept the confirmation: (status, body) of the admin call as the
    browser received it, after the page shows it."""
    card = t.page.locator(f"[data-slot={slot}]")
    for name, value in inputs.items():
        card.locator(f"input[name={name}]").fill(value)
    with t.page.expect_response(lambda r: r.url.endswith(path) and r.request.method != "GET") as answer:
        card.locator("button", has_text=button).click()
    t.page.wait_for_selector(f"#rollout-answer [data-status='{answer.value.status}']")
    return answer.value.status, answer.value.json()


def shown_answer(t) -> dict:
    """The server's answer as the page shows it (the JSON under the status line)."""
    return json.loads(t.page.text_content("#rollout-answer pre") or "null")


def admin_tab(tab):
    t = tab(keys="admin")
    run_page(t.page, "rollouts")
    assert "Admin key set" in t.page.text_content("#rollouts-mode")
    return t


def assert_key_as_header_only(t) -> None:
    admin_calls = [(m, u, k) for m, u, k in t.sent if "/admin/" in u]
    assert admin_calls and all(k == ADMIN_KEY for _, _, k in admin_calls)
    assert not any(ADMIN_KEY in u or USER_KEY in u for _, u, _ in t.sent)
    assert t.context.cookies() == []


def test_read_only_without_an_admin_key_or_with_one_the_api_refuses(tab):
    t = tab(keys="user")
    run_page(t.page, "rollouts")
    assert "Read-only" in t.page.text_content("#rollouts-mode")
    assert t.page.locator("[data-slot]").count() >= 2
    assert t.page.locator("[data-slot] button").count() > 0
    assert t.page.locator("[data-slot] button:not([disabled]), [data-slot] input:not([disabled])").count() == 0
    assert t.page.locator("#deployment-name").count() == 0  # no deployment editor at all
    assert not any("/admin/" in u for _, u, _ in t.sent)  # it does not even ask

    # the inference key typed as the admin key: the admin routes refuse it (403), so the page stays read-only
    t.page.fill("#admin-key", USER_KEY)
    t.page.press("#admin-key", "Enter")
    until(lambda: "refused" in t.page.text_content("#rollouts-mode"), what="the refusal on the page")
    assert "403 forbidden" in t.page.text_content("#rollouts-status")
    t.page.wait_for_selector("[data-slot]")
    assert t.page.locator("[data-slot] button:not([disabled])").count() == 0
    assert t.page.locator("#deployment-name").count() == 0
    assert t.errors_besides(403) == []


def test_canary_with_a_weight_then_withdrawn(tab, console_server):
    t = admin_tab(tab)
    status, body = click(t, "forecast", "Set canary", "/admin/models/forecast/canary",
                         **{"canary-ref": FORECAST_CANARY, "canary-weight": "0.25"})
    assert status == 200 and shown_answer(t) == body
    assert t.page.text_content("#rollout-answer strong") == "200 OK"
    assert t.dialogs == [f"Send 25% of forecast to {FORECAST_CANARY}?"]
    assert deployments(console_server.url)["forecast"]["model"]["canary"] == {"version": FORECAST_CANARY,
                                                                              "weight": 0.25}
    until(lambda: field(t, "forecast", "canary").startswith(FORECAST_CANARY), what="the canary on the page")

    status, _ = click(t, "forecast", "Withdraw", "/admin/models/forecast/canary")
    assert status == 200 and t.dialogs[-1] == "Withdraw the canary of forecast?"
    until(lambda: field(t, "forecast", "canary") == "none", what="the canary withdrawn on the page")
    assert deployments(console_server.url)["forecast"]["model"]["canary"] is None
    assert_key_as_header_only(t)
    assert t.errors == []


def test_shadow_on_and_off(tab, console_server):
    t = admin_tab(tab)
    status, body = click(t, "forecast", "Set shadow", "/admin/models/forecast/shadow",
                         **{"shadow-ref": FORECAST_CANARY})
    assert status == 200 and shown_answer(t) == body
    assert t.dialogs == [f"Mirror forecast's traffic to {FORECAST_CANARY}?"]
    assert routing(console_server.url)["forecast"]["shadow"] == FORECAST_CANARY
    until(lambda: field(t, "forecast", "shadow") == FORECAST_CANARY, what="the shadow on the page")

    status, _ = click(t, "forecast", "Stop", "/admin/models/forecast/shadow")
    assert status == 200 and t.dialogs[-1] == "Stop the shadow of forecast?"
    assert not routing(console_server.url)["forecast"].get("shadow")
    until(lambda: field(t, "forecast", "shadow") == "none", what="the shadow stopped on the page")
    assert_key_as_header_only(t)
    assert t.errors == []


def test_promote_then_roll_back(tab, console_server):
    before = deployments(console_server.url)["forecast"]["model"]["version"]
    assert before != FORECAST_CANARY
    t = admin_tab(tab)
    try:
        status, body = click(t, "forecast", "Promote", "/admin/models/forecast/promote",
                             **{"promote-ref": FORECAST_CANARY, "alias": "stable"})
        assert status == 200 and shown_answer(t) == body
        assert t.dialogs == [f"Serve {FORECAST_CANARY} on forecast and move alias stable to it?"]
        assert deployments(console_server.url)["forecast"]["model"]["version"] == FORECAST_CANARY
        until(lambda: field(t, "forecast", "active") == FORECAST_CANARY, what="the promoted version on the page")
        last = routing(console_server.url)["forecast"]["promotions"][-1]
        assert (last["from"], last["to"], last["alias"], last["by"]) == (before, FORECAST_CANARY, "stable",
                                                                     "key:console")

        status, body = click(t, "forecast", "Roll back", "/admin/models/forecast/rollback")
        assert status == 200 and shown_answer(t) == body
        assert t.dialogs[-1] == "Return forecast to what served before its last promote?"
        assert deployments(console_server.url)["forecast"]["model"]["version"] == before
        until(lambda: field(t, "forecast", "active") == before, what="the rolled back version on the page")
        assert routing(console_server.url)["forecast"]["promotions"] == []  # nothing left to undo
    finally:  # the server is shared by the console's test modules
        if deployments(console_server.url)["forecast"]["model"]["version"] != before:
            api(console_server.url, "POST", "/admin/models/forecast/rollback", key=ADMIN_KEY, json={})
    assert_key_as_header_only(t)
    assert t.errors == []


def test_add_a_deployment_from_a_registry_version_and_remove_it(tab, console_server):
    version = deployments(console_server.url)["text"]["model"]["version"]
    t = admin_tab(tab)
    t.page.wait_for_selector("#deployment-name")
    t.page.fill("#deployment-name", "text-copy")
    t.page.fill("#deployment-spec", "{ not json")
    t.page.click("button:has-text('Add / replace')")
    assert "not JSON" in t.page.text_content("#rollout-answer")
    assert t.dialogs == [] and not any(m == "PUT" for m, _, _ in t.sent)
    spec = {"family": "text", "model": {"name": "minilm-intent", "ref": version}, "description": "added from the page"}
    t.page.fill("#deployment-spec", json.dumps(spec))
    try:
        with t.page.expect_response(lambda r: r.url.endswith("/admin/deployments/text-copy")) as answer:
            t.page.click("button:has-text('Add / replace')")
        t.page.wait_for_selector("#rollout-answer [data-status='200']")
        assert t.dialogs == ["Add or replace deployment text-copy (staged, verified, warmed, swapped)?"]
        assert shown_answer(t) == answer.value.json()
        added = deployments(console_server.url)["text-copy"]
        assert (added["family"], added["model"]["name"], added["model"]["version"]) == ("text", "minilm-intent",
                                                                                         version)
        t.page.wait_for_selector("[data-slot=text-copy]")  # the page refreshed after the answer
        served = api(console_server.url, "POST", "/v1/classify", json={"texts": ["hi"], "deployment": "text-copy"})
        assert served.status_code == 200, served.text

        t.page.fill("#deployment-name", "text-copy")  # the refresh rebuilt the editor
        with t.page.expect_response(lambda r: r.url.endswith("/admin/deployments/text-copy")) as answer:
            t.page.click("button:has-text('Remove')")
        t.page.wait_for_selector("#rollout-answer [data-status='200']")
        assert t.dialogs[-1] == "Remove deployment text-copy? Its models unload after in-flight requests."
        assert answer.value.request.method == "DELETE"
        assert "text-copy" not in deployments(console_server.url)
        t.page.wait_for_selector("[data-slot=text-copy]", state="detached")
    finally:
        if "text-copy" in deployments(console_server.url):
            api(console_server.url, "DELETE", "/admin/deployments/text-copy", key=ADMIN_KEY)
    assert_key_as_header_only(t)
    assert t.errors == []


def test_a_dismissed_confirmation_sends_nothing_and_a_refusal_shows_the_servers_error(tab, console_server):
    t = admin_tab(tab)
    t.accept_dialogs = False
    card = t.page.locator("[data-slot=forecast]")
    card.locator("input[name=promote-ref]").fill(FORECAST_CANARY)
    card.locator("button", has_text="Promote").click()
    until(lambda: t.page.text_content("#rollout-answer") == "cancelled", what="the cancellation shown")
    assert len(t.dialogs) == 1 and not any(m == "POST" for m, _, _ in t.sent)
    assert deployments(console_server.url)["forecast"]["model"]["version"] != FORECAST_CANARY

    t.accept_dialogs = True
    status, body = click(t, "forecast", "Set canary", "/admin/models/forecast/canary",
                         **{"canary-ref": "0.0.0-missing", "canary-weight": "0.5"})
    assert status == 409 and body["error"]["code"] == "rollout_failed"
    assert t.page.text_content("#rollout-answer strong") == f"409 rollout_failed: {body['error']['message']}"
    assert shown_answer(t) == body
    assert deployments(console_server.url)["forecast"]["model"]["canary"] is None
    assert t.errors_besides(409) == []
