"""Several parsed config files merged into one document, by llama-swap's rules (its
`internal/config/merge.go`, `-config-dir`), keeping the file and line of every value:

* identity maps (`models`, `groups`, `profiles`, `selectors`, `peers`, `matrix` and the
  `routing.router.settings` `groups`/`matrix`): an entry another file already defined is an error;
* other mappings merge key by key; lists are concatenated (`macros`, `apiKeys` accumulate);
* two different scalars are an error, equal ones are fine; a null yields to the other side;
* anything else of two different kinds is an error.

The messages are llama-swap's; unlike llama-swap, every conflict is reported (each at the line
of the value that conflicts), not only the first.
"""

from __future__ import annotations

from typing import Any

from .yaml_nodes import Document, Path

IDENTITY_MAPS = frozenset(
    {
        ("models",),
        ("groups",),
        ("profiles",),
        ("selectors",),
        ("peers",),
        ("matrix",),
        ("routing", "router", "settings", "groups"),
        ("routing", "router", "settings", "matrix"),
    }
)
# yaml.v3's node kinds, which llama-swap's message prints.
_KINDS: dict[type, int] = {dict: 4, list: 2}
_SCALAR_KIND = 8


def _dotted(path: Path) -> str:
    return ".".join(str(part) for part in path)


def _kind(value: Any) -> int:
    return _KINDS.get(type(value), _SCALAR_KIND)


class Merged:
    """The documents merged so far; `problems` are (file, line, message) conflicts."""

    def __init__(self, first: Document, file: str) -> None:
        self.document = first
        self.problems: list[tuple[str, int | None, str]] = []
        first.origins = {p: file for p in (*first.value_lines, *first.key_lines)}
        first.origins.setdefault((), file)
        first.file_lines = {file: first.source_lines}
        self.first = file
        # Per merge: src paths whose value was not taken, and lists appended (offset).
        self._dropped: set[Path] = set()
        self._shifted: dict[Path, int] = {}
        self._replaced: set[Path] = set()

    def add(self, src: Document, file: str) -> None:
        self._dropped, self._shifted, self._replaced = set(), {}, set()
        if not isinstance(self.document.data, dict) or not isinstance(src.data, dict):
            return  # the loader reports a top level that is not a mapping
        self._mapping(self.document.data, src.data, (), src, file)
        self._adopt(src, file)

    # ------------------------------------------------------------------------------- values

    def _mapping(
        self, dst: dict[str, Any], src: dict[str, Any], path: Path, doc: Document, file: str
    ) -> None:
        for key, value in src.items():
            child = (*path, key)
            if key not in dst:
                dst[key] = value
            elif child in IDENTITY_MAPS:
                self._identity(dst[key], value, child, doc, file)
            else:
                dst[key] = self._value(dst[key], value, child, doc, file)

    def _identity(self, dst: Any, src: Any, path: Path, doc: Document, file: str) -> None:
        if not isinstance(dst, dict) or not isinstance(src, dict):
            self._conflict(
                path, doc, file, f'conflict at "{_dotted(path)}": expected a mapping, introduced '
                f"by {file}",
            )  # fmt: skip
            return
        for key, value in src.items():
            if key in dst:
                self._conflict(
                    (*path, key), doc, file, f'duplicate {path[-1]} "{key}" found in {file} '
                    "(already defined in another config source)", key=True,
                )  # fmt: skip
            else:
                dst[key] = value

    def _value(self, dst: Any, src: Any, path: Path, doc: Document, file: str) -> Any:
        if isinstance(dst, dict) and isinstance(src, dict):
            self._mapping(dst, src, path, doc, file)
            return dst
        if isinstance(dst, list) and isinstance(src, list):
            self._shifted[path] = len(dst)
            return dst + src
        if src is None:
            self._dropped.add(path)
            return dst
        if dst is None:
            self._replaced.add(path)
            return src
        if _kind(dst) == _kind(src) == _SCALAR_KIND:
            if type(dst) is type(src) and dst == src:
                self._dropped.add(path)
                return dst
            self._conflict(
                path, doc, file, f'conflict at "{_dotted(path)}": {file} sets a different value '
                "than a previous source",
            )  # fmt: skip
            return dst
        self._conflict(
            path, doc, file, f'conflict at "{_dotted(path)}": incompatible YAML node kinds (kind '
            f"{_kind(dst)} vs {_kind(src)}) introduced by {file}",
        )  # fmt: skip
        return dst

    def _conflict(
        self, path: Path, doc: Document, file: str, message: str, *, key: bool = False
    ) -> None:
        self._dropped.add(path)
        self.problems.append((file, doc.line(path, key=key), message))

    # ------------------------------------------------------------------- lines and files

    def _where(self, path: Path) -> Path | None:
        """Where a path of the file being added sits in the merged document (None: not taken)."""
        for depth in range(len(path) + 1):
            prefix = path[:depth]
            if prefix in self._dropped:
                return None
            offset = self._shifted.get(prefix)
            if offset is not None and depth < len(path):
                index = path[depth]
                if isinstance(index, int):
                    return (*prefix, index + offset, *path[depth + 1 :])
        return path

    def _adopt(self, src: Document, file: str) -> None:
        doc = self.document
        for path in self._replaced:
            for table in (doc.value_lines, doc.key_lines, doc.origins):
                table.pop(path, None)
        doc.file_lines[file] = src.source_lines
        for source, target in ((src.value_lines, doc.value_lines), (src.key_lines, doc.key_lines)):
            for path, line in source.items():
                moved = self._where(path)
                if moved is not None and moved not in target:
                    target[moved] = line
                    doc.origins.setdefault(moved, file)
        for paths_src, paths_dst in (
            (src.plain_strings, doc.plain_strings),
            (src.anchored, doc.anchored),
        ):
            for path in paths_src:
                moved = self._where(path)
                if moved is not None:
                    paths_dst.add(moved)
        for path, text in src.unfolded.items():
            moved = self._where(path)
            if moved is not None:
                doc.unfolded.setdefault(moved, text)
        for path, span in src.spans.items():
            moved = self._where(path)
            if moved is not None:
                doc.spans.setdefault(moved, span)
        for problem_line, path, message in src.problems:
            moved = self._where(path)
            if moved is not None:
                doc.problems.append((problem_line, moved, message))
