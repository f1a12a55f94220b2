"""Reload diffing: which loaded models a new config changes, and the `${PORT}`s that carry over.

A loaded model keeps running when its definition (`definition_hash`: cmd, cmdStop, proxy,
checkEndpoint, env, gpus and port) is the same in the new config; one whose definition changed, or
that the new config removed, is drained and stopped. So that adding or removing a model does not
change the definition of the others, every model the old config knew keeps its `${PORT}`, and a
running model keeps the port its process listens on; only new models get new (unused) ports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def changed(loaded: Mapping[str, str], fresh: Mapping[str, str]) -> list[str]:
    """The ids of the loaded models (id -> the definition hash they run) whose definition the new
    config (id -> hash) changed or removed."""
    return [mid for mid, definition in loaded.items() if fresh.get(mid) != definition]


def ports_to_keep(
    configured: Mapping[str, int | None], running: Iterable[tuple[str, int | None]]
) -> dict[str, int]:
    """id -> the `${PORT}` it keeps: the configured port of every model, overridden by the port
    its running process was started with."""
    keep = {mid: port for mid, port in configured.items() if port is not None}
    for mid, port in running:
        if port is not None:
            keep[mid] = port
    return keep
