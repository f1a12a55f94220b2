"""`sleep`: how a model's server gives its GPU memory back without exiting, and takes it back
(opt-in, per model; docs/configuration.md, "sleep"; docs/guides/sleep-and-wake.md).

Written as a preset name (`sleep: vllm`), as a preset with some settings changed
(`sleep: {preset: vllm, stopAfter: 3600}`), or in full (`sleepEndpoints`, `wakeEndpoints`).
llmsnap's keys are read too, with llmsnap's meaning: `sleepMode: enable` with `sleepEndpoints` and
`wakeEndpoints` on the model, and the top-level `sleepRequestTimeout` and `wakeRequestTimeout`
(seconds each call may take, default 10, at least 1). Without either form a model has no sleep
setting, and nothing changes: it is stopped as before.

llama.cpp's server has no sleep call: it sleeps on its own after `--sleep-idle-seconds`, and
nothing in its HTTP API tells it to sleep now (its `POST /props` changes no such thing). The `cuda`
preset sleeps it (and any CUDA server) from outside, through the driver's checkpoint calls
(machinery/cuda_sleep.py); it sends no HTTP call, so it takes no endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ....ipc.routing_table import HttpCall, SleepMethod, SleepSetting, WakeRule
from .. import shape
from ..floor.issues import Report, describe
from ..floor.presets import Presets
from ..floor.yaml_nodes import Path
from .sleep_calls import read_calls, read_seconds, read_wake_rules

KEY = "sleep"
LLMSNAP_KEYS = ("sleepMode", "sleepEndpoints", "wakeEndpoints")
# llmsnap's least `sleepRequestTimeout` and `wakeRequestTimeout` (its default is sleep_calls.py's).
MIN_REQUEST_TIMEOUT = 1.0

_COMFYUI_FREE = '{"unload_models": true, "free_memory": true}'

# `cuda`'s default `lockTimeout`: a CUDA call in flight longer than this fails the sleep.
DEFAULT_LOCK_TIMEOUT = 10.0

# Each preset's calls, as its server documents them, with timeouts that fit a large model (a
# vLLM level-1 sleep copies the weights to CPU memory; a level-2 wake reads them from disk).
PRESETS: dict[str, SleepSetting] = {
    # vLLM with --enable-sleep-mode (and VLLM_SERVER_DEV_MODE=1 for the endpoints): level 1
    # offloads the weights to CPU memory and drops the KV cache.
    "vllm": SleepSetting(
        sleep=(HttpCall("/sleep?level=1", timeout=120.0),),
        wake=(HttpCall("/wake_up", timeout=120.0),),
        preset="vllm",
    ),
    # Level 2 drops the weights too: the wake reallocates them, reloads them from disk, then
    # reallocates the KV cache (vLLM's docs, "Sleep Mode").
    "vllm-level2": SleepSetting(
        sleep=(HttpCall("/sleep?level=2", timeout=120.0),),
        wake=(
            HttpCall("/wake_up?tags=weights", timeout=120.0),
            HttpCall("/collective_rpc", body='{"method": "reload_weights"}', timeout=600.0),
            HttpCall("/wake_up?tags=kv_cache", timeout=120.0),
            HttpCall("/reset_prefix_cache", timeout=60.0),
        ),
        preset="vllm-level2",
    ),
    # SGLang with --enable-memory-saver.
    "sglang": SleepSetting(
        sleep=(HttpCall("/release_memory_occupation", body="{}", timeout=120.0),),
        wake=(HttpCall("/resume_memory_occupation", body="{}", timeout=120.0),),
        preset="sglang",
    ),
    # ComfyUI unloads its models and frees its cache; the next job loads what it needs, so a
    # wake is the health check alone. Only a job needs the GPU: its page, websocket, polls,
    # settings and saved workflows keep being served asleep (ComfyUI's server answers them while
    # its models are freed). It queues a job at `POST /prompt`, and at `/api/prompt` since its
    # route prefix.
    "comfyui": SleepSetting(
        sleep=(HttpCall("/free", body=_COMFYUI_FREE, timeout=30.0),),
        wake=(),
        preset="comfyui",
        serves_asleep=True,
        wake_on=(WakeRule("POST", "/prompt"), WakeRule("POST", "/api/prompt")),
    ),
    # Any CUDA server (llama.cpp, whisper.cpp, a custom container): its processes that hold GPU
    # memory are locked and checkpointed by the driver (NVIDIA 570 and later), the memory copied
    # to host RAM; a wake restores and unlocks them, then the health check.
    "cuda": SleepSetting(
        sleep=(), preset="cuda", method=SleepMethod.CUDA, lock_timeout=DEFAULT_LOCK_TIMEOUT
    ),
}

# What a preset's server must be started with, looked for in the model's cmd and env.
_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm": (
        ("--enable-sleep-mode", "vLLM serves /sleep only when started with --enable-sleep-mode"),
        ("VLLM_SERVER_DEV_MODE=1", "vLLM's /sleep and /wake_up need VLLM_SERVER_DEV_MODE=1"),
    ),
    "sglang": (
        (
            "--enable-memory-saver",
            "SGLang releases its memory only when started with --enable-memory-saver",
        ),
    ),
}
_NEEDS["vllm-level2"] = _NEEDS["vllm"]

WRITTEN = Presets(PRESETS, shape.SleepMapping)


@dataclass(frozen=True)
class Timeouts:
    """The top level's `sleepRequestTimeout` and `wakeRequestTimeout` (None: not set)."""

    sleep: float | None = None
    wake: float | None = None


