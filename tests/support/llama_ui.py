"""What llama-swap's web UI reads of a server, written down from its sources (mostlygeek/llama-swap,
`ui/src/lib/types.ts` and `ui/src/stores/api.ts`, August 2026), so a test can read swapd's events
and endpoints exactly as that UI does, and a change of shape fails without a browser.

Each shape is a small type description checked by `check`: `STR`, `NUM`, `BOOL`, `Lit(...)`,
`Arr(T)`, `Rec(T)` (a TypeScript `Record<string, T>`), `Obj(required, optional)`, `Null(T)`
(`T | null`). What the UI does with a value beyond its type is checked by the tests themselves
(for example that `Date.parse` reads an in-flight `timestamp`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp


class _T:
    pass


@dataclass(frozen=True)
class _Prim(_T):
    kind: type | tuple[type, ...]
    name: str


STR = _Prim(str, "string")
NUM = _Prim((int, float), "number")
BOOL = _Prim(bool, "boolean")


@dataclass(frozen=True)
class Lit(_T):
    values: frozenset[Any]

    def __init__(self, *values: Any) -> None:
        object.__setattr__(self, "values", frozenset(values))


@dataclass(frozen=True)
class Arr(_T):
    item: _T


@dataclass(frozen=True)
class Rec(_T):
    value: _T


@dataclass(frozen=True)
class Null(_T):
    inner: _T


@dataclass(frozen=True)
class Obj(_T):
    required: Mapping[str, _T]
    optional: Mapping[str, _T] = field(default_factory=dict)


def check(value: Any, shape: _T, where: str = "$") -> None:
    """Raise AssertionError naming the first place `value` is not of `shape`."""
    if isinstance(shape, _Prim):
        ok = isinstance(value, shape.kind) and not (shape is NUM and isinstance(value, bool))
        assert ok, f"{where}: expected a {shape.name}, got {value!r}"
    elif isinstance(shape, Lit):
        assert value in shape.values, (
            f"{where}: expected one of {sorted(shape.values)}, got {value!r}"
        )
    elif isinstance(shape, Null):
        if value is not None:
            check(value, shape.inner, where)
    elif isinstance(shape, Arr):
        assert isinstance(value, list), f"{where}: expected an array, got {value!r}"
        for i, item in enumerate(value):
            check(item, shape.item, f"{where}[{i}]")
    elif isinstance(shape, Rec):
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        for key, item in value.items():
            check(item, shape.value, f"{where}.{key}")
    elif isinstance(shape, Obj):
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        for key, inner in shape.required.items():
            assert key in value, f"{where}: no {key!r} (it has {sorted(value)})"
            check(value[key], inner, f"{where}.{key}")
        for key, inner in shape.optional.items():
            if key in value:
                check(value[key], inner, f"{where}.{key}")
    else:  # pragma: no cover - a shape this module does not know
        raise TypeError(shape)


def parse_date(text: str) -> datetime:
    """What `Date.parse` reads of an RFC 3339 time (the UI sorts in-flight rows by it)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- ui/src/lib/inflight.ts -----------------------------------------------------------------------


def request_header(headers: Mapping[str, str] | None, name: str) -> str:
    """`requestHeader`: a header's value, its name compared without case ("" when absent)."""
    wanted = name.lower()
    return next((v for k, v in (headers or {}).items() if k.lower() == wanted), "")


def session_id(headers: Mapping[str, str] | None, session_headers: list[str]) -> str:
    """`sessionID`: what the in-flight table's Session ID column shows, the first of
    `uiConfig.activity.session_id`'s headers the request has."""
    return next((v for n in session_headers if (v := request_header(headers, n))), "")


# --- ui/src/lib/types.ts --------------------------------------------------------------------------

