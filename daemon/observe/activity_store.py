"""The activity log in memory: the newest `metricsMaxInMemory` records (llama-swap's default,
1000), numbered by the daemon in the order their reports arrived (ids grow by one, across every
proxy process, for the daemon's lifetime)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ...ipc.activity import ActivityRecord

DEFAULT_MAX_IN_MEMORY = 1000


class ActivityStore:
    def __init__(self, max_in_memory: int = DEFAULT_MAX_IN_MEMORY) -> None:
        self.records: deque[ActivityRecord] = deque(maxlen=max(1, max_in_memory))
        self.next_id = 1

    def resize(self, max_in_memory: int) -> None:
        if max(1, max_in_memory) != self.records.maxlen:
            self.records = deque(self.records, maxlen=max(1, max_in_memory))

    def add(self, records: Iterable[ActivityRecord]) -> list[ActivityRecord]:
        stored = []
        for record in records:
            record.id = self.next_id
            self.next_id += 1
            self.records.append(record)
            stored.append(record)
        return stored
