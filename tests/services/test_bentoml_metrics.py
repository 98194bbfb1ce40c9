"""services/bentoml_metrics.py in-process: the route template of a path on the gateway's own route table (the served
10,000-request check is tests/services/test_metrics_cardinality.py)."""
from __future__ import annotations

import pytest
from _bentoml_impl.server.mount import PassiveMount
from bentoml._internal.server.http import instruments
from starlette.routing import Route

from triserve.services.bentoml_metrics import UNMATCHED, RouteLabelledTrafficMetrics, route_table, route_template


@pytest.fixture(scope="module")
def table():
    from triserve.services.gateway import Gateway, app

    assert instruments.RunnerTrafficMetricsMiddleware is RouteLabelledTrafficMetrics  # installed by the import
    (mounted, path, name), = Gateway.mount_apps
    assert mounted is app
    # BentoML's own routes first, then the gateway's FastAPI app, mounted as BentoML mounts it
    own = [Route("/livez", lambda r: None), Route("/metrics", lambda r: None)]
    return route_table([*own, PassiveMount(path, app, name=name)])


@pytest.mark.parametrize("method, path, template", [
    ("POST", "/v1/classify", "/v1/classify"),
    ("POST", "/v1/detect/upload", "/v1/detect/upload"),
    ("GET", "/livez", "/livez"),
    ("POST", "/admin/deployments/anything/load", "/admin/deployments/{name}/load"),
    ("PUT", "/admin/deployments/__dict__", "/admin/deployments/{name}"),
    ("POST", "/v2/models/junk/versions/7/infer", "/v2/models/{name}/versions/{version}/infer"),
    ("GET", "/v2/models/stats", "/v2/models/stats"),  # a literal route before /v2/models/{name}
    ("GET", "/v1/classify", "/v1/classify"),  # the wrong method: still the route's template (405)
    ("GET", "/v2/no/such/thing", "/v2/{path:path}"),  # OIP's own 404 route
])
def test_paths_map_to_their_route_template(table, method, path, template):
    assert route_template(table, method, path) == template


@pytest.mark.parametrize("path", ["/", "/junk", "/__dict__/load", "/v1", "/admin/deployments/a/b/c/d"])
def test_paths_no_route_takes_have_no_template(table, path):
    assert route_template(table, "GET", path) is None
    assert UNMATCHED == "unmatched"


def test_bentomls_middleware_sees_the_template_and_the_app_the_real_path():
    import asyncio

    from starlette.applications import Starlette

    from triserve.services.bentoml_metrics import _restore_path

    seen: dict[str, str] = {}

    async def endpoint_app(scope, receive, send):
        seen["app"] = scope["path"]

    starlette = Starlette(routes=[Route("/admin/deployments/{name}", lambda r: None, methods=["PUT"])])
    middleware = RouteLabelledTrafficMetrics(endpoint_app)
    inner = _restore_path(endpoint_app)

    async def bentoml_metrics(scope, receive, send):  # stands in for BentoML's: records the label it would use
        seen["label"] = scope["path"]
        await inner(scope, receive, send)

    middleware.metrics = bentoml_metrics
    for path, label in (("/admin/deployments/__dict__", "/admin/deployments/{name}"), ("/junk/1", UNMATCHED)):
        scope = {"type": "http", "method": "PUT", "path": path, "root_path": "", "app": starlette}
        asyncio.run(middleware(scope, None, None))
        assert seen == {"label": label, "app": path}
