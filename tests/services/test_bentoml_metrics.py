"""services/bentoml_metrics.py in-process: the route template of a path on the gateway's own route table (the served
10,000-request check is tests/services/test_metrics_cardinality.py)."""
from __future__ import annotations

import pytest
from _bentoml_impl.server.mount import PassiveMount
from bentoml._internal.server.http import instruments
from starlette.routing import Route

from services.bentoml_metrics import UNMATCHED, RouteLabelledTrafficMetrics, route_table, route_template


@pytest.fixture(scope="module")
def table():
    from services.gateway import Gateway, app

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
