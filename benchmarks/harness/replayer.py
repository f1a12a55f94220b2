"""One trace replayed against one running swapd: every request sent when the trace says, what each
client waited, and the swap log read back (`/api/swaps`) for the swaps and the wasted starts.

A request's wait is from the moment it was sent to its answer's first byte, less what the
stand-in was told to spend before that byte (a non-streamed chat's `gen`): the time swapd kept it
waiting (a swap, a queue, a drain), and nothing of the model's own work.

A start (or wake) is wasted when swapd brought a model in for a request (`cause` `request`) and
took it out again (its next stop or sleep record ended, or the start was aborted) before any
request for that model had been answered by it: the first byte of an answer for that model came
neither between the model becoming ready and the end of that stop (the stop's drain waits for
the requests it serves, so an answer it gave lies inside), nor at all for an aborted start.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from .trace_files import Kind, Request

BRING_IN = ("start", "swap", "wake")
TAKE_OUT = ("stop", "sleep", "crash")
# A client's clock reads an answer a little after the daemon's stop record could end (a busy
# machine's event loop lags); an answer of the model started again after a wasted start comes a
# whole start later (0.8 s and more at the scales used), well outside.
SLACK = 0.25


@dataclass
class Answer:
    request: Request
    sent: float  # wall clock
    first_byte: float = 0.0  # wall clock, 0: none came
    done: float = 0.0
    status: int = 0
    error: str = ""
    own: float = 0.0  # seconds the stand-in spends before the first byte (a chat's generation)

    @property
    def wait(self) -> float:
        return max(0.0, self.first_byte - self.sent - self.own)

    def log(self) -> dict[str, Any]:
        """For the results file: which request, when it was sent and answered, how."""
        r = self.request
        times = {"sent": self.sent, "first_byte": self.first_byte, "done": self.done}
        return {"index": r.index, "model": r.model, "kind": r.kind, "status": self.status} | times


class Replay:
    def __init__(self, url: str, trace: list[Request], scale: float) -> None:
        self.url = url
        self.trace = trace
        self.scale = scale
        self.answers: list[Answer] = []
        self.swaps: dict[int, dict[str, Any]] = {}
        self.began = 0.0

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            self.session = session
            self.began = time.time()
            clock = time.monotonic()
            poller = asyncio.create_task(self._poll_swaps())
            clients = sorted({r.client for r in self.trace})
            try:
                await asyncio.gather(*(self._client(c, clock) for c in clients))
            finally:
                poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poller
            await self._read_swaps()

    async def _client(self, client: str, clock: float) -> None:
        """A client's lines in order: one at its time, or after the previous one's answer."""
        previous: asyncio.Task[Answer] | None = None
        pending: list[asyncio.Task[Answer]] = []
        for request in (r for r in self.trace if r.client == client):
            if request.after and previous is not None:
                await previous
                await asyncio.sleep(request.think * self.scale)
            else:
                await asyncio.sleep(max(0.0, clock + request.at * self.scale - time.monotonic()))
            previous = asyncio.create_task(self._send(request))
            pending.append(previous)
        self.answers += await asyncio.gather(*pending)

    async def _send(self, request: Request) -> Answer:
        method, path, body = self._http(request)
        own = request.gen * self.scale if request.kind is Kind.CHAT else 0.0
        answer = Answer(request, time.time(), own=own)
        try:
            async with self.session.request(method, self.url + path, json=body) as resp:
                answer.status = resp.status
                await resp.content.readany()
                answer.first_byte = time.time()
                rest = await resp.read()
                if resp.status != 200:
                    answer.error = rest.decode(errors="replace")[:300]
        except aiohttp.ClientError as exc:
            answer.error = repr(exc)
        answer.done = time.time()
        if not answer.first_byte:
            answer.first_byte = answer.done
        return answer

    def _http(self, request: Request) -> tuple[str, str, dict[str, Any] | None]:
        gen = request.gen * self.scale
        messages = [{"role": "user", "content": f"request {request.index}"}]
        if request.kind is Kind.CHAT:
            body = {"model": request.model, "messages": messages, "x_delay": gen}
            return "POST", "/v1/chat/completions", body
        if request.kind is Kind.STREAM:
            body = {"model": request.model, "messages": messages, "stream": True}
            return "POST", "/v1/chat/completions", body | {"x_chunks": 5, "x_delay": gen / 5}
        if request.kind is Kind.EMBEDDINGS:
            body = {"model": request.model, "input": [f"chunk {request.index}"]}
            return "POST", "/v1/embeddings", body
        if request.kind is Kind.COMFYUI:
            steps = 5
            extra = {"x_steps": steps, "x_step_delay": gen / steps}
            job = {"prompt": {"9": {"class_type": "SaveImage"}}, "client_id": "tab"}
            return "POST", "/comfyui/api/prompt", job | {"extra_data": extra}
        return "POST", f"/api/models/load/{request.model}", None

    async def _poll_swaps(self) -> None:
        """The daemon keeps its last 200 records: read them as the trace goes, kept by id."""
        while True:
            await asyncio.sleep(5)
            with contextlib.suppress(aiohttp.ClientError, ValueError):
                await self._read_swaps()

    async def _read_swaps(self) -> None:
        async with self.session.get(self.url + "/api/swaps") as resp:
            for record in (await resp.json())["swaps"]:
                if record["began"] >= self.began:
                    self.swaps[record["id"]] = record


def brought_in(swaps: dict[int, dict[str, Any]]) -> int:
    return sum(1 for r in swaps.values() if r["kind"] in BRING_IN)


def wasted_starts(swaps: dict[int, dict[str, Any]], answers: list[Answer]) -> list[dict[str, Any]]:
    """The starts and wakes made for a request that were taken out before serving one."""
    records = sorted(swaps.values(), key=lambda r: r["began"])
    wasted = []
    for i, rec in enumerate(records):
        if rec["kind"] not in BRING_IN or rec["cause"] != "request" or rec["result"] == "failed":
            continue
        served = [a.first_byte for a in answers if a.request.model == rec["model"] and a.status]
        if rec["result"] == "aborted":
            wasted.append(rec)
            continue
        out = next(
            (r for r in records[i + 1 :] if r["model"] == rec["model"] and r["kind"] in TAKE_OUT),
            None,
        )
        if out is None:
            continue
        if not any(rec["ended"] - SLACK <= t <= out["ended"] + SLACK for t in served):
            wasted.append(rec)
    return wasted


async def replay(url: str, trace: list[Request], scale: float) -> Replay:
    run = Replay(url, trace, scale)
    await run.run()
    return run