def one_form(body: dict[str, Any], path: Path, report: Report) -> dict[str, Any]:
    """A model's body without `sleep` and llmsnap's keys when it writes both, which is an error
    of its own: checked before the values are typed, so a wrong value of either is not reported
    beside it."""
    llmsnap = [k for k in LLMSNAP_KEYS if body.get(k) is not None]
    if body.get(KEY) is None or not llmsnap:
        return body
    report.error(
        (*path, llmsnap[0]),
        f"use either sleep or llmsnap's {', '.join(LLMSNAP_KEYS)}, not both",
        key=True,
    )
    return {k: v for k, v in body.items() if k != KEY and k not in LLMSNAP_KEYS}


def read_sleep(
    spec: shape.Model,
    body: Mapping[str, Any],
    path: Path,
    report: Report,
    timeouts: Timeouts,
) -> SleepSetting | None:
    """The model's sleep setting (None when it has none); `spec`: its typed section (its `sleep`
    None when unset, or after `typed.py` reported it), `body` for which form it writes. Problems
    go to `report`; a value `typed.py` reported stops the reading where it is read, as the
    reading's own first problem does."""
    if any(body.get(k) is not None for k in LLMSNAP_KEYS):
        setting = _llmsnap(spec, path, report, timeouts)
    elif spec.sleep is None:
        return None
    elif isinstance(spec.sleep, str):
        preset = WRITTEN.named(spec.sleep, (*path, KEY), report)
        setting = _with_timeouts(preset, timeouts, {}) if preset is not None else None
    else:
        setting = _mapping(spec.sleep, (*path, KEY), report, timeouts)
    if setting is not None and setting.preset in _NEEDS:
        _check_needs(setting.preset, body, path, report)
    return setting


def _mapping(
    value: shape.SleepMapping, where: Path, report: Report, top: Timeouts
) -> SleepSetting | None:
    ok, base = WRITTEN.base(value.preset, where, report)
    if not ok:
        return None
    own: dict[str, float] = {}
    for key, kind, written in (
        ("sleepRequestTimeout", "sleep", value.sleep_request_timeout),
        ("wakeRequestTimeout", "wake", value.wake_request_timeout),
    ):
        seconds = read_seconds(written, (*where, key), report, MIN_REQUEST_TIMEOUT)
        if seconds is False:
            return None
        if seconds is not None:
            own[kind] = seconds
    timeouts = Timeouts(own.get("sleep", top.sleep), own.get("wake", top.wake))
    calls: dict[str, tuple[HttpCall, ...] | None] = {}
    for key, written_calls, seconds in (
        ("sleepEndpoints", value.sleep_endpoints, timeouts.sleep),
        ("wakeEndpoints", value.wake_endpoints, timeouts.wake),
    ):
        calls[key] = None
        if written_calls is not None or report.typed_wrong((*where, key)):
            calls[key] = read_calls(written_calls, (*where, key), report, seconds)
            if calls[key] is None:
                return None
    sleep, wake = calls["sleepEndpoints"], calls["wakeEndpoints"]
    if base is not None and base.method is SleepMethod.CUDA:
        return _cuda(value, base, where, report)
    if value.lock_timeout is not None or report.typed_wrong((*where, "lockTimeout")):
        report.error((*where, "lockTimeout"), "only preset cuda takes a lockTimeout", key=True)
        return None
    if sleep is None and base is None:
        report.error(where, "needs sleepEndpoints (the calls that put it to sleep) or a preset")
        return None
    if not (sleep if sleep is not None else base.sleep if base else ()):
        report.error((*where, "sleepEndpoints"), "lists no call: nothing would put it to sleep")
        return None
    stop_after = read_seconds(value.stop_after, (*where, "stopAfter"), report, 0.0)
    if stop_after is False or report.typed_wrong((*where, "servesAsleep")):
        return None
    start = base if base is not None else SleepSetting(sleep=sleep or ())
    start = _with_timeouts(start, timeouts, {"sleep": sleep is not None, "wake": wake is not None})
    serves_asleep = value.serves_asleep if value.serves_asleep is not None else start.serves_asleep
    wake_on = start.wake_on
    if value.wake_on is None and report.typed_wrong((*where, "wakeOn")):
        return None
    if value.wake_on is not None:
        wake_on = read_wake_rules(value.wake_on, (*where, "wakeOn"), report)
        if wake_on is None:
            return None
        if not serves_asleep:
            report.error(
                (*where, "wakeOn"),
                "needs servesAsleep: true (a server that serves nothing while asleep wakes for "
                "every request)",
            )
            return None
    return msgspec.structs.replace(
        start,
        sleep=sleep if sleep is not None else start.sleep,
        wake=wake if wake is not None else start.wake,
        stop_after=stop_after if stop_after is not None else start.stop_after,
        serves_asleep=serves_asleep,
        wake_on=wake_on if serves_asleep else None,
    )


