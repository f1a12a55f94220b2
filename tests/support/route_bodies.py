"""Hypothesis strategies for the bodies of swapd's JSON routes (Ollama's, llama.cpp's router's, the
load, sleep and profile APIs): every field a route reads, with any JSON value in it, most often
one of the right type and sometimes not, so a fuzz reaches past the first check of a route."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Any JSON value, small: a wrong type for any field.
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
ANY = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _either(right: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The field's own type seven times in eight, any JSON value otherwise (a body has many
    fields: most examples must get past the checks of all but one)."""
    return st.sampled_from(range(8)).flatmap(lambda i: right if i else LEAVES | ANY)


def _fields(
    fields: dict[str, st.SearchStrategy[Any]], *, required: tuple[str, ...] = ()
) -> st.SearchStrategy[dict[str, Any]]:
    """An object with some of `fields` (each of `required` always, though maybe of the wrong
    type: a route's first check must not stop every example)."""
    return st.fixed_dictionaries(
        {k: _either(fields[k]) for k in required},
        optional={k: _either(v) for k, v in fields.items() if k not in required},
    )


def models(names: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(names) | st.text(min_size=1, max_size=12)


IMAGES = st.lists(st.sampled_from(["iVBORw0KGgo=", "/9j/4A==", "data:image/png;base64,AA==", "!"]))
FUNCTION = _fields(
    {"name": st.text(max_size=8), "arguments": st.dictionaries(st.text(max_size=4), ANY)}
)
TOOL_CALL = _fields({"id": st.text(max_size=6), "function": FUNCTION})
MESSAGE = _fields(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.text(max_size=12),
        "images": IMAGES,
        "thinking": st.text(max_size=6),
        "tool_calls": st.lists(TOOL_CALL, max_size=3),
        "tool_name": st.text(max_size=6),
        "tool_call_id": st.text(max_size=6),
    },
    required=("role",),
)
KEEP_ALIVE = st.one_of(
    st.integers(min_value=-(10**15), max_value=10**15),
    st.floats(allow_nan=False),
    st.sampled_from(["5m", "0", "-1", "1h30m", "inf", "nan", "1e12", "2562048h", "5 m", ""]),
)


def ollama(names: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """A body for `/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings` or `/api/show`
    (each reads its own fields of these, and leaves the rest)."""
    return _fields(
        {
            "model": models(names),
            "name": models(names),
            "messages": st.lists(MESSAGE, min_size=1, max_size=3),
            "stream": st.booleans(),
            "options": st.dictionaries(
                st.sampled_from(["num_predict", "stop", "temperature", "num_ctx", "top_k", "seed"]),
                ANY,
            ),
            "format": st.sampled_from(["json", "", "xml"])
            | st.dictionaries(st.text(max_size=4), ANY),
            "think": st.booleans() | st.sampled_from(["low", "high", ""]),
            "logprobs": st.booleans(),
            "top_logprobs": st.integers(min_value=-5, max_value=30),
            "tools": st.lists(ANY, max_size=2),
            "prompt": st.text(max_size=12),
            "system": st.text(max_size=8),
            "images": IMAGES,
            "suffix": st.text(max_size=6),
            "raw": st.booleans(),
            "input": st.text(max_size=8) | st.lists(st.text(max_size=8), max_size=3),
            "dimensions": st.integers(min_value=-5, max_value=4096),
            "keep_alive": KEEP_ALIVE,
        },
        required=("model",),
    )


def router(names: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """A body for llama.cpp's router's `/models/load` and `/models/unload`."""
    return _fields({"model": models(names)}, required=("model",))


def profile(names: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """A body for `PUT /api/profiles/active`."""
    return _fields({"name": models(names)}, required=("name",))


def nested(depth: int, *, model: str = "m") -> bytes:
    """A JSON object with `model` whose `messages` is an array nested `depth` deep (2 bytes a
    level)."""
    return (
        b'{"model":"'
        + model.encode()
        + b'","name":"x","messages":'
        + b"[" * depth
        + b"]" * depth
        + b"}"
    )
