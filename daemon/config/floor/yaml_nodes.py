"""YAML text to plain Python values, remembering the line of every node.

The config loader reports every problem as `file:line key.path: message`, so it needs more than
`yaml.safe_load` gives: the line of each key and value, which scalars were written unquoted (an
`${env.X}` there is re-typed after substitution, as llama-swap's textual substitution would), and
the unfolded text of folded (`>`) block scalars (so a `\\` at the end of a line in a folded `cmd`
still joins lines), and the values that hold YAML anchors (so a top-level `defs:` that only holds
them is known for what it is). Composing with the SafeLoader keeps the marks; PyYAML constructs
the scalars.

llama-swap replaces `${env.NAME}` in the file's text before it parses the YAML, so a reference
may stand where YAML's flow syntax would read its braces (`apiKeys: [${env.KEY}]`). Here the
text is parsed with each such reference's braces swapped for two private-use characters of the
same length (`ENV_OPEN`, `ENV_CLOSE`; lines and columns stay as written), and every string read
back gets its braces again; the loader then substitutes the references with their lines known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

Path = tuple[str | int, ...]

# Aliases are materialised into copies (as llama-swap does), so a "billion laughs" document would
# expand without bound; past this many values the document is refused.
MAX_VALUES = 100_000
# PyYAML composes nodes recursively; a config needs a handful of levels, and refusing past this
# depth (with the line where it happens) keeps every later walk far from Python's recursion limit.
MAX_DEPTH = 100
NESTED_TOO_DEEPLY = "YAML document is nested too deeply"

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
# Tags whose PyYAML value is what the config wants. Timestamps and binary keep their source text:
# llama-swap decodes `name: 2024-01-01` into a string field as the text written.
_CONSTRUCTED_TAGS = frozenset(
    {
        _STR_TAG,
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:null",
    }
)
# The YAML 1.1 tags PyYAML's safe loader knows; any other (`!custom`, `!!python/...`) is refused
# rather than read as a plain value, which would turn `models: !custom {...}` into no models.
_YAML_TAG = "tag:yaml.org,2002:"
_KNOWN_TAGS = _CONSTRUCTED_TAGS | {
    f"{_YAML_TAG}{name}" for name in ("map", "seq", "set", "omap", "pairs", "timestamp", "binary")
}
_TOKEN = re.compile(r"\$\{[^}]*\}")
# `${env.NAME}` as llama-swap matches it (macros.py substitutes it after parsing).
_ENV_TOKEN = re.compile(r"\$\{(env\.[A-Za-z_][A-Za-z0-9_]*)\}")
ENV_OPEN, ENV_CLOSE = "\ue000", "\ue001"


class YamlSyntaxError(Exception):
    """The text is not a YAML document the loader can use; `line` is 1-based when known."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass
