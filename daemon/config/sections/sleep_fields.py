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

WRITTEN = Presets(
    PRESETS,
    (
        "preset",
        "sleepEndpoints",
        "wakeEndpoints",
        "sleepRequestTimeout",
        "wakeRequestTimeout",
        "stopAfter",
        "servesAsleep",
        "wakeOn",
        "lockTimeout",
    ),
)


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
    value: str | dict[str, Any] | None,
    body: Mapping[str, Any],
    path: Path,
    report: Report,
    timeouts: Timeouts,
) -> SleepSetting | None:
    """The model's sleep setting (None when it has none); `value`: its typed `sleep` (None when
    unset, or after `typed.py` reported its type), `body` for llmsnap's keys. Problems go to
    `report`."""
    if any(body.get(k) is not None for k in LLMSNAP_KEYS):
        setting = _llmsnap(body, path, report, timeouts)
    elif value is None:
        return None
    elif isinstance(value, str):
        preset = WRITTEN.named(value, (*path, KEY), report)
        setting = _with_timeouts(preset, timeouts, {}) if preset is not None else None
    else:
        setting = _mapping(value, (*path, KEY), report, timeouts)
    if setting is not None and setting.preset in _NEEDS:
        _check_needs(setting.preset, body, path, report)
    return setting


def _mapping(
    value: Mapping[str, Any], where: Path, report: Report, top: Timeouts
) -> SleepSetting | None:
    ok, base = WRITTEN.base(value, where, report)
    if not ok:
        return None
    own: dict[str, float] = {}
    for key, kind in (("sleepRequestTimeout", "sleep"), ("wakeRequestTimeout", "wake")):
        seconds = read_seconds(value.get(key), (*where, key), report, MIN_REQUEST_TIMEOUT)
        if seconds is False:
            return None
        if seconds is not None:
            own[kind] = seconds
    timeouts = Timeouts(own.get("sleep", top.sleep), own.get("wake", top.wake))
    sleep = wake = None
    if value.get("sleepEndpoints") is not None:
        sleep = read_calls(
            value["sleepEndpoints"], (*where, "sleepEndpoints"), report, timeouts.sleep
        )
        if sleep is None:
            return None
    if value.get("wakeEndpoints") is not None:
        wake = read_calls(value["wakeEndpoints"], (*where, "wakeEndpoints"), report, timeouts.wake)
        if wake is None:
            return None
    if base is not None and base.method is SleepMethod.CUDA:
        return _cuda(value, base, where, report)
    if value.get("lockTimeout") is not None:
        report.error((*where, "lockTimeout"), "only preset cuda takes a lockTimeout", key=True)
        return None
    if sleep is None and base is None:
        report.error(where, "needs sleepEndpoints (the calls that put it to sleep) or a preset")
        return None
    if not (sleep if sleep is not None else base.sleep if base else ()):
        report.error((*where, "sleepEndpoints"), "lists no call: nothing would put it to sleep")
        return None
    stop_after = read_seconds(value.get("stopAfter"), (*where, "stopAfter"), report, 0.0)
    serves = value.get("servesAsleep")
    if serves is not None and not isinstance(serves, bool):
        report.error((*where, "servesAsleep"), f"expected true or false, got {describe(serves)}")
        return None
    if stop_after is False:
        return None
    start = base if base is not None else SleepSetting(sleep=sleep or ())
    start = _with_timeouts(start, timeouts, {"sleep": sleep is not None, "wake": wake is not None})
    serves_asleep = serves if serves is not None else start.serves_asleep
    wake_on = start.wake_on
    if value.get("wakeOn") is not None:
        wake_on = read_wake_rules(value["wakeOn"], (*where, "wakeOn"), report)
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
    value: Mapping[str, Any], base: SleepSetting, where: Path, report: Report
) -> SleepSetting | None:
    """`{preset: cuda, ...}`: no calls to change (the driver's calls are its sleep and wake),
    its `lockTimeout` and `stopAfter`."""
    for key in ("sleepEndpoints", "wakeEndpoints", "sleepRequestTimeout", "wakeRequestTimeout"):
        if value.get(key) is not None:
            report.error(
                (*where, key), "preset cuda sends no HTTP call: it takes no endpoints", key=True
            )
            return None
    for key in ("servesAsleep", "wakeOn"):
        if value.get(key):
            report.error(
                (*where, key), "a checkpointed server serves nothing while asleep", key=True
            )
            return None
    lock = read_seconds(value.get("lockTimeout"), (*where, "lockTimeout"), report, 0.0)
    stop_after = read_seconds(value.get("stopAfter"), (*where, "stopAfter"), report, 0.0)
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
    body: Mapping[str, Any], path: Path, report: Report, timeouts: Timeouts
) -> SleepSetting | None:
    """llmsnap's form: `sleepMode: enable` (or `disable`, the default: no sleep) with
    `sleepEndpoints` and `wakeEndpoints`, both required when enabled."""
    mode = body.get("sleepMode")
    where = (*path, "sleepMode")
    if mode is not None and mode not in ("enable", "disable"):
        report.error(where, f"invalid sleepMode value {describe(mode)}: must be enable or disable")
        return None
    sleep = read_calls(
        body.get("sleepEndpoints"), (*path, "sleepEndpoints"), report, timeouts.sleep, llmsnap=True
    )
    wake = read_calls(
        body.get("wakeEndpoints"), (*path, "wakeEndpoints"), report, timeouts.wake, llmsnap=True
    )
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
