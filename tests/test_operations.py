"""One operation table (issue 43 part 3): every operation of every registered family x every surface that should offer
it, built from the family registry, so that a family's new operation, or a surface that drops one, fails here.

An operation is a family's JSON REST route, named as its OpenAPI operation and BentoML client method
(triserve.services.protocols.rest.operation_name: /v1/forecast/panel -> forecast_panel); multipart upload routes are the
same
operations over another content type. The surfaces, each read where a user meets it:

    bentoml_schema  the routes of /schema.json of the session's real server (BentoML's Sync/AsyncHTTPClient)
    grpc            the typed gRPC service's methods (triserve.v1.Triserve, the descriptor the server registers)
    oip             the OIP v2 model names the family declares (its api.oip.alias, classify-image for classify_image,
                    and a route's own RestRoute.oip.alias, forecast-panel), answered by the real server
                    (GET /v2/models/<alias>) for every family it serves
    client_sync     triserve_client.TriserveClient's methods
    client_async    triserve_client.AsyncTriserveClient's methods
    client_grpc     triserve_client.grpc.TriserveGrpcClient's and AsyncTriserveGrpcClient's methods (both)
    batch           `triserve batch` commands (triserve.batch.cli.commands(): the families' offline adapters)

KNOWN_GAPS is today's exact set of (operation, surface) pairs without an implementation: closing a gap fails the test
until the pair is removed here, a new gap fails it until it is added with its reason.
"""
from __future__ import annotations

import inspect
import re

import httpx

from triserve import families
from triserve.batch.cli import commands
from triserve.services.protocols.generated import triserve_pb2
from triserve.services.protocols.rest import operation_name
from triserve_client import AsyncTriserveClient, TriserveClient

SURFACES = ("bentoml_schema", "grpc", "oip", "client_sync", "client_async", "client_grpc", "batch")

KNOWN_GAPS: set[tuple[str, str]] = set()  # every operation of every family is on every surface


def operations() -> dict[str, str]:
    """operation -> family, for every JSON route of every registered family."""
    return {operation_name(route.path): name for name in families.names()
            for route in families.family(name).api.routes if not route.files}


def snake(camel: str) -> str:
    """ClassifyImage -> classify_image (a gRPC method's operation)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def methods(*classes: type) -> set[str]:
    """The public methods every one of `classes` has."""
    return set.intersection(*({n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}
                              for cls in classes))


def offered(server) -> dict[str, set[str]]:
    """surface -> the operations it offers."""
    from triserve_client.grpc import AsyncTriserveGrpcClient, TriserveGrpcClient

    ops = operations()
    schema = httpx.get(f"{server.url}/schema.json", timeout=30).json()
    # the OIP model names each family declares for its default deployment (its main one and its routes' own); the
    # server answers to them for every family it serves (the tiny models file serves no pose deployment: pose is
    # read from its declaration alone)
    aliases = {name: {families.family(name).api.oip.alias} | {r.oip.alias for r in families.family(name).api.routes
                                                              if r.oip is not None} for name in families.names()}
    served = {d["family"] for d in httpx.get(f"{server.url}/v1/models", timeout=30).json()["deployments"]}
    assert served, "the server serves no deployment"
    for name in served:
        for alias in aliases[name]:
            assert httpx.get(f"{server.url}/v2/models/{alias}", timeout=30).status_code == 200, alias
    oip = {op for op in ops if op.replace("_", "-") in set().union(*aliases.values())}
    service = triserve_pb2.DESCRIPTOR.services_by_name["Triserve"]
    return {
        "bentoml_schema": {route["name"] for route in schema["routes"]},
        "grpc": {snake(method.name) for method in service.methods},
        "oip": oip,
        "client_sync": methods(TriserveClient),
        "client_async": methods(AsyncTriserveClient),
        "client_grpc": methods(TriserveGrpcClient, AsyncTriserveGrpcClient),
        "batch": {command.replace("-", "_") for command in commands()},
    }


def table(ops: dict[str, str], surfaces: dict[str, set[str]]) -> str:
    width = max(map(len, ops)) + 2
    lines = [f"{'operation':<{width}}{'family':<16}" + " ".join(f"{s:>14}" for s in SURFACES)]
    for op, family in ops.items():
        lines.append(f"{op:<{width}}{family:<16}"
                     + " ".join(f"{('yes' if op in surfaces[s] else '-'):>14}" for s in SURFACES))
    return "\n".join(lines)


def test_every_family_operation_is_on_every_surface_but_the_known_gaps(server):
    ops = operations()
    assert set(ops.values()) == set(families.names())  # every family has at least one operation
    surfaces = offered(server)
    print("\n" + table(ops, surfaces))
    missing = {(op, surface) for op in ops for surface in SURFACES if op not in surfaces[surface]}
    assert missing - KNOWN_GAPS == set(), f"operations missing from a surface: {sorted(missing - KNOWN_GAPS)}"
    assert KNOWN_GAPS - missing == set(), f"gaps closed: remove them from KNOWN_GAPS: {sorted(KNOWN_GAPS - missing)}"


def test_the_table_reads_what_the_surfaces_name():
    """The name mappings the table relies on, on today's names: a renamed surface would otherwise read as a gap."""
    assert snake("ClassifyImage") == "classify_image" and snake("Detect") == "detect"
    assert operation_name("/v1/forecast/panel") == "forecast_panel"
    assert {"classify", "detect", "pose", "segment", "forecast", "forecast_panel"} <= methods(TriserveClient)
    assert "classify-image" in commands()


def test_known_gaps_name_real_operations_and_surfaces():
    ops = operations()
    assert {op for op, _ in KNOWN_GAPS} <= set(ops) and {s for _, s in KNOWN_GAPS} <= set(SURFACES)
