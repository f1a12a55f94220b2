"""The clients `hostile_clients.py` runs, each in a process of its own (so none shares an
interpreter lock with the benchmark or with another client, as real clients would not):

    python load_clients.py ordinary URL SECONDS CONNECTIONS   -> prints requests/s
    python load_clients.py names URL COUNT RATE CONNECTIONS   -> prints names sent, 404s
    python load_clients.py subscribers URL COUNT              -> "ready", reads until stdin ends

`ordinary`: small chat completions to the `bench` model on kept-alive connections, as fast as
they are answered; any answer but a 200 is an error (exit 1). `names`: COUNT chat completions
each naming a model that does not exist (a new name every time, some shaped like API keys), at
RATE a second in all (0: as fast as they are answered); prints how many were sent and how many
were answered 404. `subscribers`: COUNT `/api/events` clients, connected 50 at a time, each
reading everything it is sent (and dropping it), until this process's stdin is closed; prints
`ready` once all are connected.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

import aiohttp

ORDINARY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}]}).encode()
HEADERS = {"Content-Type": "application/json"}


async def ordinary(url: str, seconds: float, connections: int) -> float:
    done = 0
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                async with session.post(
                    url + "/v1/chat/completions", data=ORDINARY, headers=HEADERS
                ) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"the ordinary client got a {resp.status}")
                done += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(connections)))
        return done / (time.monotonic() - started)


def unknown_name(i: int) -> str:
    """A model name nobody configured; every tenth looks like an API key sent as the model."""
    return f"sk-{uuid.uuid4().hex}" if i % 10 == 0 else f"no-such-model-{i}-{uuid.uuid4().hex[:8]}"


async def names(url: str, count: int, rate: float, connections: int) -> tuple[int, int]:
    sent = not_found = 0
    interval = connections / rate if rate > 0 else 0.0  # each worker's own pace
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(first: int) -> None:
            nonlocal sent, not_found
            next_at = time.monotonic()
            for i in range(first, count, connections):
                if interval:
                    next_at += interval
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                body = json.dumps({"model": unknown_name(i), "messages": []}).encode()
                async with session.post(
                    url + "/v1/chat/completions", data=body, headers=HEADERS
                ) as resp:
                    await resp.read()
                    sent += 1
                    not_found += resp.status == 404

        await asyncio.gather(*(worker(k) for k in range(connections)))
    return sent, not_found


async def subscribers(url: str, count: int) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        responses: list[aiohttp.ClientResponse] = []
        for first in range(0, count, 50):
            wave = [session.get(url + "/api/events") for _ in range(first, min(count, first + 50))]
            responses += await asyncio.gather(*wave)
        if any(r.status != 200 for r in responses):
            raise RuntimeError("a subscriber was not answered 200")

        async def drain(resp: aiohttp.ClientResponse) -> None:
            async for _ in resp.content.iter_any():
                pass

        readers = [asyncio.ensure_future(drain(r)) for r in responses]
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for resp in responses:
            resp.close()


def main(argv: list[str]) -> int:
    role, url, *rest = argv
    if role == "ordinary":
        seconds, connections = float(rest[0]), int(rest[1])
        print(f"{asyncio.run(ordinary(url, seconds, connections)):.1f}")
    elif role == "names":
        count, rate, connections = int(rest[0]), float(rest[1]), int(rest[2])
        sent, not_found = asyncio.run(names(url, count, rate, connections))
        print(sent, not_found)
    elif role == "subscribers":
        asyncio.run(subscribers(url, int(rest[0])))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
