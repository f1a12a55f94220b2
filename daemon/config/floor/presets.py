"""The step `sleep`, `busyCheck` and `kvCache` share: a setting written as a preset name
(`sleep: vllm`), as a preset with some of its keys changed (`{preset: vllm, stopAfter: 3600}`), or
in full. Its mapping form is a strict section of `shape.py` (`typed.py` reported each wrong value
and each unknown key in it); this step names its preset."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .issues import Report
from .keys import Section, fields
from .schema import named_preset
from .yaml_nodes import Path

T = TypeVar("T")


@dataclass(frozen=True)
class Presets(Generic[T]):
    table: Mapping[str, T]
    # The mapping form's section (`shape.py`): its keys are the settings it may hold.
    mapping: type[Section]

    @property
    def names(self) -> str:
        return ", ".join(self.table)

    @property
    def settings(self) -> tuple[str, ...]:
        return tuple(info.encode_name for info in fields(self.mapping))

    def named(self, name: str, where: Path, report: Report) -> T | None:
        return named_preset(self.table, name, where, report)

    def base(self, preset: str | None, where: Path, report: Report) -> tuple[bool, T | None]:
        """The preset the mapping at `where` starts from (None: none): (False, None) when its
        `preset` is wrong (typed.py said so when it is no string)."""
        if report.typed_wrong((*where, "preset")):
            return False, None
        if preset is None:
            return True, None
        base = self.named(preset, (*where, "preset"), report)
        return base is not None, base
