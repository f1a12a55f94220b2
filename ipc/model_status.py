"""A model's state as the daemon sees it, and the GPUs it runs on (`StateChanged`, `status`)."""

from __future__ import annotations

import msgspec

from .causes import WaitCause
from .states import ModelState, StartStep


class LingeringProcess(msgspec.Struct, frozen=True):
    gpu: str
    pid: int
    used_bytes: int | None = None


class Lingering(msgspec.Struct, frozen=True):
    """A stopped model's port still listened on (a `docker run` without `cmdStop` leaves its
    container serving): who holds it, where the system shows it, and what to do about it."""

    port: int
    pid: int | None = None
    command: str | None = None
    message: str = ""


class Busy(msgspec.Struct, frozen=True):
    """What a model's `busyCheck` last found (its own server's work queue); None without one."""

    busy: bool
    jobs: int = 0
    message: str = ""  # "busy (upstream reports 1 running job)", "idle", ...
    words: str = ""  # what the reading found: "upstream reports 1 running job"
    since: float = 0.0  # wall clock: when the current busy, idle or failing spell began
    checked_at: float = 0.0  # wall clock of the last poll
    error: str = ""  # the last poll failed (counted as idle)
    holding: tuple[str, ...] = ()  # the targets of swaps that wait for it to turn idle
    hold_until: float = 0.0  # wall clock: when the last of them goes ahead anyway


class Waiting(msgspec.Struct, frozen=True):
    """A swap to this model is queued and waits (the scheduler parked it): for what, since when,
    and, where a busy model holds it, which and until when at the latest."""

    # The scheduler's words: `busy: a` (busyCheck), `requests in flight for a (collation)`,
    # `behind the swap to c in the queue`, `a is being stopped`, no room on the GPUs, ...
    reason: str
    since: float = 0.0  # wall clock: when the swap was queued (its first request came)
    holding: tuple[str, ...] = ()  # the busy models (busyCheck) it waits for
    until: float = 0.0  # wall clock: when it goes ahead anyway at the latest (0: not bounded)
    # Why, as a type (None: a daemon older than the field); `serving`: the models it names
    # (collation: the loaded models whose queue is served first; queue: the swap ahead).
    cause: WaitCause | None = None
    serving: tuple[str, ...] = ()


class SleepStatus(msgspec.Struct, frozen=True):
    """A model with a sleep setting: what it holds asleep, and how its sleeps and wakes went."""

    preset: str = ""  # "" for a written-out setting (or llmsnap's keys)
    # GPU UUID -> bytes its processes hold asleep, as NVML read them once its memory dropped
    # (its residual: a CUDA context, buffers); set while it is asleep. None (null): not measured
    # (no GPU inventory), never an empty mapping that would read as "holds nothing".
    residual: dict[str, int] | None = msgspec.field(default_factory=dict)
    # GPU UUID -> bytes they held just before its last sleep (None: not measured).
    held_before: dict[str, int] | None = msgspec.field(default_factory=dict)
    last_sleep_s: float | None = None  # its last sleep: the calls and the release check
    last_wake_s: float | None = None  # its last wake: the calls and the health check
    sleeps: int = 0
    wakes: int = 0
    verified: int = 0  # wakes its `wakeProbe` proved
    stop_after: float = 0.0  # `sleep.stopAfter` (0: asleep for ever)
    stop_left: float | None = None  # asleep: seconds until `stopAfter` stops it
    serves_asleep: bool = False  # its server answers what needs no GPU while asleep (ComfyUI)
    # Its server's ignored websockets open now (an open tab): while asleep, `stopAfter` waits.
    websockets: int = 0
    # With `serves_asleep`: the requests that wake it, "METHOD /path" (`wakeOn`); empty: every
    # request but a GET or HEAD.
    wake_on: tuple[str, ...] = ()
    last_failure: str = ""  # its last sleep or wake that failed (it was stopped), and why


class Follower(msgspec.Struct, frozen=True):
    """A model that followed this one (the next model asked for after it)."""

    model: str
    count: float  # decayed with the learning's half-life
    share: float  # of all that followed it
    median_gap: float  # seconds from this one's last request to its first


