"""A wake's proof that the model answers as it did (docs/guides/sleep-and-wake.md, "Verified
wakes"): the model's `wakeProbe` request sent to its own server, and its answer held to what it
must be. A health check does not prove a wake: a vLLM pool woken from level-1 sleep answered with
corrupted weights while `/health` and `/is_sleeping` said all was well (torch_memory_saver#71).

The answer is the response's body, or the value at the probe's `jsonPath` in it. It must equal
the probe's `expect`, or match its `match`; with neither, it must equal the answer the same
process gave before its first sleep, recorded then (the model is drained: no request of a client
shares its batch, which can change a greedy answer).
"""

from __future__ import annotations

import json
import logging
import re
from enum import StrEnum
from typing import Any

import aiohttp

from ..config import WakeProbe
from ..errors import WakeUnverified
from . import server_call

log = logging.getLogger("swapd.lifecycle")

# How much of an answer a failure quotes.
QUOTE = 120


class ProbeFault(StrEnum):
    """Why a probe did not prove the wake (the `WakeUnverified` error's `fault`)."""

    ERROR = "error"  # no answer: refused, timed out, not 2xx, or no value at its jsonPath
    MISMATCH = "mismatch"  # an answer, not the one it must give


class ProbeFailed(Exception):
    """The probe did not prove the wake: `fault` says how, the message what it got."""

    def __init__(self, fault: ProbeFault, words: str) -> None:
        super().__init__(words)
        self.fault = fault


async def ask(session: aiohttp.ClientSession, base: str, probe: WakeProbe) -> str:
    """The probe's answer from the server at `base`. Raises `ProbeFailed` (`ERROR`)."""
    try:
        status, text = await server_call.call(
            session, base, probe.method, probe.path, probe.body, probe.timeout
        )
    except server_call.CallFailed as exc:
        raise ProbeFailed(ProbeFault.ERROR, f"{probe.method} {probe.path} {exc}") from None
    if not 200 <= status < 300:
        raise ProbeFailed(
            ProbeFault.ERROR, f"{probe.method} {probe.path} answered {status}: {quote(text)}"
        )
    return value_at(text, probe)


def value_at(text: str, probe: WakeProbe) -> str:
    """The answer's compared value: the body, or the value at the probe's `jsonPath`."""
    if not probe.json_path:
        return text
    try:
        node: Any = json.loads(text)
    except ValueError:
        raise ProbeFailed(
            ProbeFault.ERROR, f"{probe.path} answered no JSON: {quote(text)}"
        ) from None
    for part in probe.json_path:
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            where = ".".join(probe.json_path)
            raise ProbeFailed(ProbeFault.ERROR, f"{probe.path}'s answer has no {where}")
    return node if isinstance(node, str) else json.dumps(node)


def verdict(probe: WakeProbe, answer: str, recorded: str | None) -> None:
    """Whether `answer` proves the wake; raises `ProbeFailed` (`MISMATCH`) when it does not.
    `recorded`: the answer before the first sleep (needed when the probe has no `expect` or
    `match`)."""
    if probe.expect is not None:
        if answer != probe.expect:
            raise ProbeFailed(
                ProbeFault.MISMATCH, f"answered {quote(answer)!r}, expected {quote(probe.expect)!r}"
            )
    elif probe.match is not None:
        if re.search(probe.match, answer) is None:
            raise ProbeFailed(
                ProbeFault.MISMATCH,
                f"answered {quote(answer)!r}, which does not match {probe.match!r}",
            )
    elif recorded is not None and answer != recorded:
        raise ProbeFailed(
            ProbeFault.MISMATCH,
            f"answered {quote(answer)!r}, not {quote(recorded)!r} as before its sleep",
        )


async def record(
    session: aiohttp.ClientSession, model_id: str, base: str, probe: WakeProbe
) -> str | None:
    """The answer each wake must give again, asked before the process's first sleep; None when
    it gave none: its wakes are not verified (it says so, once), and its sleep goes on (the probe
    proves wakes, it does not forbid sleeps)."""
    try:
        return await ask(session, base, probe)
    except ProbeFailed as exc:
        log.warning(
            "%s: its wakeProbe got no answer before its sleep (%s): its wakes are not verified "
            "until it is started again%s",
            model_id,
            exc,
            " (set wakeProbe, or wakeProbe: off)" if probe.default else "",
        )
        return None


def can_check(model_id: str, probe: WakeProbe, recorded: str | None) -> bool:
    """Whether there is something to hold a wake's answer to."""
    if recorded is None and needs_record(probe):
        # No answer from before its sleep (a daemon that restarted since, or a server that gave
        # none): nothing to hold this wake to.
        log.info("%s: no wakeProbe answer recorded before its sleep: wake not verified", model_id)
        return False
    return True


async def check(
    session: aiohttp.ClientSession,
    model_id: str,
    base: str,
    probe: WakeProbe,
    recorded: str | None,
) -> None:
    """Ask the probe after a wake. Raises `WakeUnverified` unless it answered as it must."""
    try:
        verdict(probe, await ask(session, base, probe), recorded)
    except ProbeFailed as exc:
        words = f"its wakeProbe {exc.fault.value}: {exc}"
        log.error("%s: wake not verified, %s", model_id, words)
        raise WakeUnverified(words) from None


def needs_record(probe: WakeProbe) -> bool:
    """Whether the probe's answer must be recorded before a sleep (no `expect`, no `match`)."""
    return probe.expect is None and probe.match is None


def quote(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= QUOTE else flat[:QUOTE] + "..."
