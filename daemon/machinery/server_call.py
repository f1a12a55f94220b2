"""One HTTP call of swapd's own to a model's server (a sleep or wake call, a wake's probe): the
answer's status and text, or what went wrong, said the one way both callers report it."""

from __future__ import annotations

import aiohttp


class CallFailed(Exception):
    """No answer: "did not answer within 5s", or "failed: <error>"."""


async def call(
    session: aiohttp.ClientSession,
    base: str,
    method: str,
    path: str,
    body: str,
    timeout: float,
) -> tuple[int, str]:
    """(status, text) of `method path` on the server at `base`, a JSON `body` sent when there is
    one; redirects are not followed. Raises `CallFailed`."""
    headers = {"Content-Type": "application/json"} if body else None
    try:
        async with session.request(
            method,
            base.rstrip("/") + path,
            data=body.encode() if body else None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            allow_redirects=False,
        ) as response:
            return response.status, await response.text(errors="replace")
    except TimeoutError:
        raise CallFailed(f"did not answer within {timeout:g}s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise CallFailed(f"failed: {type(exc).__name__}: {exc}") from exc