def _cuda(
    value: shape.SleepMapping, base: SleepSetting, where: Path, report: Report
) -> SleepSetting | None:
    """`{preset: cuda, ...}`: no calls to change (the driver's calls are its sleep and wake),
    its `lockTimeout` and `stopAfter`."""
    for key, written in (
        ("sleepEndpoints", value.sleep_endpoints),
        ("wakeEndpoints", value.wake_endpoints),
        ("sleepRequestTimeout", value.sleep_request_timeout),
        ("wakeRequestTimeout", value.wake_request_timeout),
    ):
        if written is not None:
            report.error(
                (*where, key), "preset cuda sends no HTTP call: it takes no endpoints", key=True
            )
            return None
    for key, on in (("servesAsleep", value.serves_asleep), ("wakeOn", value.wake_on)):
        if report.typed_wrong((*where, key)):
            return None
        if on:
            report.error(
                (*where, key), "a checkpointed server serves nothing while asleep", key=True
            )
            return None
    lock = read_seconds(value.lock_timeout, (*where, "lockTimeout"), report, 0.0)
    stop_after = read_seconds(value.stop_after, (*where, "stopAfter"), report, 0.0)
    if lock is False or stop_after is False:
        return None
    if lock == 0:
        report.error((*where, "lockTimeout"), "must be more than 0 seconds")
        return None
    return msgspec.structs.replace(
        base,
        lock_timeout=float(lock) if lock is not None else base.lock_timeout,
        stop_after=float(stop_after) if stop_after is not None else base.stop_after,
    )


def _with_timeouts(
    setting: SleepSetting, timeouts: Timeouts, written: Mapping[str, bool]
) -> SleepSetting:
    """A preset's calls with the timeouts the config sets over them (the calls the config wrote
    itself (`written`) already have theirs)."""

    def over(calls: tuple[HttpCall, ...], seconds: float | None) -> tuple[HttpCall, ...]:
        if seconds is None:
            return calls
        return tuple(msgspec.structs.replace(c, timeout=seconds) for c in calls)

    return msgspec.structs.replace(
        setting,
        sleep=setting.sleep if written.get("sleep") else over(setting.sleep, timeouts.sleep),
        wake=setting.wake if written.get("wake") else over(setting.wake, timeouts.wake),
    )


def _llmsnap(
    spec: shape.Model, path: Path, report: Report, timeouts: Timeouts
) -> SleepSetting | None:
    """llmsnap's form: `sleepMode: enable` (or `disable`, the default: no sleep) with
    `sleepEndpoints` and `wakeEndpoints`, both required when enabled."""
    mode = spec.sleep_mode
    where = (*path, "sleepMode")
    if report.typed_wrong(where):
        return None
    if mode is not None and mode not in ("enable", "disable"):
        report.error(where, f"invalid sleepMode value {describe(mode)}: must be enable or disable")
        return None
    sleep = read_calls(spec.sleep_endpoints, (*path, "sleepEndpoints"), report, timeouts.sleep)
    wake = read_calls(spec.wake_endpoints, (*path, "wakeEndpoints"), report, timeouts.wake)
    if sleep is None or wake is None:
        return None
    if mode != "enable":
        if sleep or wake:
            report.warn(
                (*path, "sleepEndpoints" if sleep else "wakeEndpoints"),
                "sleepMode is not enable, so the model is stopped, never put to sleep "
                "(llmsnap's meaning); add sleepMode: enable to use these calls",
            )
        return None
    for key, calls in (("sleepEndpoints", sleep), ("wakeEndpoints", wake)):
        if not calls:
            report.error(where, f"{key} required when sleepMode is 'enable'")
    if not sleep or not wake:
        return None
    return SleepSetting(sleep=sleep, wake=wake)


def request_timeout(value: float | None, where: Path, report: Report) -> float | None:
    """A top-level `sleepRequestTimeout` or `wakeRequestTimeout` (None: not set)."""
    seconds = read_seconds(value, where, report, MIN_REQUEST_TIMEOUT)
    return None if seconds is None or seconds is False else float(seconds)


def _check_needs(preset: str, body: Mapping[str, Any], path: Path, report: Report) -> None:
    """A preset whose server needs a flag its cmd (or env) does not have: a warning, since the
    flag may come another way (a wrapper script, the image's defaults)."""
    cmd, env = body.get("cmd"), body.get("env")
    words = [cmd if isinstance(cmd, str) else "", *(env if isinstance(env, list) else [])]
    text = " ".join(str(word) for word in words)
    for flag, why in _NEEDS[preset]:
        if flag not in text:
            report.warn((*path, KEY), f"{why}; neither cmd nor env has {flag}")
