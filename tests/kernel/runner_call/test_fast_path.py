"""The runner's fast path, both sides: a real FastPathServer on a UNIX socket and the gateway's FastPath. Answers come
back whole, no fast path means BentoML's call, a gone runner is a transport error (retried and failed over like
BentoML's) until the runner started again binds the same path, a runner error is a 503, the folder is private."""
from __future__ import annotations

import asyncio
import os
import pickle
import stat
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from triserve.kernel.errors import ApiError
from triserve.kernel.runner_call.fast_path import PICKLE, FastPath, FastPathError
from triserve.kernel.runner_call.runner_client import call_runner
from triserve.runners.fast_path import FastPathServer, default_socket_path


class Runner:
    """BentoML's RemoteProxy as the fast path sees it: `to_async.url`, `to_async.fast_path()` and `to_async.infer`."""

    def __init__(self, url: str = "file:///tmp/bentoml-uds-x/1.sock", path: str | None = None):
        self.to_async = self
        self.url, self.path = url, path
        self.asked = self.infers = 0

    async def fast_path(self) -> dict:
        self.asked += 1
        return {"path": self.path}

    async def infer(self, payload):
        self.infers += 1
        return [{"y": it["x"], "via": "bentoml"} for it in payload]


async def double(items: list[dict]) -> list[dict]:
    return [{"y": it["x"] * 2, "via": "fast"} for it in items]


async def failing(items: list[dict]) -> list[dict]:
    raise RuntimeError("model exploded")


def run(coro):
    return asyncio.run(coro)


async def post_directly(path: str, items: list[dict]) -> list[dict]:
    """Items sent to a fast-path socket whatever their size (the server has no size cap of its own)."""
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as session:
        async with session.post("http://runner/infer", data=pickle.dumps(items, protocol=5),
                                headers={"Content-Type": PICKLE}) as resp:
            assert resp.status == 200
            return pickle.loads(await resp.read())


@pytest.fixture
def sock(tmp_path) -> Path:
    return tmp_path / "fast" / "infer.sock"


def test_calls_go_over_the_runner_socket_and_come_back_whole(sock):
    async def go():
        server = FastPathServer(double, timeout_s=5, path=sock)
        path = await server.start()
        runner = Runner(path=path)
        fast = FastPath(runner, timeout_s=5)
        try:
            items = [{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"x": np.ones(4, dtype=np.int64)}]
            first = await fast.send(items)
            second = await fast.send(items[:1])
            images = [{"x": np.full((640, 640, 3), i, dtype=np.uint8)} for i in range(4)]  # 4.9 MB, past 1 MiB
            big = await post_directly(path, images)
            assert await fast.send(images) is None  # large tensors go BentoML's way (MAX_TENSOR_BYTES)
        finally:
            await fast.close()
            await server.stop()
        return path, runner, first, second, big

    path, runner, first, second, big = run(go())
    assert [int(r["y"][0, 0, 0]) for r in big] == [0, 2, 4, 6] and big[3]["y"].shape == (640, 640, 3)
    assert [r["via"] for r in first] == ["fast", "fast"] and second[0]["via"] == "fast"
    assert np.array_equal(first[0]["y"], np.arange(6, dtype=np.float32).reshape(2, 3) * 2)
    assert first[1]["y"].dtype == np.int64 and first[1]["y"].tolist() == [2, 2, 2, 2]
    assert runner.asked == 1  # asked once, then the path is kept
    assert path == str(sock) and not sock.exists() and not sock.parent.exists()  # stop removes the socket (and folder)


def test_the_socket_folder_is_private_to_its_user_or_the_fast_path_is_off(sock, tmp_path):
    async def go(path: Path):
        server = FastPathServer(double, timeout_s=5, path=path)
        bound = await server.start()
        mode = stat.S_IMODE(os.stat(path.parent).st_mode)
        await server.stop()
        return bound, mode

    assert run(go(sock)) == (str(sock), 0o700)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)  # others may enter: never bound there
    assert run(go(shared / "infer.sock"))[0] is None
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    assert run(go(tmp_path / "link" / "infer.sock"))[0] is None
    assert default_socket_path().parent.name == f"triserve-runner-{os.getuid()}-{os.getppid()}"


def test_no_fast_path_where_bentoml_reaches_the_runner_over_tcp_or_in_process():
    assert FastPath(Runner(url="http://runner-tier:3000"), 5).enabled is False  # split tiers, another node
    assert FastPath(Runner(url="file:///tmp/bentoml-uds-x/1.sock"), 5).enabled is True
    assert FastPath(None, 5).enabled is False  # a LocalRunner (placement='local') has no URL

    async def go():
        runner = Runner(url="http://runner-tier:3000", path="/nonexistent.sock")
        answer = await call_runner(runner, "text", [{"x": 1}], retries=0, backoff_ms=0,
                                   fast=FastPath(runner, 5))
        return runner, answer

    runner, answer = run(go())
    assert answer == [{"y": 1, "via": "bentoml"}] and runner.asked == 0 and runner.infers == 1


