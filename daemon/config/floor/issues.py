"""Config problems: each names the file, line and key path; all are reported together."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .yaml_nodes import Document, Path


@dataclass(frozen=True)
class ConfigIssue:
    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where} {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(Exception):
    """The config cannot be used. `issues` holds every problem; `str()` lists them, one a line."""

    def __init__(self, issues: Iterable[ConfigIssue], warnings: Iterable[ConfigIssue] = ()) -> None:
        self.issues = list(issues)
        # Non-fatal findings made on the way (ignored llama-swap keys, ...); not part of str().
        self.warnings = list(warnings)
        super().__init__("\n".join(str(issue) for issue in self.issues))


def format_path(path: Path) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def describe(value: Any) -> str:
    """A value as the error message quotes it: `'ten'`, `true`, `a list`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


class Report:
    """Collects errors and warnings against one source file."""

    def __init__(self, source: str, document: Document | None = None) -> None:
        self.source = source
        self.document = document
        self.errors: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []
        # What is already listed: a file with thousands of problems costs no search per problem.
        self._seen: set[tuple[bool, ConfigIssue]] = set()
        # Where `typed.py` reported a wrong value (or an unknown key of a strict section).
        self.wrong: list[Path] = []
        # For lists that lost bad items as they were typed: the index in the file of each item
        # kept, by the list's path (`typed.Converter.indexed` reads them back).
        self.positions: dict[Path, tuple[int, ...]] = {}

    def _issue(self, path: Path, message: str, key: bool, line: int | None) -> ConfigIssue:
        source = self.source
        if self.document is not None:
            if line is None:
                line = self.document.line(path, key=key)
            source = self.document.file_of(path) or source
        return ConfigIssue(source, line, format_path(path), message)

    def error(
        self, path: Path, message: str, *, key: bool = False, line: int | None = None
    ) -> None:
        issue = self._issue(path, message, key, line)
        if (True, issue) not in self._seen:
            self._seen.add((True, issue))
            self.errors.append(issue)

    def warn(self, path: Path, message: str, *, key: bool = False, line: int | None = None) -> None:
        issue = self._issue(path, message, key, line)
        if (False, issue) not in self._seen:
            self._seen.add((False, issue))
            self.warnings.append(issue)

    def typed_wrong(self, path: Path) -> bool:
        """Whether `typed.py` reported the value at `path`, or a value inside it (a section's
        quirk stops reading there, as at its own first problem)."""
        return any(wrong[: len(path)] == path for wrong in self.wrong)

    def raise_if_errors(self) -> None:
        if self.errors:
            raise ConfigError(
                sorted(self.errors, key=lambda i: (i.line or 0, i.path)), self.warnings
            )