class Document:
    data: Any
    value_lines: dict[Path, int] = field(default_factory=dict)
    key_lines: dict[Path, int] = field(default_factory=dict)
    # Unquoted scalars that resolved to strings.
    plain_strings: set[Path] = field(default_factory=set)
    # Folded (`>`) block scalars: their text read as a literal block, lines not yet joined.
    unfolded: dict[Path, str] = field(default_factory=dict)
    # Problems that did not stop the conversion: (line, path, message).
    problems: list[tuple[int | None, Path, str]] = field(default_factory=list)
    # First and last line of scalars written over several lines, and the source lines themselves.
    spans: dict[Path, tuple[int, int]] = field(default_factory=dict)
    source_lines: list[str] = field(default_factory=list)
    # Per multi-line scalar, the first line of each `${...}` in it: a 2 MB cmd full of unknown
    # macros costs one pass over its lines, not one pass per macro.
    _tokens: dict[Path, dict[str, int]] = field(default_factory=dict, repr=False)
    # Several files merged (`--config-dir`, merge.py): the file each path came from, and each
    # file's lines. Empty for one file: every path is the report's own source.
    origins: dict[Path, str] = field(default_factory=dict)
    file_lines: dict[str, list[str]] = field(default_factory=dict)
    # Where a value carries a YAML anchor (`&name`): a mapping that holds them is a home for
    # anchors (llama-swap's tests keep them under `defs:`), not a mistyped key.
    anchored: set[Path] = field(default_factory=set)

    def holds_anchors(self, path: Path) -> bool:
        """Whether the value at `path`, or one inside it, carries an anchor."""
        size = len(path)
        return any(found[:size] == path for found in self.anchored)

    def file_of(self, path: Path) -> str | None:
        """The file the value at `path` (or its nearest ancestor) came from; None: one file."""
        if not self.origins:
            return None
        probe = path
        while True:
            found = self.origins.get(probe)
            if found is not None or not probe:
                return found
            probe = probe[:-1]

    def line(self, path: Path, *, key: bool = False) -> int | None:
        """The line of the value at `path` (or of its key); for a key that is not there, the line
        naming its nearest ancestor (`m:` for a missing `models.m.cmd`)."""
        if key and path in self.key_lines:
            return self.key_lines[path]
        if path in self.value_lines:
            return self.value_lines[path]
        probe = path
        while probe:
            probe = probe[:-1]
            found = self.key_lines.get(probe, self.value_lines.get(probe))
            if found is not None:
                return found
        return None

    def find_line(self, path: Path, needle: str) -> int | None:
        """The line inside a multi-line scalar that holds `needle`, else the scalar's line."""
        if path in self.spans:
            first, last = self.spans[path]
            if _TOKEN.fullmatch(needle):
                found = self._token_lines(path, first, last).get(needle)
                return found if found is not None else self.line(path)
            lines = self._lines_of(path)
            for number in range(first, last + 1):
                if needle in lines[number - 1]:
                    return number
        return self.line(path)

    def _lines_of(self, path: Path) -> list[str]:
        file = self.file_of(path)
        return self.source_lines if file is None else self.file_lines.get(file, self.source_lines)

    def _token_lines(self, path: Path, first: int, last: int) -> dict[str, int]:
        lines = self._tokens.get(path)
        if lines is None:
            lines = {}
            source = self._lines_of(path)
            for number in range(first, last + 1):
                for token in _TOKEN.findall(source[number - 1]):
                    lines.setdefault(token, number)
            self._tokens[path] = lines
        return lines


def show_tag(tag: str) -> str:
    """A tag as it is written in the file: `!!python/name:x`, `!custom`."""
    return f"!!{tag.removeprefix(_YAML_TAG)}" if tag.startswith(_YAML_TAG) else tag


class _DepthLimitedLoader(yaml.SafeLoader):
    depth = 0

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.anchored: set[int] = set()  # ids of the nodes written with an anchor

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self.depth += 1
        try:
            event = self.peek_event()
            if self.depth > MAX_DEPTH:
                raise YamlSyntaxError(event.start_mark.line + 1, NESTED_TOO_DEEPLY)
            node = super().compose_node(parent, index)
            if getattr(event, "anchor", None) and not isinstance(event, yaml.AliasEvent):
                self.anchored.add(id(node))
            return node
        finally:
            self.depth -= 1


def _protect_env(text: str) -> str:
    """`${env.NAME}` with its braces swapped for `ENV_OPEN`/`ENV_CLOSE` (same length)."""
    if "${env." not in text or ENV_OPEN in text or ENV_CLOSE in text:
        return text
    return _ENV_TOKEN.sub(lambda m: f"${ENV_OPEN}{m.group(1)}{ENV_CLOSE}", text)


def _restore_env(value: str) -> str:
    if ENV_OPEN not in value:
        return value
    return value.replace(f"${ENV_OPEN}", "${").replace(ENV_CLOSE, "}")


def resolve_plain(text: str) -> Any:
    """The value an unquoted scalar with this text would have (int, float, bool, null or str)."""
    loader = yaml.SafeLoader("")
    try:
        tag = loader.resolve(ScalarNode, text, (True, False))
        if tag not in _CONSTRUCTED_TAGS or tag == _STR_TAG:
            return text
        return loader.construct_object(ScalarNode(tag, text))
    except (yaml.YAMLError, ValueError):
        return text
    finally:
        loader.dispose()


def parse(text: str) -> Document:
    """Parse one YAML document. An empty or comment-only text gives `Document(None)`."""
    loader: yaml.SafeLoader | None = None
    try:
        # The reader already rejects unprintable characters here, before any parsing.
        protected = _protect_env(text)
        loader = _DepthLimitedLoader(protected)
        root = loader.get_single_node()
        document = Document(None, source_lines=text.splitlines())
        if root is not None:
            document.data = _Converter(loader, protected, document).convert(root, ())
        return document
    except yaml.reader.ReaderError as error:
        line: int | None = text.count("\n", 0, max(error.position, 0)) + 1
        char = error.character
        shown = f"U+{char:04X}" if isinstance(char, int) else repr(char)
        raise YamlSyntaxError(
            line, f"YAML syntax error: character {shown} is not allowed"
        ) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        message = " ".join(part for part in (error.context, error.problem) if part)
        raise YamlSyntaxError(line, f"YAML syntax error: {message}") from None
    except yaml.YAMLError as error:
        raise YamlSyntaxError(None, f"YAML syntax error: {error}") from None
    except RecursionError:
        # Only when the caller's own stack was already deep; the reader's line is where it stopped.
        line = loader.line + 1 if loader is not None else None
        raise YamlSyntaxError(line, NESTED_TOO_DEEPLY) from None
    finally:
        if loader is not None:
            loader.dispose()


