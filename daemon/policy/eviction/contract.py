"""The eviction seam: what an eviction policy is given, what it answers, and the contract every
policy keeps (on `EvictionPolicy`).

The scheduler asks its policy, every time a swap may begin, how to make room for the swap's
target. The policy is chosen once for a config (`choose.py`), when the config is loaded and at
every reload. To change how eviction chooses, change a policy module; to add one, write a module
with a class that has `terms` and `decide`, and add its line in `choose.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ....ipc.causes import WaitCause
from ....ipc.states import ModelState
from ...config import ModelConfig
from .memory_fit import Gpu

# ---------------------------------------------------------------------------------------- given


@dataclass(frozen=True)
class BusyReading:
    """What a ready model's `busyCheck` (its `model.busy_check`) last found."""

    busy: bool
    words: str = ""  # "upstream reports 1 running job", for the log


@dataclass(frozen=True)
class Occupant:
    """A model that holds (or is about to hold) its share of the machine: one with a process, or
    the target of a swap that claimed its room and has not started it yet."""

    id: str
    # Its definition in the config now (None: a reload removed it), with `gpus` where it runs when
    # it was placed by memory.
    model: ModelConfig | None
    # STARTING too for a claimed target whose start has not begun; ASLEEP for a process that
    # holds only its residual (what it keeps asleep: in `GpuRoom.used`).
    state: ModelState
    pid: int | None = None  # its process, for the GPU readings (None: no process yet)
    in_flight: bool = False  # the proxies report requests in flight for it
    busy: BusyReading | None = None  # its busyCheck's last reading (None: none yet, or no check)
    last_use: float = 0.0  # wall clock: its last request, or when its process started


@dataclass(frozen=True)
class GpuRoom:
    """The GPUs as read just before a decision that places by memory (NVML, /proc and the
    learned footprints; ids are canonical: UUIDs case-folded)."""

    gpus: tuple[Gpu, ...]  # each with its total and what processes swapd does not own use
    used: Mapping[str, Mapping[str, int]]  # model id -> GPU id -> bytes its processes use now
    reserved: Mapping[str, Mapping[str, int]]  # model id -> GPU id -> bytes kept for its run
    need: tuple[int, ...] | None  # the target's bytes on each GPU it uses; None: not known
    prefer: tuple[str, ...] = ()  # the GPUs the target ran on last
    may_use: tuple[str, ...] | None = None  # the GPUs it may be placed on; None: any


@dataclass(frozen=True)
class Room:
    """What runs now. `occupants` never holds the target."""

    occupants: Mapping[str, Occupant]
    gpus: GpuRoom | None = None  # read only when the policy's `Terms.reads_gpus` for the target


@dataclass(frozen=True)
class Ask:
    """The swap that asks: its target, the time, and what it waited for so far."""

    target: ModelConfig  # the definition it is to start
    now: float  # monotonic
    queued_at: float  # when the swap was queued (collation's window runs from then)
    collate_window: float
    yielded_at: float | None = None  # when a request took back a model it was stopping
    # The models with a busyCheck this swap read again before relying on it, and when.
    asked: Mapping[str, float] = field(default_factory=dict)
    room_since: float | None = None  # since when it waits for GPU room (placement by memory)


@dataclass(frozen=True)
class Terms:
    """How the scheduler runs a swap to a target under a policy: the three things placement by
    memory has it do otherwise than the policies of sets, each said once here."""

    # A decision needs `Room.gpus`, read from NVML and /proc before it (step 7).
    reads_gpus: bool = False
    # A swap that put models to sleep decides again, with them asleep at their residual, before
    # it starts its target (step 13): what they still hold is known only then.
    decides_again_asleep: bool = False
    # The swap waits behind a conflicting swap ahead in the queue, and holds the conflicting
    # swaps behind it (step 12). False: it neither waits for the queue nor holds it (what it
    # claims is booked against a fresh reading, not against the queue's order).
    in_queue_order: bool = True


# The policies of sets (one at a time, `gpus`, groups, matrix): they decide on the occupants
# alone.
BY_SETS = Terms()
# Placement by memory, for its targets (`gpus: auto`).
BY_MEMORY = Terms(reads_gpus=True, decides_again_asleep=True, in_queue_order=False)

