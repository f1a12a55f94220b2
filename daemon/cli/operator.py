"""`swapd status`, `swapd load`, `swapd unload`, `swapd sleep`, `swapd reload`: ask the running
daemon over its ROUTER."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from ...ipc.causes import WaitCause
from ...ipc.client import DaemonClient, DaemonUnavailable
from ...ipc.endpoints import Endpoints, default_run_dir
from ...ipc.messages import (
    Ensure,
    Error,
    Ok,
    Ready,
    Reload,
    Sleep,
    Status,
    StatusReply,
    Unload,
)
from ...ipc.model_status import ModelStatus, Waiting
from ...ipc.states import LEAVING_STATES, ModelState
from ...ipc.status_doc import status_json

STATUS_TIMEOUT = 5.0
# An unload waits for drains (a long stream is never cut) and for cmdStop.
UNLOAD_TIMEOUT = 600.0
# A load waits for the swap (the drains and stops it needs) and the model's start; the daemon
# answers a start that takes too long itself (healthCheckTimeout), so this is only a backstop.
LOAD_TIMEOUT = 3600.0


def _ago(when: float, now: float) -> str:
    return _duration(now - when) + " ago" if when else "-"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _gpus(m: ModelStatus, reply: StatusReply) -> str:
    if m.gpus:
        return ",".join(m.gpus)
    # A model without `gpus` sees every GPU of the host; a host without one has none to show.
    return "all" if m.pid and reply.gpus else "-"


def _gpu_name(uuid: str, reply: StatusReply) -> str:
    for g in reply.gpus:
        if g.uuid.casefold() == uuid.casefold():
            return f"GPU {g.index}"
    return uuid


def _footprint_note(m: ModelStatus, reply: StatusReply) -> str:
    learned = ", ".join(
        f"{n / 2**30:.1f} GiB on {_gpu_name(g, reply)}" for g, n in sorted(m.footprint.items())
    )
    text = f"{m.model}: footprint {learned or 'not measured yet'}"
    if m.placed_by_memory:
        text += f" (placed by memory, from: {m.footprint_source})"
    if m.reserved:
        reserved = ", ".join(
            f"{n / 2**30:.1f} GiB on {_gpu_name(g, reply)}" for g, n in sorted(m.reserved.items())
        )
        text += f"; reserved {reserved}"
    return text


def _ttl_left(m: ModelStatus) -> str:
    if m.ttl_left is not None:
        return _duration(m.ttl_left)
    # Its busyCheck holds the TTL: it counts again once the upstream is idle.
    return "held (busy)" if m.ttl > 0 and m.busy is not None and m.busy.busy else "-"


def waiting_words(w: Waiting, now: float) -> str:
    """`a swap to it waits (for 12s): busy: a (at most until 14:03:07)`, or `... (for 1s):
    serving a's queue first; at most 4.2 s more` (collation)."""
    text = f"a swap to it waits (for {_duration(now - w.since)}): {w.reason}"
    if w.cause is WaitCause.COLLATION and w.serving and not w.holding:
        text = f"a swap to it waits (for {_duration(now - w.since)}): "
        text += f"serving {', '.join(w.serving)}'s queue first"
        if w.until:
            text += f"; at most {max(0.0, w.until - now):.1f} s more"
        return text
    if w.until:
        text += f" (at most until {time.strftime('%H:%M:%S', time.localtime(w.until))})"
    return text


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _residual_words(residual: dict[str, int] | None, reply: StatusReply) -> str:
    """What an asleep model holds on the GPUs, as measured; "not measured" where nothing was
    (no GPU inventory), never "nothing"."""
    if residual is None:
        return "its GPU memory not measured (no GPU inventory)"
    held = ", ".join(
        f"{n / 2**20:.0f} MiB on {_gpu_name(g, reply)}" for g, n in sorted(residual.items())
    )
    return f"holding {held or 'nothing on the GPUs'}"


def _sleep_note(m: ModelStatus, reply: StatusReply) -> str:
    sleep = m.sleep
    assert sleep is not None
    text = f"{m.model}: sleep {sleep.preset or 'written out'}"
    if m.state == ModelState.ASLEEP:
        text += f"; asleep, {_residual_words(sleep.residual, reply)}"
        if sleep.stop_left is not None:
            text += f"; stopped in {_duration(sleep.stop_left)} unless used"
        elif sleep.stop_after > 0 and sleep.websockets:
            open_ = (
                "1 websocket is" if sleep.websockets == 1 else f"{sleep.websockets} websockets are"
            )
            text += f"; kept from its stopAfter while {open_} open"
    text += (
        f"; last sleep {_seconds(sleep.last_sleep_s)}, last wake {_seconds(sleep.last_wake_s)}"
        f" ({sleep.sleeps} sleeps, {sleep.wakes} wakes"
        + (f", {sleep.verified} verified" if sleep.verified else "")
        + ")"
    )
    if sleep.last_failure:
        text += f"; last failure: {sleep.last_failure}"
    return text


def learned_note(m: ModelStatus) -> str:
    """`a: usually followed by b (after 2.50s); 80% of its weight files in the page cache (...)`,
    or "" when nothing is likely and no weight file is measured."""
    parts = []
    if m.learned is not None and m.learned.likely_next:
        gap = next(
            (f.median_gap for f in m.learned.followers if f.model == m.learned.likely_next), None
        )
        parts.append(f"usually followed by {m.learned.likely_next} (after {_seconds(gap)})")
    cache = m.page_cache
    if cache is not None:
        parts.append(
            f"{cache.fraction:.0%} of its weight files in the page cache"
            f" ({cache.cached / 2**30:.1f} of {cache.size / 2**30:.1f} GiB)"
        )
    return f"{m.model}: {'; '.join(parts)}" if parts else ""


def _kv_note(m: ModelStatus) -> str:
    kv = m.kv
    assert kv is not None
    text = f"{m.model}: kvCache {kv.preset or 'written out'}; "
    if kv.saved_at:
        slots = ",".join(map(str, kv.slots))
        text += f"saved slots {slots} ({kv.tokens} tokens, {kv.bytes / 2**20:.1f} MiB)"
    else:
        text += "nothing saved"
    text += f" ({kv.saves} saves, {kv.restores} restores)"
    if kv.short:
        text += f"; its last restore was short ({kv.restored_tokens} tokens back)"
    if kv.last_failure:
        text += f"; last failure: {kv.last_failure}"
    return text


def render_table(reply: StatusReply, now: float | None = None) -> str:
    now = time.time() if now is None else now
    rows = [("MODEL", "STATE", "PID", "PORT", "GPUS", "UPTIME", "LAST ACTIVITY", "TTL LEFT")]
    notes: list[str] = []
    for m in reply.models:
        up = (
            _duration(now - m.since)
            if m.state in (ModelState.READY, ModelState.DRAINING) and m.since
            else "-"
        )
        rows.append(
            (
                m.model,
                m.state
                + (f" ({m.in_flight} in flight)" if m.in_flight else "")
                + (" (busy)" if m.busy is not None and m.busy.busy else ""),
                str(m.pid) if m.pid else "-",
                str(m.port) if m.port else "-",
                _gpus(m, reply),
                up,
                _ago(m.last_activity, now),
                _ttl_left(m),
            )
        )
        if m.busy is not None and (m.busy.busy or m.busy.error or m.busy.holding):
            notes.append(f"{m.model}: {m.busy.message}")
        if m.waiting is not None:
            notes.append(f"{m.model}: {waiting_words(m.waiting, now)}")
        if m.reason and m.state in (ModelState.FAILED, ModelState.STOPPED, *LEAVING_STATES):
            notes.append(f"{m.model}: {m.reason}")
        for p in m.gpu_lingering:
            used = f"{p.used_bytes / 2**20:.0f} MiB" if p.used_bytes is not None else "? MiB"
            notes.append(f"{m.model}: LINGERING pid {p.pid} holds {used} on GPU {p.gpu}")
        if m.lingering is not None:
            notes.append(f"{m.model}: lingering on port {m.lingering.port}: {m.lingering.message}")
        if m.placed_by_memory or m.footprint:
            notes.append(_footprint_note(m, reply))
        if m.sleep is not None and (m.sleep.sleeps or m.state == ModelState.ASLEEP):
            notes.append(_sleep_note(m, reply))
        if learned := learned_note(m):
            notes.append(learned)
        if m.kv is not None and (m.kv.saves or m.kv.saved_at or m.kv.failures):
            notes.append(_kv_note(m))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    lines.insert(
        0,
        f"daemon pid {reply.pid}, up {_duration(reply.uptime)}, GPUs: "
        + (
            ", ".join(
                f"{g.index} {g.name} {g.used_bytes / 2**20:.0f}/{g.total_bytes / 2**20:.0f} MiB"
                f" ({g.free_bytes / 2**20:.0f} MiB free,"
                f" {g.reserved_bytes / 2**20:.0f} MiB reserved)"
                for g in reply.gpus
            )
            or (
                "not measured (no GPU inventory)"
                if reply.gpu_backend in ("", "none")
                else f"none ({reply.gpu_backend})"
            )
        ),
    )
    return "\n".join(lines + notes)


async def _call(run_dir: Path, make: Any, timeout: float) -> Any:
    client = DaemonClient(Endpoints(run_dir).daemon)
    try:
        return await client.request(make, timeout=timeout)
    finally:
        client.close()


def main(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir) if args.run_dir is not None else default_run_dir()
    if not (run_dir / "daemon.sock").exists():
        print(f"swapd: no swapd running in {run_dir} (no daemon.sock)", file=sys.stderr)
        return 1
    try:
        if args.command == "status":
            reply = asyncio.run(_call(run_dir, lambda i: Status(id=i), STATUS_TIMEOUT))
            if isinstance(reply, StatusReply):
                if args.json:
                    print(json.dumps(status_json(reply), indent=2))
                else:
                    print(render_table(reply))
                return 0
        elif args.command == "load":
            reply = asyncio.run(
                _call(run_dir, lambda i: Ensure(id=i, model=args.model, cause="load"), LOAD_TIMEOUT)
            )
            if isinstance(reply, Ready):
                print(f"{reply.model} is ready at {reply.upstream}")
                return 0
        elif args.command == "unload":
            reply = asyncio.run(
                _call(
                    run_dir, lambda i: Unload(id=i, model=args.model, now=args.now), UNLOAD_TIMEOUT
                )
            )
        elif args.command == "sleep":
            reply = asyncio.run(
                _call(run_dir, lambda i: Sleep(id=i, model=args.model), UNLOAD_TIMEOUT)
            )
            if isinstance(reply, Ok):
                if reply.message == ModelState.STOPPED:
                    print(f"{args.model} was stopped (its sleep failed: see its log)")
                    return 1
                if reply.message == ModelState.ASLEEP:
                    print(f"{args.model} is asleep")
                else:
                    print(f"{args.model} fell asleep; a request woke it at once ({reply.message})")
                return 0
        elif args.command == "reload":
            reply = asyncio.run(_call(run_dir, lambda i: Reload(id=i), UNLOAD_TIMEOUT))
        else:
            print(f"swapd: unknown command {args.command}", file=sys.stderr)
            return 2
    except DaemonUnavailable as exc:
        print(f"swapd: {exc} (run dir {run_dir})", file=sys.stderr)
        return 1
    if isinstance(reply, Ok):
        # A reload's report starts with check-config's warnings, which go where it prints them.
        lines = (reply.message or "ok").splitlines()
        for line in lines:
            print(line, file=sys.stderr if line.startswith("warning: ") else sys.stdout)
        return 0
    if isinstance(reply, Error):
        # A refused reload's message ends with the file's warnings: first, as check-config does.
        told = reply.message.splitlines() or [""]
        kept = [line for line in told if not line.startswith("warning: ")]
        for line in told:
            if line.startswith("warning: "):
                print(line, file=sys.stderr)
        print("swapd: " + "\n".join(kept), file=sys.stderr)
        for line in reply.log_tail:  # a failed start: the last lines of its output
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"swapd: unexpected reply {type(reply).__name__}", file=sys.stderr)
    return 1


__all__ = ["ModelStatus", "main", "render_table"]
