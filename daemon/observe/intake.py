"""A proxy's finished requests (`ActivityReport.records`, array-like `Finished`) turned into the
records the daemon keeps: the wall-clock timestamp, milliseconds, the token counts and speeds
(daemon/observe/tokens.py, from the small body or the stream's tail the proxy sent) and, for a
status >= 400, the error message. This work is the daemon's rather than each proxy's: the daemon
handles every record anyway, and a proxy's share of a request stays a struct and an append."""

from __future__ import annotations

from ...ipc.activity import ActivityRecord, Finished, Tokens
from . import tokens as token_parse


def record_of(item: Finished, clock: float, proxy_id: str) -> ActivityRecord:
    status = item.resp_status_code
    ttfb = item.ttfb
    return ActivityRecord(
        timestamp=item.started + clock,
        model=item.model,
        model_asked=item.model_asked or item.model,
        route=item.route,
        method=item.method,
        req_path=item.req_path,
        resp_content_type=item.resp_content_type,
        resp_status_code=status,
        bytes=item.size,
        duration_ms=item.duration * 1000,
        wait_ms=item.waited * 1000,
        ttfb_ms=ttfb * 1000 if ttfb >= 0 else -1.0,
        tokens=_tokens_of(item) if status < 400 else Tokens(),
        error_msg=_error_of(item) if status >= 400 else "",
        proxy_id=proxy_id,
    )


def _tokens_of(item: Finished) -> Tokens:
    tail = item.tail
    if tail is not None and "event-stream" in item.resp_content_type:
        return token_parse.from_stream_tail(tail)
    if item.body is not None:
        return token_parse.from_body(item.body)
    if tail is not None and "json" in item.resp_content_type:
        return token_parse.from_body(tail)  # a streamed JSON body that fit in the tail
    return Tokens()


def _error_of(item: Finished) -> str:
    return token_parse.error_message(item.resp_status_code, item.reason, item.body)