# ------------------------------------------------------------------------------------- decided


@dataclass(frozen=True)
class Placement:
    """Where a model placed by memory runs."""

    ids: tuple[str, ...]  # the GPUs, canonical
    gpus: tuple[str, ...]  # the same GPUs as NVML spells their UUIDs (the model's `gpus`)
    amounts: tuple[int, ...]  # bytes planned on each; (): the GPUs whole (no footprint known)
    reason: str  # what was needed, the room, what was evicted


@dataclass(frozen=True)
class MakeRoom:
    """Start the target once the models in `stop` have stopped and those in `sleep` are asleep
    (none: start it now)."""

    stop: frozenset[str] = frozenset()
    placement: Placement | None = None  # placement by memory; None: the target's own `gpus`
    # Busy models in `stop` or `sleep` whose swapWait is over.
    overdue: frozenset[str] = frozenset()
    # Models with a sleep setting: put to sleep (their process kept) instead of stopped.
    sleep: frozenset[str] = frozenset()

    @property
    def evict(self) -> frozenset[str]:
        """Every model this makes room with, stopped or put to sleep."""
        return self.stop | self.sleep


@dataclass(frozen=True)
class Hold:
    """A busy model a swap waits for: until when at most (monotonic), its `swapWait`."""

    until: float
    at_most: float


@dataclass(frozen=True)
class Wait:
    """Not yet: decide again at the next change of the models' states, and at `until` (monotonic)
    at the latest (None: only at a change)."""

    reason: str
    until: float | None = None
    # Busy models (by their busyCheck) the swap waits for.
    holding: Mapping[str, Hold] = field(default_factory=dict)
    # Models whose busyCheck the scheduler reads again (outside any critical section) before it
    # asks again.
    check: frozenset[str] = frozenset()
    # Placement by memory waits for busy models to make room (until `until`, then it refuses).
    for_room: bool = False
    # Why, as a type (the words are `reason`'s); collation names the loaded models it serves
    # first (`serving`) and when it goes ahead anyway (`at_latest`, monotonic).
    cause: WaitCause | None = None
    serving: tuple[str, ...] = ()
    at_latest: float | None = None


@dataclass(frozen=True)
class Refuse:
    """Nothing can make room: whoever waits for the target gets 503 `no_gpu_room`, `reason`."""

    reason: str


Decision = MakeRoom | Wait | Refuse


class EvictionPolicy(Protocol):
    """How room is made for a model to start. The contract every policy keeps:

    * **pure**: no I/O, no logging, no clock of its own (the time is `ask.now`), nothing changed.
      The same ask and room give the same decision: the scheduler asks again at every change, and
      asks for other queued swaps too, to keep the queue's order.
    * it names only occupants (`room.occupants`), never the target.
    * **sleep**: an occupant with a sleep setting (`Occupant.model.sleep`) that is awake is put
      to sleep (`MakeRoom.sleep`) rather than stopped (`preemption.split`). An `asleep` occupant
      holds only its residual: the policies of sets (one at a time, `gpus`, groups, matrix) do
      not count it; placement by memory counts what NVML says it still uses, and stops it when
      even that leaves no room.
    * **busy-ness is an input** (`Occupant.in_flight`, `Occupant.busy`, a state other than
      `ready`): a busy model is stopped only where the policy decides the swap waited long enough
      for it (`MakeRoom.overdue`); before that the decision is a `Wait`, with its reason and the
      deadline to look again.
    * what it needs beyond the config it was chosen with comes in `room`. GPU memory (`room.gpus`)
      comes only when `terms(target).reads_gpus`, since it is read from NVML and /proc; the
      scheduler reads it before it decides, never while it decides.

    The rest is the scheduler's: collisions with the claims of other swaps, the queue's order,
    draining and stopping, and starting the target where `MakeRoom.placement` says.
    """

    def terms(self, target: ModelConfig) -> Terms:
        """How the scheduler runs a swap to `target`: whether a decision reads the GPUs,
        decides again once models are asleep, keeps the queue's order (`Terms`)."""
        ...

    def decide(self, ask: Ask, room: Room) -> Decision:
        """How to make room for `ask.target` in `room`."""
        ...
