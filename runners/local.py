"""runner.placement = "local": the runner tier's code inside each API worker process, for single-node CPU serving.

Why: on a CPU-only node the gateway -> runner hop (pickling, a second HTTP/ASGI stack, a thread hand-off: about 3.5 ms
per call, docs/performance.md) costs as much as a small model's inference, and both processes compete for the same
cores. Local placement keeps every line of the runner (ModelRunner's methods, its pool, metrics, fault injection,
rollout control) and of the gateway: this adapter offers the surface of BentoML's RemoteProxy that the gateway uses
(`to_async.<api>(...)`, `is_ready(timeout)`). Model calls run on one compute thread (ONNX Runtime releases the GIL;
one call at a time, as in a runner worker), control calls (stage, activate, ...) on another so a slow model load
never stalls inference.

Costs, by design: every API worker loads every model (memory x gateway.workers), the model tier no longer scales or
fails separately from the API tier, and there is no GPU sharing across API workers. The default stays "remote".
"""
from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class _AsyncApis:
    """runner.to_async.<api>(*args, **kwargs) -> awaitable, like RemoteProxy's, without serialisation or HTTP."""

    def __init__(self, runner: LocalRunner):
        self._runner = runner

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Resolved once per API and kept: BentoML builds a new local caller on every attribute access."""
        instance = self._runner.instance
        method = getattr(instance, name)  # unknown APIs fail here, as on the proxy
        executor = self._runner.control
        if name in self._runner.model_apis:  # model calls: no request context, no wire format
            method, executor = instance._serve, self._runner.compute

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = await asyncio.get_running_loop().run_in_executor(executor,
                                                                      functools.partial(method, *args, **kwargs))
            if inspect.isawaitable(result):  # an async API (add_deployment): it runs its work in a thread of its own
                result = await result
            return result
        setattr(self, name, call)  # later lookups find it without __getattr__
        return call


class LocalRunner:
    """Built in the API worker: `factory()` is the runner service's class (loads, verifies and warms every model)."""

    def __init__(self, factory: Callable[[], Any], model_apis: Iterable[str]):
        self.instance = factory()
        self.model_apis = frozenset(model_apis)
        self.compute = ThreadPoolExecutor(1, thread_name_prefix="triserve-compute")
        self.control = ThreadPoolExecutor(1, thread_name_prefix="triserve-control")
        self.to_async = _AsyncApis(self)

    async def is_ready(self, timeout: float | None = None) -> bool:
        return bool(self.instance.__is_ready__())