def test_a_runner_without_a_fast_path_is_asked_again_only_after_a_while():
    async def go():
        runner = Runner(path=None)
        fast = FastPath(runner, 5)
        answers = [await call_runner(runner, "text", [{"x": i}], retries=0, backoff_ms=0, fast=fast) for i in range(3)]
        return runner, answers

    runner, answers = run(go())
    assert [a[0]["via"] for a in answers] == ["bentoml"] * 3
    assert runner.asked == 1 and runner.infers == 3


def test_a_gone_runner_is_refused_until_it_is_started_again_on_the_same_path(sock):
    async def go():
        server = FastPathServer(double, timeout_s=5, path=sock)
        path = await server.start()
        runner = Runner(path=path)
        fast = FastPath(runner, timeout_s=5)
        assert (await fast.send([{"x": 1}]))[0]["y"] == 2
        await server.stop()  # the runner process is gone: its socket no longer answers
        with pytest.raises(aiohttp.ClientError):
            await fast.send([{"x": 1}])
        with pytest.raises(aiohttp.ClientError):  # refused at once, without asking BentoML's socket again
            await fast.send([{"x": 1}])
        restarted = FastPathServer(double, timeout_s=5, path=sock)  # the arbiter starts the runner again
        assert await restarted.start() == path
        try:
            again = await fast.send([{"x": 3}])
        finally:
            await fast.close()
            await restarted.stop()
        return runner, again

    runner, again = run(go())
    assert again[0]["y"] == 6 and runner.asked == 1


def test_a_runner_error_is_a_503_and_a_gone_runner_waits_on_bentomls_socket_or_fails_over(sock):
    async def go():
        server = FastPathServer(failing, timeout_s=5, path=sock)
        runner = Runner(path=await server.start())
        fast = FastPath(runner, 5)
        try:
            with pytest.raises(ApiError) as failed:  # the runner's own error: no retry, no second try over BentoML
                await call_runner(runner, "text", [{"x": 1}], retries=2, backoff_ms=0, fast=fast)
            infers_after_error = runner.infers
        finally:
            await server.stop()
        # gone, on a slot that fails over (fallbacks='gateway'): refused on the same socket, never BentoML's
        with pytest.raises(ApiError) as gone:
            await call_runner(runner, "text", [{"x": 1}], retries=0, backoff_ms=0, fast=fast, wait_out_restarts=False)
        infers_failing_over = runner.infers
        # gone, on a slot without a fallback elsewhere: BentoML's socket, which the arbiter holds during the restart
        waited = await call_runner(runner, "text", [{"x": 2}], retries=2, backoff_ms=0, fast=fast)
        await fast.close()
        return failed.value, infers_after_error, gone.value, infers_failing_over, waited, runner

    failed, infers_after_error, gone, infers_failing_over, waited, runner = run(go())
    assert (failed.status, failed.code, failed.details["reason"]) == (503, "runner_unavailable", "FastPathError")
    assert isinstance(failed.__cause__, FastPathError) and "model exploded" in str(failed.__cause__)
    assert infers_after_error == 0
    assert (gone.status, gone.code) == (503, "runner_unavailable") and infers_failing_over == 0
    assert waited == [{"y": 2, "via": "bentoml"}] and runner.infers == 1
    assert runner.asked == 1  # the path was asked for once and kept


def test_the_server_answers_only_pickled_posts_to_infer(sock):
    async def go():
        server = FastPathServer(double, timeout_s=5, path=sock)
        path = await server.start()
        try:
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as session:
                async with session.get("http://runner/infer") as get:
                    got = get.status
                async with session.post("http://runner/infer", data=b"{}",
                                        headers={"Content-Type": "application/json"}) as wrong:
                    typed = wrong.status
                async with session.post("http://runner/other", data=b"") as other:
                    elsewhere = other.status
        finally:
            await server.stop()
        return got, typed, elsewhere

    assert run(go()) == (404, 415, 404)


def test_the_runner_client_closes_its_fast_path_connection_at_shutdown(sock):
    from triserve.configs.settings import Settings
    from triserve.kernel.runner_call.runner_client import RunnerClient

    async def go():
        server = FastPathServer(double, timeout_s=5, path=sock)
        path = await server.start()
        client = RunnerClient(Runner(path=path), Settings(), lambda slot: 8, lambda slot: "text")
        try:
            assert client.fast is not None
            await client.fast.send([{"x": np.ones(2, dtype=np.float32)}])
            session = client.fast._session
            assert session is not None and not session.closed
            await client.close()
            return session.closed, client.fast._session
        finally:
            await server.stop()

    assert run(go()) == (True, None)
