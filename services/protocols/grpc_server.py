"""The gRPC endpoint of the gateway: a grpc.aio server on one API worker's event loop, started and stopped by
the Gateway's BentoML lifecycle hooks (BentoML 1.4 serves no gRPC for new-style services).

Services: triserve.v1.Triserve (typed task APIs), inference.GRPCInferenceService (Open Inference Protocol v2),
grpc.health.v1.Health (SERVING only while the gateway is ready: Check runs the same check as /readyz at the
moment of the call; Watch streams the status refreshed every grpc.health_interval_s) and server reflection.

The port is owned, never shared. It used to be bound with SO_REUSEPORT so that every API worker listened on it; but
Linux lets any process of the same user join such a port, so a second triserve (or any grpcio server: gRPC turns
SO_REUSEPORT on by default) started on it silently took part of this one's connections. Workers cannot share it
the way they share BentoML's HTTP port (one socket bound by the arbiter, inherited by each worker): grpcio has no
way to serve on an inherited listening socket. So one API worker at a time serves gRPC and binds with
grpc.so_reuseport=0: the kernel then refuses the port to everyone else, and a taken port fails this bind.

Which worker: the one holding the server's gRPC claim (GrpcClaim: an abstract UNIX socket named by the arbiter's pid
and the port, bound by one process at a time and let go by the kernel when that process dies, however it dies). The
other API workers stand by (GrpcStandby) and try the claim every grpc.standby_poll_s: when the serving worker dies
(a SIGKILL, an OOM kill), another takes the port within that poll, where waiting for the dead worker to be started
again would close it for the ~10 s a worker takes to start. With gateway.workers > 1, gRPC calls run on the serving
worker only (REST spreads over all of them); more gRPC capacity means more instances. Off Linux (no abstract
sockets) the first worker (BentoML worker index 1) serves, without standbys.

A taken port is a start-up error, named: the Gateway's on_deployment hook checks it in the arbiter before any
worker starts (services/ports.py), and if it is taken after all (a start racing ours) the worker's bind raises
PortInUse and stops the whole server (SIGTERM to its parent, the arbiter: a graceful stop, so exit status 0, with a
CRITICAL line naming the port) instead of leaving circus to restart the worker for ever.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from triserve.configs.settings import GrpcSettings
from triserve.services.ports import GRPC_HINT, PortInUse, ensure_free
from triserve.services.protocols import oip
from triserve.services.protocols.generated import triserve_pb2_grpc
from triserve.services.protocols.grpc_typed import SERVICE_NAME as TYPED_SERVICE
from triserve.services.protocols.grpc_typed import TriserveServicer

log = logging.getLogger("triserve.grpc")
# The OIP servicer and its stubs are imported when the server starts, not with this module: they register the standard
# `inference.*` protobuf names, as tritonclient.grpc does, and two registrations in one process clash. Importing the
# gateway (tests, tools, an application that also holds tritonclient) then never loads them unless it serves gRPC.
OIP_SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICES = ("", TYPED_SERVICE, OIP_SERVICE)


def bind_address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    return f"{host}:{port}"


class ReadinessHealth(health.aio.HealthServicer):
    """grpc.health.v1 whose Check asks the gateway's readiness at the moment of the call (the same check as
    /readyz), so a probe that saw /readyz turn 200 never reads a stale NOT_SERVING; Watch streams the status the
    watcher refreshes every grpc.health_interval_s."""

    def __init__(self, server: GrpcServer):
        super().__init__()
        self._owner = server

    async def Check(self, request, context):  # the gRPC method name
        if not self._owner.stopping:
            await self._owner.refresh_health()
        return await super().Check(request, context)


class GrpcServer:
    def __init__(self, gateway, cfg: GrpcSettings, credentials: grpc.ServerCredentials | None = None,
                 interceptors: tuple[grpc.aio.ServerInterceptor, ...] = ()):
        """credentials: TLS (services/tls.grpc_credentials), None for an insecure port; interceptors: e.g. the
        restricted API categories (services/restricted.RestrictedRpcs)."""
        self.gateway, self.cfg, self.credentials, self.interceptors = gateway, cfg, credentials, interceptors
        self.address = bind_address(cfg.host, cfg.port)
        self.server: grpc.aio.Server | None = None
        self.stopping = False
        self.health = ReadinessHealth(self)
        self._watcher: asyncio.Task | None = None
        self._status: int | None = None

    async def start(self) -> None:
        from triserve.services.protocols.generated import grpc_predict_v2_pb2_grpc  # see OIP_SERVICE
        from triserve.services.protocols.grpc_oip import SERVICE_NAME, InferenceServicer

        assert SERVICE_NAME == OIP_SERVICE
        cfg = self.cfg
        server = grpc.aio.server(interceptors=self.interceptors, options=[
            ("grpc.so_reuseport", 0),  # on by default in gRPC: the port would be open to anyone's SO_REUSEPORT bind
            ("grpc.max_receive_message_length", cfg.max_message_bytes),
            ("grpc.max_send_message_length", cfg.max_message_bytes),
        ])
        triserve_pb2_grpc.add_TriserveServicer_to_server(TriserveServicer(self.gateway), server)
        grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceServicer(self.gateway), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if cfg.reflection:
            reflection.enable_server_reflection(
                (TYPED_SERVICE, OIP_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                 reflection.SERVICE_NAME), server)
        try:
            port = (server.add_secure_port(self.address, self.credentials) if self.credentials is not None
                    else server.add_insecure_port(self.address))
        except RuntimeError as exc:  # grpcio raises when the address cannot be bound, without saying why
            ensure_free(cfg.host, cfg.port, "gRPC", GRPC_HINT)  # PortInUse when that is why
            raise RuntimeError(f"gRPC: cannot bind {self.address}: {exc}") from exc
        if port == 0:
            ensure_free(cfg.host, cfg.port, "gRPC", GRPC_HINT)
            raise RuntimeError(f"gRPC: cannot bind {self.address}")
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        self.server = server
        self._watcher = asyncio.create_task(self._watch_readiness(), name="triserve-grpc-health")
        log.info("gRPC listening on %s (typed, OIP v2, health%s%s)", self.address,
                 ", reflection" if cfg.reflection else "", ", TLS" if self.credentials is not None else "")

    async def _set_health(self, status: int) -> None:
        if status != self._status:
            for service in HEALTH_SERVICES:
                await self.health.set(service, status)
            self._status = status

    async def refresh_health(self) -> None:
        ready = await oip.server_ready(self.gateway)
        await self._set_health(health_pb2.HealthCheckResponse.SERVING if ready
                               else health_pb2.HealthCheckResponse.NOT_SERVING)

    async def _watch_readiness(self) -> None:
        while True:
            try:
                await self.refresh_health()
            except asyncio.CancelledError:
                raise
            except Exception:  # the watcher must outlive any single failed probe
                log.exception("gRPC health refresh failed")
            await asyncio.sleep(self.cfg.health_interval_s)

    async def stop(self) -> None:
        await _cancel(self._watcher)
        self._watcher = None
        if self.server is not None:
            self.stopping = True
            await self.health.enter_graceful_shutdown()
            await self.server.stop(self.cfg.shutdown_grace_s)
            self.server = None
            log.info("gRPC server on %s stopped", self.address)


ABSTRACT_SOCKETS = sys.platform.startswith("linux")


class GrpcClaim:
    """The right to serve this server's gRPC port, held by one API worker at a time: an abstract UNIX socket (no file
    to clean up, nothing on disk to race) named by the arbiter's pid and the port. Binding it is exclusive, and the
    kernel lets it go when its process exits, SIGKILL included, so a standby's next try succeeds."""

    def __init__(self, arbiter_pid: int, port: int):
        self.name = f"\0triserve-grpc-{arbiter_pid}-{port}"
        self._sock: socket.socket | None = None

    def try_take(self) -> bool:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(self.name)
            except OSError as exc:
                sock.close()
                if exc.errno != errno.EADDRINUSE:
                    raise
                return False
            self._sock = sock
        return True

    def release(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


async def _cancel(task: asyncio.Task | None) -> None:
    """Cancel a background task of this module (the health watcher, the standby's wait) and wait for it to end."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def serves_grpc(cfg: GrpcSettings, worker_index: int | None) -> bool:
    """Whether this process serves gRPC at once without a claim: enabled, and not a BentoML worker at all (None: the
    gateway run in-process, e.g. by a test), or the first API worker where there are no abstract sockets."""
    return cfg.enabled and (worker_index is None or (worker_index == 1 and not ABSTRACT_SOCKETS))


async def _start_or_stop_all(server: GrpcServer, worker_index: int | None) -> None:
    """server.start(); a taken port in a BentoML worker also stops the whole server: circus would restart the
    worker, and it would fail again, for ever."""
    try:
        await server.start()
    except PortInUse as exc:
        if worker_index is not None:  # an API worker's parent is the arbiter (kernel/protection/buckets.py too)
            log.critical("%s: stopping the server (arbiter pid %d)", exc, os.getppid())
            os.kill(os.getppid(), signal.SIGTERM)
        raise


class GrpcStandby:
    """An API worker's gRPC role: serving when it holds the claim, else trying it every cfg.standby_poll_s and
    serving from the moment it is taken (the serving worker has died). stop() ends either."""

    def __init__(self, make_server: Callable[[], GrpcServer], claim: GrpcClaim, cfg: GrpcSettings,
                 worker_index: int | None):
        self._make_server, self.claim, self.cfg, self.worker_index = make_server, claim, cfg, worker_index
        self.server: GrpcServer | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        if self.claim.try_take():
            await self._serve()
        else:
            log.info("gRPC: standing by (another API worker serves %s)", bind_address(self.cfg.host, self.cfg.port))
            self._task = asyncio.create_task(self._wait_for_claim(), name="triserve-grpc-standby")

    async def _serve(self) -> None:
        server = self._make_server()
        try:
            await _start_or_stop_all(server, self.worker_index)
        except BaseException:
            self.claim.release()
            raise
        self.server = server

    async def _wait_for_claim(self) -> None:
        while not self.claim.try_take():
            await asyncio.sleep(self.cfg.standby_poll_s)
        log.warning("gRPC: the API worker serving it is gone; this one (pid %d) takes the port over", os.getpid())
        try:
            await self._serve()
        except PortInUse:
            pass  # logged, and the server is stopping (_start_or_stop_all)

    async def stop(self) -> None:
        await _cancel(self._task)
        self._task = None
        if self.server is not None:
            await self.server.stop()
            self.server = None
        self.claim.release()


async def start_grpc(gateway, cfg: GrpcSettings, worker_index: int | None,
                     credentials: grpc.ServerCredentials | None = None,
                     interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (),
                     arbiter_pid: int | None = None) -> GrpcServer | GrpcStandby | None:
    """This process's gRPC role: None (disabled, or a worker that never serves: no abstract sockets and not the
    first), a GrpcServer started at once (not a BentoML worker; the first worker without abstract sockets), or a
    GrpcStandby (every API worker on Linux: serving, or ready to take the port over). `arbiter_pid` names the claim
    (default: this worker's parent). Each answers stop()."""
    def make_server() -> GrpcServer:
        return GrpcServer(gateway, cfg, credentials, interceptors)

    if not cfg.enabled:
        return None
    if serves_grpc(cfg, worker_index):
        server = make_server()
        await _start_or_stop_all(server, worker_index)
        return server
    if not ABSTRACT_SOCKETS:
        return None
    role = GrpcStandby(make_server, GrpcClaim(arbiter_pid or os.getppid(), cfg.port), cfg, worker_index)
    await role.start()
    return role