class _Converter:
    def __init__(self, loader: _DepthLimitedLoader, text: str, document: Document) -> None:
        self.loader = loader
        self.text = text
        self.document = document
        self.count = 0
        self.active: set[int] = set()
        self.own_keys: dict[int, set[int]] = {}

    def convert(self, node: Node, path: Path) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:
            raise YamlSyntaxError(
                node.start_mark.line + 1,
                f"YAML document is too large (over {MAX_VALUES} values with aliases expanded)",
            )
        self.document.value_lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in self.loader.anchored:
            self.document.anchored.add(path)
        if node.tag not in _KNOWN_TAGS:
            self.document.problems.append(
                (
                    node.start_mark.line + 1,
                    path,
                    f"unknown YAML tag {show_tag(node.tag)!r} (swapd reads plain YAML values)",
                )
            )
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        if id(node) in self.active:
            raise YamlSyntaxError(node.start_mark.line + 1, "YAML alias refers to itself")
        self.active.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
        finally:
            self.active.discard(id(node))
        raise YamlSyntaxError(
            node.start_mark.line + 1,
            f"unsupported YAML node {getattr(node, 'id', type(node).__name__)}",
        )

    def _mapping(self, node: MappingNode, path: Path) -> dict[str, Any]:
        # Computed once per node: an aliased mapping is visited again, already flattened.
        own = self.own_keys.setdefault(
            id(node), {id(key) for key, _ in node.value if key.tag != _MERGE_TAG}
        )
        # Resolves `<<` merge keys in place: merged pairs first, so the mapping's own keys win.
        self.loader.flatten_mapping(node)
        result: dict[str, Any] = {}
        written: set[str] = set()
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode):
                self.document.problems.append(
                    (line, path, "a mapping key must be a plain string, not a list or mapping")
                )
                continue
            # The key's text as written: a model named `1.0` stays "1.0", not the float 1.0.
            key = _restore_env(key_node.value)
            child = (*path, key)
            if key in result and (key not in written or id(key_node) not in own):
                pass  # a merged value, overridden by what follows
            elif key in result:
                first = self.document.key_lines.get(child)
                self.document.problems.append(
                    (line, child, f"duplicate key {key!r} (first defined on line {first})")
                )
                continue
            if id(key_node) in own:
                written.add(key)
            self.document.key_lines[child] = line
            self.document.value_lines.pop(child, None)
            result[key] = self.convert(value_node, child)
        return result

    def _scalar(self, node: ScalarNode, path: Path) -> Any:
        if node.end_mark.line > node.start_mark.line:
            last = min(node.end_mark.line + 1, len(self.document.source_lines))
            self.document.spans[path] = (node.start_mark.line + 1, last)
        if node.tag not in _CONSTRUCTED_TAGS:
            return _restore_env(node.value)
        if node.tag == _STR_TAG:
            if node.style is None:
                self.document.plain_strings.add(path)
            elif node.style == ">":
                unfolded = self._unfold(node)
                if unfolded is not None:
                    self.document.unfolded[path] = _restore_env(unfolded)
            return _restore_env(node.value)
        try:
            return self.loader.construct_object(node)
        except (yaml.YAMLError, ValueError):
            self.document.problems.append(
                (node.start_mark.line + 1, path, f"{node.value!r} is not a valid {node.tag}")
            )
            return node.value

    def _unfold(self, node: ScalarNode) -> str | None:
        """The folded scalar's text as if written with `|`; None if that cannot be done safely."""
        raw = self.text[node.start_mark.index : node.end_mark.index]
        header = raw.split("\n", 1)[0]
        # An explicit indentation indicator is relative to the parent's indent, lost out here.
        if not raw.startswith(">") or any(c.isdigit() for c in header):
            return None
        try:
            value = yaml.safe_load("|" + raw[1:])
        except yaml.YAMLError:
            return None
        return value if isinstance(value, str) else None
