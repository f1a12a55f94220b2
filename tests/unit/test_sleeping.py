"""The sleep machinery without processes: the calls of a sleep setting against a real aiohttp
server on loopback (in order, each answered 2xx in time, the rest not sent after a failure), and
the proof that the GPU memory came back, on a scripted GPU backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from swapd.daemon.errors import SleepFailed
from swapd.daemon.machinery.gpu_backend import GpuProcess, GpuTelemetry, NullBackend
from swapd.daemon.machinery.sleep_proof import CONTEXT_BYTES, released, wait_released
from swapd.daemon.machinery.sleeping import send_all
from swapd.ipc.model_status import GpuInfo
from swapd.ipc.routing_table import HttpCall
from tests.support.loopback_app import serving

GIB = 1024**3
UUID = "GPU-0"


class Scripted:
    """A GPU backend whose process list is a script: each reading takes the next (the last one
    stays)."""

    name = "scripted"

    def __init__(self, *readings: int) -> None:
        self.readings = list(readings)
        self.read = 0

    def processes(self) -> list[GpuProcess]:
        used = self.readings[min(self.read, len(self.readings) - 1)]
        self.read += 1
        return [GpuProcess(gpu_index=0, gpu_uuid=UUID, pid=7, used_bytes=used)]

    def devices(self) -> list[GpuInfo]:
        return []

    def telemetry(self) -> list[GpuTelemetry]:
        return []

    def close(self) -> None:
        pass


def test_released_means_at_most_half_or_a_cuda_contexts_worth() -> None:
    before = {"gpu-0": 10 * GIB}
    assert released(before, {"gpu-0": 5 * GIB})
    assert not released(before, {"gpu-0": 6 * GIB})
    assert released({"gpu-0": int(1.5 * GIB)}, {"gpu-0": CONTEXT_BYTES})
    assert not released({"gpu-0": 4 * GIB}, {"gpu-0": CONTEXT_BYTES * 3})


async def test_the_release_check_waits_for_the_drop_and_keeps_the_residual() -> None:
    backend = Scripted(8 * GIB, 8 * GIB, 8 * GIB, GIB // 2)
    before = {"gpu-0": 8 * GIB}
    residual = await wait_released(backend, before, {7}, None, set(), timeout=10)
    assert residual == {"gpu-0": GIB // 2} and backend.read == 4


async def test_memory_that_stays_held_fails_the_sleep() -> None:
    backend = Scripted(8 * GIB)
    with pytest.raises(SleepFailed) as failed:
        await wait_released(backend, {"gpu-0": 8 * GIB}, {7}, None, set(), timeout=0.05)
    assert failed.value.message == (
        "its GPU memory did not come back within 0.05s of the sleep: it holds 8.00 GiB of the "
        "8.00 GiB it held before"
    )


async def test_nothing_to_prove_without_an_inventory_or_with_a_context_only() -> None:
    assert await wait_released(NullBackend("none"), {}, {7}, None, set(), timeout=1) == {}
    small = Scripted(GIB // 2)
    assert await wait_released(small, {"gpu-0": GIB // 2}, {7}, None, set(), timeout=1) == {
        "gpu-0": GIB // 2
    }
    assert small.read == 1  # read once, not waited on
    other = await wait_released(Scripted(3 * GIB), {"gpu-0": 3 * GIB}, {8}, None, set(), 0.01)
    assert other == {}  # its pids hold nothing at all: released


# ------------------------------------------------------------------------------------ the calls


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[tuple[str, str, bytes, str]]]]:
    seen: list[tuple[str, str, bytes, str]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.path_qs, await request.read(), request.content_type))
        if request.path == "/fail":
            return web.Response(status=500, text="  out of\n memory ")
        if request.path == "/hang":
            await asyncio.sleep(30)
        return web.Response()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with serving(app) as url:
        yield url + "/", seen


async def test_the_calls_go_in_order_with_their_bodies(
    server: tuple[str, list[tuple[str, str, bytes, str]]],
) -> None:
    base, seen = server
    calls = (
        HttpCall("/wake_up?tags=weights"),
        HttpCall("/collective_rpc", body='{"method": "reload_weights"}'),
        HttpCall("/is_sleeping", method="GET"),
    )
    async with aiohttp.ClientSession() as session:
        assert await send_all(session, base, calls, "wake") == ""
    assert seen == [
        ("POST", "/wake_up?tags=weights", b"", "application/octet-stream"),
        ("POST", "/collective_rpc", b'{"method": "reload_weights"}', "application/json"),
        ("GET", "/is_sleeping", b"", "application/octet-stream"),
    ]


async def test_a_failed_or_slow_call_says_which_and_the_rest_are_not_sent(
    server: tuple[str, list[tuple[str, str, bytes, str]]],
) -> None:
    base, seen = server
    async with aiohttp.ClientSession() as session:
        failed = await send_all(session, base, (HttpCall("/fail"), HttpCall("/after")), "sleep")
        slow = await send_all(session, base, (HttpCall("/hang", timeout=0.2),), "wake")
    assert failed == "sleep call 1/2 POST /fail answered 500: out of memory"
    assert slow == "wake call 1/1 POST /hang did not answer within 0.2s"
    assert [path for _, path, _, _ in seen] == ["/fail", "/hang"]
