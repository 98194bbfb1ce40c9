"""The console's routes without a browser: the page and its assets with a CSP that forbids inline script, nothing
outside the asset set served, the setting that turns the console off, markup free of inline script and style, and
the summary's totals equal to what /metrics exports on a real server."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from triserve.services.console import mount
from triserve.services.console.router import ASSETS, STATIC
from triserve.services.http_errors import install_error_handlers


def app(enabled: bool = True) -> TestClient:
    api = FastAPI()
    install_error_handlers(api)
    mount(api, enabled)
    return TestClient(api)


def test_page_and_assets_carry_a_csp_without_inline_script():
    client = app()
    moved = client.get("/console", follow_redirects=False)
    assert moved.status_code == 307 and moved.headers["location"] == "/console/"
    page = client.get("/console/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "unsafe" not in csp and "default-src 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    for name in ASSETS:
        asset = client.get(f"/console/static/{name}")
        assert asset.status_code == 200 and asset.headers["content-security-policy"] == csp, name
    assert client.get("/console/static/app.js").headers["content-type"].startswith("text/javascript")


def test_nothing_but_the_assets_is_served():
    client = app()
    for name in ("router.py", "..%2Frouter.py", "missing.js", "%2E%2E%2F__init__.py"):
        answer = client.get(f"/console/static/{name}")
        assert answer.status_code == 404, name
    unknown = client.get("/console/static/missing.js").json()["error"]
    assert unknown["code"] == "not_found" and "app.js" in unknown["details"]["assets"]


def test_the_setting_turns_the_console_off():
    client = app(enabled=False)
    assert client.get("/console/").status_code == 404
    assert client.get("/console/static/app.js").status_code == 404
    assert client.get("/console/api/summary").status_code == 404


class Markup(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts: list[dict] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag, attrs):
        named = dict(attrs)
        if tag == "script":
            self.scripts.append(named)
        self.inline += [f"{tag}[{k}]" for k in named if k == "style" or k.startswith("on")]

    def handle_data(self, data):
        if self.scripts and self.lasttag == "script" and data.strip():
            self.inline.append("script body")


def test_markup_and_scripts_use_no_inline_code_or_markup_sinks():
    html = Markup()
    html.feed((STATIC / "index.html").read_text())
    assert html.scripts and all(s.get("src", "").startswith("/console/static/") for s in html.scripts)
    assert html.inline == []
    for script in STATIC.glob("*.js"):
        source = script.read_text()
        # data reaches the page through textContent / createTextNode only
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function",
                             source), script.name
        for imported in re.findall(r'from "\./([\w.]+)"', source):
            assert imported in ASSETS, (script.name, imported)


def metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_summary_totals_equal_the_servers_metrics(server):
    for text in ("book a flight", "what is my balance"):
        httpx.post(f"{server.url}/v1/classify", json={"texts": [text]}, timeout=30).raise_for_status()
    summary = httpx.get(f"{server.url}/console/api/summary", timeout=10)
    assert summary.status_code == 200 and "script-src 'self'" in summary.headers["content-security-policy"]
    text = summary.json()["deployments"]["text"]
    assert text["requests"] == metric(server.url, "triserve_requests_total", deployment="text") >= 2
    assert text["ok"] == metric(server.url, "triserve_requests_total", deployment="text", status="200") >= 2
    assert text["latency"]["count"] == metric(server.url, "triserve_stage_seconds_count", deployment="text",
                                              stage="total")
    assert text["latency"]["buckets"][-1] == ["+Inf", text["latency"]["count"]]
    assert 0 < text["latency"]["p50_ms"] <= text["latency"]["p99_ms"]