MODEL_STATE = Lit("ready", "starting", "stopping", "stopped", "shutdown", "unknown")
CAPABILITIES = Obj(
    {},
    {
        name: BOOL
        for name in (
            "vision",
            "audio_transcriptions",
            "audio_speech",
            "image_generation",
            "image_to_image",
            "function_calling",
            "reranker",
        )
    },
)
# `Model`, as `modelStatus` sends it (the `/v1/models` fields are the playground's).
MODEL = Obj(
    {
        "id": STR,
        "state": MODEL_STATE,
        "name": STR,
        "description": STR,
        "unlisted": BOOL,
        "peerID": STR,
    },
    {"aliases": Arr(STR), "capabilities": CAPABILITIES, "context_length": NUM},
)
LOG_DATA = Obj({"source": Lit("upstream", "proxy"), "data": STR})
INFLIGHT_ENTRY = Obj(
    {
        "id": STR,
        "timestamp": STR,
        "model": STR,
        "req_path": STR,
        "method": STR,
        "req_headers": Rec(STR),
        "remote_ip": STR,
        "resp_headers": Rec(STR),
        "resp_bytes": NUM,
        "elapsed_ms": NUM,
    },
    {"metadata": Rec(STR)},
)
INFLIGHT = Obj(
    {"operation": Lit("snapshot", "upsert", "remove")},
    {"requests": Arr(INFLIGHT_ENTRY), "request": INFLIGHT_ENTRY, "id": STR},
)
UI_CONFIG = Obj({"activity": Obj({"session_id": Arr(STR)})})
PROFILE_CHANGED = Obj({"active": Null(STR)})
ACTIVITY_EVENT = Obj({"id": NUM})
TOKENS = Obj(
    {
        name: NUM
        for name in (
            "cache_tokens",
            "draft_tokens",
            "draft_acc_tokens",
            "input_tokens",
            "output_tokens",
            "prompt_per_second",
            "tokens_per_second",
        )
    }
)
ACTIVITY_ENTRY = Obj(
    {
        "id": NUM,
        "timestamp": STR,
        "model": STR,
        "req_path": STR,
        "resp_content_type": STR,
        "resp_status_code": NUM,
        "tokens": TOKENS,
        "duration_ms": NUM,
        "has_capture": BOOL,
    },
    {"error_msg": STR, "metadata": Rec(STR)},
)
ACTIVITY_PAGE = Obj(
    {"data": Arr(ACTIVITY_ENTRY), "page": NUM, "limit": NUM, "total": NUM, "total_pages": NUM}
)
VERSION = Obj({"build_date": STR, "commit": STR, "version": STR})
SYS_STAT = Obj(
    {
        "timestamp": STR,
        "cpu_util_per_core": Arr(NUM),
        "mem_total_mb": NUM,
        "mem_used_mb": NUM,
        "mem_free_mb": NUM,
        "swap_total_mb": NUM,
        "swap_used_mb": NUM,
        "load_avg_1": NUM,
        "load_avg_5": NUM,
        "load_avg_15": NUM,
        "net_io": Arr(Obj({"name": STR, "bytes_recv": NUM, "bytes_sent": NUM})),
    }
)
GPU_STAT = Obj(
    {
        "timestamp": STR,
        "id": NUM,
        "name": STR,
        "uuid": STR,
        "temp_c": NUM,
        "vram_temp_c": NUM,
        "gpu_util_pct": NUM,
        "mem_util_pct": NUM,
        "mem_used_mb": NUM,
        "mem_total_mb": NUM,
        "fan_speed_pct": NUM,
        "power_draw_w": NUM,
    }
)
# `checkPerformanceEnabled` reads `enabled`; `fetchPerformance` the two lists.
PERFORMANCE = Obj({"enabled": BOOL, "sys_stats": Arr(SYS_STAT), "gpu_stats": Arr(GPU_STAT)})
_NSTR = Null(STR)
_NNUM = Null(NUM)
HARDWARE = Obj(
    {
        "schema_version": NUM,
        "captured_at": STR,
        "capture": Obj(
            {
                "scope": Lit("inference_host"),
                "method": Lit("detected", "detected_and_edited", "manual"),
                "detector": Null(Obj({"name": STR, "version": STR})),
            }
        ),
        # Go's `RawName *string \`json:"raw_name"\``: no omitempty, so always there (null).
        "architecture": Obj({"name": STR, "raw_name": _NSTR}),
        "operating_system": Obj(
            {"family": STR, "name": _NSTR, "version": _NSTR, "kernel": _NSTR}, {"raw_family": _NSTR}
        ),
        "environment": Obj({"kind": STR, "name": _NSTR, "version": _NSTR}, {"raw_kind": _NSTR}),
        "cpu": Obj(
            {
                "vendor": _NSTR,
                "model": _NSTR,
                "socket_count": _NNUM,
                "physical_core_count": _NNUM,
                "logical_thread_count": _NNUM,
            }
        ),
        "memory": Obj({"capacity_bytes": NUM}),
        "accelerators": Arr(
            Obj(
                {
                    "index": NUM,
                    "kind": Lit("gpu", "npu", "other"),
                    "vendor": _NSTR,
                    "model": _NSTR,
                    "architecture": _NSTR,
                    "memory": Obj(
                        {
                            "kind": Lit("dedicated", "unified", "shared_system", "unknown"),
                            "capacity_bytes": _NNUM,
                        }
                    ),
                    "driver": Null(Obj({"name": _NSTR, "version": _NSTR})),
                    "power_limit_watts": _NNUM,
                },
                {"raw_kind": _NSTR},
            )
        ),
    }
)

# The event types `handleAPIEventMessage` acts on, and the shape of each one's `data`.
EVENTS: dict[str, _T] = {
    "modelStatus": Arr(MODEL),
    "logData": LOG_DATA,
    "activity": ACTIVITY_EVENT,
    "inflight": INFLIGHT,
    "uiConfig": UI_CONFIG,
    "profileChanged": PROFILE_CHANGED,
}


async def events(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """`/api/events` as the UI's `EventSource` and `handleAPIEventMessage` read it: each
    message's envelope `{type, data}` with `data` a JSON text, parsed and checked against the
    shape of its type (swapd's own types, such as `swap`, the UI ignores)."""
    buffer = b""
    async for chunk in resp.content.iter_any():
        buffer += chunk
        while b"\n\n" in buffer:
            raw, buffer = buffer.split(b"\n\n", 1)
            event, data = raw.split(b"\n", 1)
            assert event == b"event:message" and data.startswith(b"data:")
            envelope = json.loads(data[5:])
            check(envelope, Obj({"type": STR, "data": STR}), "envelope")
            kind, payload = envelope["type"], json.loads(envelope["data"])
            if kind in EVENTS:
                check(payload, EVENTS[kind], kind)
            yield kind, payload
