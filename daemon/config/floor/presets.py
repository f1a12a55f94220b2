"""The step `sleep` and `busyCheck` share: a setting written as a preset name (`sleep: vllm`), as a
preset with some of its keys changed (`{preset: vllm, stopAfter: 3600}`), or in full."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .issues import Report
from .schema import known_keys, named_preset
from .yaml_nodes import Path

T = TypeVar("T")


@dataclass(frozen=True)
class Presets(Generic[T]):
    table: Mapping[str, T]
    # The keys the mapping form may hold (any other is an error, with a "did you mean").
    settings: tuple[str, ...]

    @property
    def names(self) -> str:
        return ", ".join(self.table)

    def named(self, name: str, where: Path, report: Report) -> T | None:
        return named_preset(self.table, name, where, report)

    def base(self, value: Mapping[str, Any], where: Path, report: Report) -> tuple[bool, T | None]:
        """The mapping's keys checked, and the preset it starts from (None: none): (False, None)
        after an error."""
        if not known_keys(value, self.settings, where, report):
            return False, None
        if value.get("preset") is None:
            return True, None
        if not isinstance(value["preset"], str):
            report.error((*where, "preset"), f"expected a preset name ({self.names})")
            return False, None
        base = self.named(value["preset"], (*where, "preset"), report)
        return base is not None, base
