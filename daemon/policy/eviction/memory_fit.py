"""GPU placement by memory, the fit itself: where a `gpus: auto` model runs, and which models make
room for it.

A pure function of (the model to start with its footprint, the models that hold GPU memory now,
what each GPU has) -> `Fit` (GPUs to use, models to evict) or `NoFit` (why, how much is needed,
what holds it). The eviction policy `memory.py` calls it; docs/gpus.md explains it to users. The
rules:

* a GPU's room is its total, less what processes swapd does not own use (`Gpu.foreign`), less
  what each resident model holds there (its reservation), less `margin`. A GPU is never planned
  past that, so reservations plus foreign memory plus the margin never exceed the total;
* a footprint is per GPU (`need`: bytes on each of its GPUs, one entry per GPU). Never measured
  and no hint (`need` None): the model gets every GPU it may use, each cleared of evictable models;
* evicted are only idle models that are not persistent: the fewest, and among as few the least
  recently used; a fit that evicts nothing is always taken when one exists;
* between fits that evict the same, prefer the GPUs the model ran on last, then the tightest fit
  (the one that leaves the least room), so that big holes stay for big models; then GPU order.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

GIB = 1024**3
MIB = 1024**2
# Left free on every GPU a placement uses: CUDA context growth, allocator fragmentation. The daemon
# passes the config's `vramMargin`, whose default (config/model.py) is this same figure.
DEFAULT_MARGIN = 512 * MIB
# Above this many eviction candidates, the exact search for the fewest gives way to LRU greed.
EXACT_CANDIDATES = 10


@dataclass(frozen=True)
class Gpu:
    id: str  # canonical (UUID, case-folded) as `gpu.canonical_gpu_ids` gives it
    index: int
    total: int
    # As NVML spells the UUID (what a placed model gets as its `gpus`); "" when it is `id`.
    uuid: str = ""
    # Used by processes swapd does not own (and driver memory NVML lists for no process).
    foreign: int = 0
    # Who holds the foreign memory, for the reason (e.g. "pid 4121 (3.0 GiB)").
    foreign_holders: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resident:
    """A model that holds GPU memory: started, starting, or being stopped."""

    model: str
    held: Mapping[str, int]  # GPU id -> bytes reserved (its footprint, or what it really uses)
    last_use: float = 0.0
    busy: bool = False  # requests in flight, starting, or stopping
    persistent: bool = False  # never evicted by a placement


@dataclass(frozen=True)
class Request:
    model: str
    need: tuple[int, ...] | None  # bytes on each GPU it uses; None = unknown (clear them all)
    may_use: tuple[str, ...] | None = None  # GPU ids it may run on; None = every GPU
    prefer: tuple[str, ...] = ()  # where it ran last


@dataclass(frozen=True)
class Fit:
    gpus: tuple[str, ...]
    evict: tuple[str, ...]
    reason: str
    amounts: tuple[int, ...] = ()  # bytes planned on each of `gpus`; () = the GPUs whole


@dataclass(frozen=True)
class NoFit:
    reason: str
    needed: int  # bytes, the largest per-GPU need (0 when unknown)
    # Whether waiting can help: evicting busy models (once idle) would make room.
    wait: bool = False
    holders: tuple[str, ...] = field(default=())


def room(gpu: Gpu, residents: Collection[Resident], margin: int) -> int:
    held = sum(r.held.get(gpu.id, 0) for r in residents)
    return gpu.total - gpu.foreign - held - margin


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def place(
    request: Request,
    residents: Sequence[Resident],
    gpus: Sequence[Gpu],
    *,
    margin: int = DEFAULT_MARGIN,
) -> Fit | NoFit:
    allowed = [g for g in gpus if request.may_use is None or g.id in request.may_use]
    others = [r for r in residents if r.model != request.model]
    if not allowed:
        return NoFit(f"{request.model}: no GPU to place it on", 0)
    if request.need is None:
        return _clear_all(request, others, allowed)
    if len(request.need) > len(allowed):
        return NoFit(
            f"{request.model} needs {len(request.need)} GPUs; it may use {len(allowed)}",
            max(request.need),
        )
    evictable = sorted(
        (r for r in others if not r.busy and not r.persistent), key=lambda r: (r.last_use, r.model)
    )
    best: tuple[tuple[object, ...], Fit] | None = None
    for chosen in itertools.combinations(allowed, len(request.need)):
        found = _fit_on(request, chosen, others, evictable, margin)
        if found is None:
            continue
        evict, assignment = found
        preferred = -sum(1 for g in chosen if g.id in request.prefer)
        left = sum(room(g, _without(others, evict), margin) - n for g, n in assignment)
        key = (
            len(evict),
            [r.last_use for r in evict],
            preferred,
            left,
            [g.index for g in chosen],
        )
        if best is None or key < best[0]:
            fit = Fit(
                gpus=tuple(g.id for g, _ in assignment),
                evict=tuple(r.model for r in evict),
                reason=_fit_reason(request, assignment, others, evict, margin),
                amounts=tuple(n for _, n in assignment),
            )
            best = (key, fit)
    if best is not None:
        return best[1]
    return _no_fit(request, others, allowed, margin)


def _without(residents: Sequence[Resident], gone: Collection[Resident]) -> list[Resident]:
    names = {r.model for r in gone}
    return [r for r in residents if r.model not in names]


def _assign(
    need: Sequence[int], chosen: Sequence[Gpu], residents: Sequence[Resident], margin: int
) -> list[tuple[Gpu, int]] | None:
    """The biggest need on the roomiest GPU, and so on; None when one does not fit."""
    gpus = sorted(chosen, key=lambda g: (-room(g, residents, margin), g.index))
    pairs = list(zip(gpus, sorted(need, reverse=True), strict=True))
    if all(room(g, residents, margin) >= n for g, n in pairs):
        return sorted(pairs, key=lambda p: p[0].index)
    return None


def _fit_on(
    request: Request,
    chosen: Sequence[Gpu],
    residents: Sequence[Resident],
    evictable: Sequence[Resident],
    margin: int,
) -> tuple[list[Resident], list[tuple[Gpu, int]]] | None:
    assert request.need is not None
    ids = {g.id for g in chosen}
    useful = [r for r in evictable if any(r.held.get(i, 0) > 0 for i in ids)]
    if len(useful) <= EXACT_CANDIDATES:
        # Fewest first; `combinations` yields the least recently used sets of a size first.
        for size in range(len(useful) + 1):
            for fewest in itertools.combinations(useful, size):
                assignment = _assign(request.need, chosen, _without(residents, fewest), margin)
                if assignment is not None:
                    return list(fewest), assignment
        return None
    evict: list[Resident] = []
    for candidate in [None, *useful]:
        if candidate is not None:
            evict.append(candidate)
        assignment = _assign(request.need, chosen, _without(residents, evict), margin)
        if assignment is not None:
            return evict, assignment
    return None


def _clear_all(
    request: Request, residents: Sequence[Resident], allowed: Sequence[Gpu]
) -> Fit | NoFit:
    """Unknown footprint: every allowed GPU, with every evictable model on them stopped."""
    ids = {g.id for g in allowed}
    on = [r for r in residents if any(r.held.get(i, 0) > 0 for i in ids)]
    busy = [r.model for r in on if r.busy and not r.persistent]
    if busy:
        return NoFit(
            f"{request.model} has no measured footprint and no vram hint, so it needs its GPUs "
            f"cleared; busy now: {', '.join(sorted(busy))}",
            0,
            wait=True,
            holders=tuple(sorted(busy)),
        )
    evict = sorted(r.model for r in on if not r.persistent)
    kept = sorted(r.model for r in on if r.persistent)
    reason = (
        f"{request.model}: no measured footprint and no vram hint: every GPU it may use, cleared"
        + (f"; evicting {', '.join(evict)}" if evict else "")
        + (f"; persistent {', '.join(kept)} stay" if kept else "")
    )
    return Fit(gpus=tuple(g.id for g in allowed), evict=tuple(evict), reason=reason)


def _fit_reason(
    request: Request,
    assignment: Sequence[tuple[Gpu, int]],
    residents: Sequence[Resident],
    evict: Sequence[Resident],
    margin: int,
) -> str:
    where = "; ".join(
        f"GPU {g.index}: needs {gib(n)}, room {gib(room(g, residents, margin))}"
        + (
            f" ({gib(room(g, _without(residents, evict), margin))} after evictions)"
            if evict
            else ""
        )
        for g, n in assignment
    )
    evicted = (
        f"; evicting {', '.join(r.model for r in evict)} (least recently used)" if evict else ""
    )
    return f"{request.model} placed: {where}{evicted}"


def _holder_text(gpu: Gpu, residents: Sequence[Resident]) -> list[str]:
    parts = []
    for r in residents:
        held = r.held.get(gpu.id, 0)
        if held <= 0:
            continue
        kind = "persistent " if r.persistent else "busy " if r.busy else ""
        parts.append(f"{kind}model {r.model} {gib(held)}")
    if gpu.foreign > 0:
        who = f" ({', '.join(gpu.foreign_holders)})" if gpu.foreign_holders else ""
        parts.append(f"processes swapd does not own {gib(gpu.foreign)}{who}")
    return parts


def _no_fit(
    request: Request, residents: Sequence[Resident], allowed: Sequence[Gpu], margin: int
) -> NoFit:
    assert request.need is not None
    needed = max(request.need)
    # Would it fit once the busy (not persistent) models are idle and evictable?
    idle_later = [r for r in residents if not r.persistent]
    later = [r for r in residents if r.persistent]
    wait = any(
        _assign(request.need, chosen, later, margin) is not None
        for chosen in itertools.combinations(allowed, len(request.need))
    ) and any(r.busy for r in idle_later)
    per_gpu = "; ".join(
        f"GPU {g.index} ({gib(g.total)}): {', '.join(_holder_text(g, residents)) or 'nothing'}"
        for g in allowed
    )
    shape = gib(needed) if len(request.need) == 1 else f"{len(request.need)} x up to {gib(needed)}"
    holders = tuple(
        sorted({r.model for r in residents if any(r.held.get(g.id, 0) for g in allowed)})
    )
    return NoFit(
        f"{request.model} needs {shape} (plus a {gib(margin)} margin) and no GPU has room, even "
        f"after evicting every idle model: {per_gpu}",
        needed,
        wait=wait,
        holders=holders,
    )
