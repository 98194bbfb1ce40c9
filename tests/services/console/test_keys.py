"""The console with require_key_for_inference on (conftest.py's server), in a real headless Chromium: without a key
every page shows the server's refusal and the console's own data route refuses too (it answers nothing the API
would refuse); the inference key typed into the page's header is sent as the X-API-Key header (never in a URL or a
cookie), held in the tab's sessionStorage until Forget, and the try-its then answer."""
from __future__ import annotations

import pytest

from tests.services.console.helpers import USER_KEY, api
from triserve.services.console.router import router

pytestmark = pytest.mark.timeout(300)


def test_the_console_routes_refuse_what_the_api_refuses(console_server):
    data_routes = [r.path for r in router.routes if r.path.startswith("/console/api/")]
    assert data_routes == ["/console/api/summary"]
    for path in data_routes:
        refused = api(console_server.url, "GET", path, key=None)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized", path
        assert api(console_server.url, "GET", path, key="not-a-key").status_code == 401, path
        # the same rule as /metrics: what /metrics refuses, the console's figures refuse
        assert api(console_server.url, "GET", "/metrics", key=None).status_code == 401
        assert api(console_server.url, "GET", path).status_code == 200, path
    # the page and its scripts hold no data: served without a key, like any static page
    for path in ("/console/", "/console/static/app.js"):
        assert api(console_server.url, "GET", path, key=None).status_code == 200, path


def test_try_it_needs_the_inference_key_typed_into_the_page(tab, console_server):
    refusal = api(console_server.url, "POST", "/v1/classify", key=None, json={"texts": ["hi"]})
    assert refusal.status_code == 401
    error = refusal.json()["error"]
    shown = f"401 {error['code']}: {error['message']}"

    listing = api(console_server.url, "GET", "/v1/models", key=None)  # metadata needs the key too
    assert listing.status_code == 401
    listed = f"401 {listing.json()['error']['code']}: {listing.json()['error']['message']}"

    t = tab(keys="none")
    t.page.goto("/console/#/repository")
    t.page.wait_for_selector("#repo-status[data-state=refused]")
    assert t.page.text_content("#repo-status") == f"could not read /v1/models: {listed}"
    assert t.page.locator("[data-deployment]").count() == 0

    t.page.goto("/console/#/try/text")
    t.page.wait_for_selector("#tryit-status[data-state=refused]")
    assert t.page.text_content("#tryit-status") == f"could not list the deployments: {listed}"
    with t.page.expect_response(lambda r: r.url.endswith("/v1/classify")) as answer:
        t.page.click("#run")
    t.page.wait_for_selector("#tryit-status[data-state=error]")
    assert answer.value.status == 401
    assert t.page.text_content("#tryit-error") == shown  # the server's refusal, as it answered

    # the key typed into the header: the deployments are listed, the run answers, what was typed stays
    t.page.fill("#texts", "book a flight to rome")
    t.page.fill("#api-key", USER_KEY)
    t.page.press("#api-key", "Enter")
    t.page.wait_for_selector("#deployment option[value=text]", state="attached")
    assert t.page.input_value("#texts") == "book a flight to rome"
    with t.page.expect_response(lambda r: r.url.endswith("/v1/classify")) as answer:
        t.page.click("#run")
    t.page.wait_for_selector("#tryit-status[data-state=done]")
    assert answer.value.status == 200 and answer.value.request.headers["x-api-key"] == USER_KEY
    assert t.page.locator("#tryit-results .label").count() > 0
    assert 'X-API-Key: $TRISERVE_KEY' in t.page.text_content("[data-snippet=curl]")  # never the key itself
    assert USER_KEY not in t.page.text_content("main")
    assert t.page.evaluate("sessionStorage.getItem('triserve.apiKey')") == USER_KEY

    # the repository page reads with it too
    t.page.goto("/console/#/repository")
    t.page.wait_for_selector("#repo-status[data-refreshes]")
    assert t.page.locator("[data-deployment=text]").count() == 1

    # Forget: the key leaves the tab; the next call is refused again
    t.page.click("#forget-keys")
    assert t.page.evaluate("sessionStorage.length") == 0 and t.page.input_value("#api-key") == ""
    t.page.goto("/console/#/try/text")
    t.page.wait_for_selector("#tryit-status[data-state=refused]")

    keyed = [(m, u, k) for m, u, k in t.sent if k is not None]
    assert keyed and all(k == USER_KEY for _, _, k in keyed)
    assert not any(USER_KEY in u for _, u, _ in t.sent)
    assert t.context.cookies() == []
    assert t.errors_besides(401) == []