class Learned(msgspec.Struct, frozen=True):
    """What swapd learned of a model's traffic (`learn`, daemon/observe/traffic.py)."""

    followers: tuple[Follower, ...] = ()
    likely_next: str = ""  # the follower the page cache is readied for ("": none is likely)
    returns: tuple[float, ...] = ()  # seconds: its last pauses before it was asked again
    # The learned chance it is asked for within `stopAfter` from now (None: too little learned,
    # or not asleep).
    back_chance: float | None = None
    prefetched_at: float = 0.0  # wall clock: its files were last read ahead (0: never)
    prefetched_bytes: int = 0


class PageCache(msgspec.Struct, frozen=True):
    """How much of a model's weight files the host's page cache holds (`mincore`)."""

    files: int
    size: int  # bytes
    cached: int  # bytes
    fraction: float  # cached / size (0 for no bytes)
    sampled_at: float  # wall clock


class KvStatus(msgspec.Struct, frozen=True):
    """A model with a `kvCache` setting: what of its server's conversation caches swapd keeps
    (saved after its last drain, for the definition it runs now), and how its saves and restores
    went (docs/guides/kv-cache.md)."""

    preset: str = ""  # "" for a written-out setting
    slots: tuple[int, ...] = ()  # the slots saved (by the server's slot id)
    tokens: int = 0  # the tokens they hold, as the server counted them when it saved
    bytes: int = 0  # the files' size
    saved_at: float = 0.0  # wall clock of the save (0: nothing saved)
    saves: int = 0
    restores: int = 0
    failures: int = 0  # saves and restores that failed or timed out (the model went on)
    last_failure: str = ""
    # The last restore: the tokens the server said it read back, and the `cache_n` of the first
    # request answered after it (-1: not known yet); `short` when either is less than was saved.
    restored_tokens: int = 0
    first_cache_n: int = -1
    short: bool = False


class ModelStatus(msgspec.Struct, frozen=True):
    """One model's state as the daemon sees it; broadcast on every change and listed by `status`."""

    model: str
    state: ModelState
    upstream: str = ""
    pid: int | None = None
    port: int | None = None
    gpus: tuple[str, ...] = ()
    ttl: int = 0
    since: float = 0.0  # wall-clock time of the last state change
    last_activity: float = 0.0  # wall-clock time of the last reported activity
    ttl_left: float | None = None
    # What a request's keep_alive set for this run in place of `ttl` (messages.KeepAlive): None
    # when nothing did.
    keep_alive: float | None = None
    reason: str = ""  # why it is failed/stopped, when it is
    # Starting: spawning its process, or waiting for its health check (None in other states).
    # The daemon's word to its proxies; `/api/status` leaves it out (status_doc.py).
    starting: StartStep | None = None
    in_flight: int = 0
    # What still holds GPU memory after the model stopped (NVML's view).
    gpu_lingering: tuple[LingeringProcess, ...] = ()
    # Its port, still listened on after it stopped; set until the port is free again.
    lingering: Lingering | None = None
    # GPU placement by memory: the peak bytes learned per GPU UUID (any model), where that came
    # from ("measured", "vram hint", "unknown"; "" when not placed by memory), what is reserved
    # for its current run per GPU UUID, and whether it is placed by memory at all.
    footprint: dict[str, int] = msgspec.field(default_factory=dict)
    footprint_source: str = ""
    reserved: dict[str, int] = msgspec.field(default_factory=dict)
    placed_by_memory: bool = False
    # What its busyCheck says (None: it has none, or it is not ready).
    busy: Busy | None = None
    # What a swap to it waits for (None: no swap to it waits now).
    waiting: Waiting | None = None
    # Its sleep setting's facts (None: it has no sleep setting).
    sleep: SleepStatus | None = None
    # Its kvCache setting's facts (None: it has no kvCache setting).
    kv: KvStatus | None = None
    # Seconds its load (spawn to healthy) and its wake take, the median of its last ones that
    # went well (the swap log's); None before the first.
    load_estimate: float | None = None
    wake_estimate: float | None = None
    # What the learning knows of it (None: `learn` is off), and how much of its weight files
    # the page cache holds (None: it names none that exist, or not sampled yet).
    learned: Learned | None = None
    page_cache: PageCache | None = None


class GpuInfo(msgspec.Struct, frozen=True):
    index: int
    uuid: str
    name: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    # Reserved for the models placed by memory (`gpus: auto`) running on it.
    reserved_bytes: int = 0
