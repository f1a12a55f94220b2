"""The vocabulary of a key's declaration in `shape.py` (a `Section`'s field, its bounded type, an
`Expect`, `Ignored`, and its `Key`: what it resolves to when the file leaves it out, a constant or
the top level's value of a key, the values llama-swap reads as "the default", a check of its own,
how `check-config --print` shows it), and what is derived from the declarations.

The field in `shape.py` is the one place a key is declared: its name in the file (the field's
encode name), its type and bounds (the annotation, typed by `typed.py`), and, through a `Key` in
its `Annotated[...]`, the rest. `resolve()` turns a typed section into the resolved values of its
plain keys and of the keys its section's `Quirks` read, `shown()` renders a resolved struct in the
order of the section's fields, and `declared()` lists the keys that carry a `Key`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, ClassVar, TypeVar, Union, get_args, get_origin

import msgspec
from msgspec import Meta

from .issues import Report
from .show import number
from .yaml_nodes import Path

# msgpack, which carries the config to the proxy, holds integers in 64 bits.
MIN_INT = -(2**63)
MAX_INT = 2**63 - 1
MAX_PORT = 65535


class Ignored:
    """Marks a llama-swap key swapd accepts (so a real llama-swap config loads) but ignores."""

    def __init__(self, note: str = "") -> None:
        self.note = note  # why, shown in the warning


class Expect:
    """What the value must be, in the error's words (`expected {words}, got {value}`), where the
    type alone says too little; `message`: the whole error instead, `{got}` standing for the value
    (a key's own words, kept where they were llama-swap's or llmsnap's)."""

    def __init__(self, words: str = "", *, message: str | None = None) -> None:
        self.words = words
        self.message = message

    def said(self, got: str) -> str:
        """The error for a value shown as `got`."""
        if self.message is not None:
            return self.message.format(got=got)
        return f"expected {self.words}, got {got}"


Int = Annotated[int, Meta(le=MAX_INT)]
Count = Annotated[int, Meta(ge=0, le=MAX_INT)]
Seconds = Annotated[float, Meta(ge=0)]
Port = Annotated[int, Meta(ge=1, le=MAX_PORT)]
Texts = tuple[str, ...]
# Free-form values (metadata, setParams): anything YAML holds, as long as msgpack can carry it.
Free = dict[str, Any]


class Section(msgspec.Struct, frozen=True, rename="camel"):
    """A mapping in the file. `expected` words the error when the value is not a mapping.
    `strict`: a swapd setting's mapping (a `sleep`, a `busyCheck`, one of their calls): an
    unknown key in it is an error with a "did you mean", not a warning, and no number or boolean
    is read as the text of one of its string keys (that is llama-swap's rule for its own keys)."""

    expected: ClassVar[str] = "a mapping"
    strict: ClassVar[bool] = False


class Exact:
    """Marks a string key that takes no number or boolean as its text (llmsnap's `sleepMode`):
    one is reported in the key's words. Every key of a `strict` section is exact."""


class Falsy:
    """Marks a key whose empty value (`0`, `[]`, `{}`, `""`) reads as unset, before it is typed,
    as a null does: a written-out call's `method` (what the hand check's `or` always did)."""


@dataclass(frozen=True)
class Inherit:
    """The default is the top level's resolved value of `key` (a model's `sendLoadingState`)."""

    key: str


# The key is read by hand (a quirk in the section's module): `resolve()` leaves it alone.
BY_HAND = object()

# A render: the resolved struct to the key's part of `check-config --print` (several keys at
# most, for values that only exist resolved, such as a model's allocated `port`).
Render = Callable[[Any], dict[str, Any]]
# A check of a value the type lets through but llama-swap refuses (a model's `ttl: -2`).
Check = Callable[[Any, Path, Report], None]
# A key's quirk: its typed value (None: unset), where it is, to its resolved value.
Quirk = Callable[[Any, Path, Report], Any]


class Key:
    """What a field of `shape.py` means beyond its type. `default`: its resolved value when the
    file leaves it out (or writes one of `unset`, llama-swap's "0 means the default"); an
    `Inherit`; or `BY_HAND`. `factory`: a fresh mutable default. `check`: a check of its own.
    `attr`: the resolved struct's field, when its name differs from the shape's. `render`: how
    `--print` shows it (default: the resolved value under the key's name; `None`: not shown)."""

    def __init__(
        self,
        default: Any = BY_HAND,
        *,
        unset: tuple[Any, ...] | Callable[[Any], bool] = (),
        factory: Callable[[], Any] | None = None,
        check: Check | None = None,
        attr: str | None = None,
        own: bool = True,
        render: Render | bool | None = True,
    ) -> None:
        self.default = default
        self.unset = unset
        self.factory = factory
        self.check = check
        self.attr = attr
        # False: no field of its own, only the default of the models' key of its name.
        self.own = own
        self.render = render if own else None

    def is_unset(self, value: Any) -> bool:
        if value is None:
            return True
        return self.unset(value) if callable(self.unset) else value in self.unset

    @property
    def plain(self) -> bool:
        return self.default is not BY_HAND or self.factory is not None


@dataclass(frozen=True)
class Declared:
    name: str  # the key in the file
    field: str  # the shape struct's field
    key: Key

    @property
    def attr(self) -> str:
        return self.key.attr or self.field


def unwrap(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """`X | None` and `Annotated[X, ...]` to X and the annotations' extras (Meta left out)."""
    if get_origin(annotation) in (Union, UnionType):
        others = [arg for arg in get_args(annotation) if arg is not type(None)]
        annotation = others[0] if len(others) == 1 else annotation
    if get_origin(annotation) is Annotated:
        base, *extras = get_args(annotation)
        return base, tuple(x for x in extras if not isinstance(x, msgspec.Meta))
    return annotation, ()


def is_section(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, Section)


def key_of(annotation: Any) -> Key | None:
    _, extras = unwrap(annotation)
    return next((x for x in extras if isinstance(x, Key)), None)


@functools.cache
def fields(section: type[msgspec.Struct]) -> tuple[msgspec.structs.FieldInfo, ...]:
    """`msgspec.structs.fields`, once per section: it evaluates the annotations at each call, and
    a fresh annotation (its `Key` a new object) is a type msgspec has not compiled yet."""
    return msgspec.structs.fields(section)


@functools.cache
def declared(section: type[msgspec.Struct]) -> tuple[Declared, ...]:
    """The section's fields that carry a `Key`, in the order of the fields."""
    found = ((info, key_of(info.type)) for info in fields(section))
    return tuple(Declared(info.encode_name, info.name, key) for info, key in found if key)


@dataclass(frozen=True)
class Resolved:
    fields: dict[str, Any]  # by the resolved struct's field, for the keys that have one
    by_name: dict[str, Any]  # every plain key, by its name in the file (what models inherit)


Q = TypeVar("Q", bound=Quirk)


class Quirks:
    """A section's keys llama-swap gives a meaning beyond their type: each one's quirk function,
    the typed value (None: unset) to the resolved one, registered beside it in its section's
    module with `@QUIRKS.read("field")`."""

    def __init__(self, section: type[msgspec.Struct]) -> None:
        self.section = section
        self.reads: dict[str, Quirk] = {}

    def read(self, field: str) -> Callable[[Q], Q]:
        if not any(item.field == field for item in declared(self.section)):
            raise ValueError(f"{self.section.__name__} declares no key {field!r}")

        def register(function: Q) -> Q:
            self.reads[field] = function
            return function

        return register


def resolve(
    spec: msgspec.Struct,
    path: Path,
    report: Report,
    inherited: Mapping[str, Any],
    quirks: Quirks | None = None,
) -> Resolved:
    """The resolved value of each plain key of `spec` (a typed section), and of each key
    `quirks` reads, in the order of the fields; `inherited`: the top level's resolved values, by
    key name in the file."""
    resolved = Resolved({}, {})
    reads = quirks.reads if quirks is not None else {}
    for item in declared(type(spec)):
        key = item.key
        value = getattr(spec, item.field)
        if item.field in reads:
            value = reads[item.field](value, (*path, item.name), report)
            resolved.by_name[item.name] = resolved.fields[item.attr] = value
            continue
        if not key.plain:
            continue
        if value is not None and key.check is not None:
            key.check(value, (*path, item.name), report)
        if key.is_unset(value):
            if key.factory is not None:
                value = key.factory()
            elif isinstance(key.default, Inherit):
                value = inherited[key.default.key]
            else:
                value = key.default
        resolved.by_name[item.name] = value
        if key.own:
            resolved.fields[item.attr] = value
    return resolved


def shown(section: type[msgspec.Struct], resolved: Any) -> dict[str, Any]:
    """`resolved` as `check-config --print` shows it, in the order of `section`'s fields."""
    body: dict[str, Any] = {}
    for item in declared(section):
        render = item.key.render
        if render is None or render is False:
            continue
        if render is True:
            value = getattr(resolved, item.attr)
            body[item.name] = number(value) if isinstance(value, float) else value
        else:
            body.update(render(resolved))
    return body
