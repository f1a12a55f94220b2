"""Streams measured through a proxy and directly: SSE events relayed per second, many
concurrent open streams, and the time to a streamed answer's first byte."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

SSE_EVENTS = 50_000
CHAT = "/v1/chat/completions"


async def sse_rate(url: str, n: int) -> float:
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        events = 0
        async with session.get(f"{url}?n={n}&size=64") as resp:
            resp.raise_for_status()
            tail = b""
            async for chunk in resp.content.iter_any():
                data = tail + chunk
                events += data.count(b"\n\n")
                tail = data[-1:]
        elapsed = time.perf_counter() - start
    if events < n:
        raise RuntimeError(f"only {events} of {n} events arrived from {url}")
    return events / elapsed


def sse_rounds(direct: str, via_swapd: str, rounds: int) -> dict[str, list[float]]:
    """SSE events/s of the fake model straight (`direct`) and through swapd (model `sse`).
    One stream is short and noisy here: more rounds than the rest (at least 7), alternating."""
    sse: dict[str, list[float]] = {"direct": [], "swapd": []}
    for _ in range(max(7, rounds)):
        sse["direct"].append(asyncio.run(sse_rate(direct + "/sse", SSE_EVENTS)))
        sse["swapd"].append(asyncio.run(sse_rate(via_swapd + "/upstream/sse/sse", SSE_EVENTS)))
    return sse


async def open_streams(url: str, count: int) -> tuple[int, int, float]:
    """Open `count` streams at once; (completed, failed, seconds all were open together)."""
    connector = aiohttp.TCPConnector(limit=0)
    all_open = asyncio.Event()
    opened = 0
    failures = 0
    done = 0

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal opened, failures, done
        try:
            async with session.get(url) as resp:
                resp.raise_for_status()
                await resp.content.readline()  # the first chunk: this stream is open
                opened += 1
                if opened == count:
                    all_open.set()
                body = await resp.read()
                if not body.endswith(b"\n"):
                    raise RuntimeError("stream cut short")
                done += 1
        except Exception:
            failures += 1

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        tasks = [asyncio.ensure_future(one(session)) for _ in range(count)]
        await asyncio.wait_for(all_open.wait(), 60)
        held = time.perf_counter() - start
        await asyncio.gather(*tasks)
    return done, failures, held


async def first_byte_times(url: str, model: str, count: int) -> list[float]:
    """Seconds from sending a streamed chat request to its first event, `count` times in turn
    on one kept-alive connection."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"model": model, "stream": True, "x_chunks": 1}).encode()
    request = (
        f"POST {CHAT} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    reader, writer = await asyncio.open_connection(host, int(port))
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            writer.write(request)
            seen = b""
            while b"data: " not in seen:
                seen += await reader.read(65536)
            times.append(time.perf_counter() - start)
            while not seen.endswith(b"0\r\n\r\n"):  # the rest of the response, chunked
                more = await reader.read(65536)
                if not more:
                    raise ConnectionError(f"{url} closed the connection mid-response")
                seen += more
    finally:
        writer.close()
    return times
