"""What BentoML's /metrics exports, made safe and complete: its HTTP traffic metrics (bentoml_service_request_total,
_duration_seconds, _in_progress) labelled by route template instead of the raw request path, and the process and
Python collectors that its multiprocess mode leaves out (observability/process_metrics.py).

Why the labels: BentoML's RunnerTrafficMetricsMiddleware, the outermost layer of every service's ASGI stack, labels
`endpoint` with scope["path"]: every path an anonymous caller invents (/admin/deployments/<junk>, /__dict__/load)
became new series in every process, growing the server's memory and every scrape. Here the label is the template of
the route that will answer (/admin/deployments/{name}, /v2/models/{name}/infer), or UNMATCHED for a path no route
takes (404), whatever the status (refused requests included). The request itself reaches the app with its real path.

`install()` replaces the class BentoML's app factory looks up when it builds the middleware stack (it imports it from
bentoml._internal.server.http.instruments at that moment), so it must run when the service module is imported, before
BentoML builds the app: services/gateway.py calls it. BentoML offers no hook to wrap its own metrics middleware, nor
to add a collector to the registry its /metrics builds on every scrape (hence the wrapped generate_latest).
"""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

import bentoml
import fastapi.routing
import prometheus_client
from bentoml._internal.configuration.containers import BentoMLContainer
from bentoml._internal.server.http import instruments
from starlette.routing import BaseRoute, Mount, compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from triserve.observability.process_metrics import server_registry

UNMATCHED = "unmatched"  # the one label value of every path that no route takes
_RAW_PATH = "triserve.raw_path"  # the real path, carried past BentoML's middleware in the scope
_BentoMLTrafficMetrics = instruments.RunnerTrafficMetricsMiddleware
Route = tuple[str, re.Pattern[str], frozenset[str] | None]  # template, its path regex, its methods (None: any)


def route_table(routes: Sequence[BaseRoute], prefix: str = "") -> list[Route]:
    """Every route of an app in dispatch order, mounted apps' routes included, as (template, path regex, methods).
    FastAPI's included routers are expanded with its own iter_route_contexts (FastAPI >= 0.12x nests them)."""
    contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    table: list[Route] = []
    for ctx in contexts(routes) if contexts else routes:
        route = getattr(ctx, "original_route", ctx)
        path = prefix + (getattr(ctx, "path", None) or "")
        if isinstance(route, Mount):
            table.extend(route_table(route.routes, path) if route.routes else [_route(path + "/{path:path}", None)])
        elif getattr(ctx, "path", None) is not None:
            table.append(_route(path, getattr(ctx, "methods", None)))
    return table


def _route(template: str, methods: Iterable[str] | None) -> Route:
    return template, compile_path(template)[0], frozenset(methods) if methods else None


def route_template(table: list[Route], method: str, path: str) -> str | None:
    """The template of the route Starlette would dispatch to: the first whose path and method match, else the first
    whose path matches (405); None when no route takes the path."""
    partial: str | None = None
    for template, regex, methods in table:
        if regex.match(path):
            if methods is None or method in methods:
                return template
            partial = partial or template
    return partial


class RouteLabelledTrafficMetrics:
    """BentoML's traffic metrics middleware, handed a scope whose path is the route template; the app below it gets
    the real path back. The method takes part in the lookup (a POST-only route and a catch-all behind it), never in
    the label."""

    def __init__(self, app: ASGIApp, **options: Any) -> None:
        self.metrics = _BentoMLTrafficMetrics(_restore_path(app), **options)
        self._tables: dict[int, list[Route]] = {}  # by id of the Starlette app (one per process)
        # the last templates by path: a bounded cache, so junk paths cannot grow it either
        self._template = functools.lru_cache(maxsize=2048)(self._lookup)

    def _lookup(self, app: Any, method: str, path: str) -> str:
        table = self._tables.get(id(app))
        if table is None:
            table = self._tables[id(app)] = route_table(getattr(app, "routes", None) or [])
        return route_template(table, method, path) or UNMATCHED

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path") != "/metrics":
            # Starlette sets scope["app"] before its middleware stack runs
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            label = self._template(scope.get("app"), scope.get("method", ""), path)
            scope = {**scope, "path": label, _RAW_PATH: scope["path"]}
        await self.metrics(scope, receive, send)


def _restore_path(app: ASGIApp) -> ASGIApp:
    async def restore(scope: Scope, receive: Receive, send: Send) -> None:
        if _RAW_PATH in scope:
            scope = {**scope, "path": scope[_RAW_PATH]}
            del scope[_RAW_PATH]
        await app(scope, receive, send)

    return restore


def server_root() -> int:
    """The server's root process: a BentoML worker's parent (the `bentoml serve` arbiter), else this process."""
    return os.getppid() if bentoml.server_context.worker_index is not None else os.getpid()


def install() -> None:
    """Make BentoML build RouteLabelledTrafficMetrics where it builds its own traffic metrics middleware, and append
    the process and Python metrics to what its /metrics answers."""
    instruments.RunnerTrafficMetricsMiddleware = RouteLabelledTrafficMetrics  # type: ignore[misc,assignment]
    client = BentoMLContainer.metrics_client.get()
    if getattr(client.generate_latest, "triserve_process_metrics", False):
        return
    multiprocess = client.generate_latest
    extra = server_registry(server_root)

    def generate_latest() -> bytes:
        return multiprocess() + prometheus_client.generate_latest(extra)

    generate_latest.triserve_process_metrics = True  # type: ignore[attr-defined]
    client.generate_latest = generate_latest  # type: ignore[method-assign]
