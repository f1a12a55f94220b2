"""Ollama's request bodies rewritten as the model's own OpenAI-style requests (pure functions).

* `/api/chat` -> `/v1/chat/completions`: `messages` (`images` as image parts, `tool_calls` with
  their arguments as JSON text and ids, a `tool` message tied to its call), `tools` as they are,
  `format`, `options`, `think`.
* `/api/generate` -> `/v1/chat/completions` with the prompt as the user's message (and `system`
  before it), as Ollama applies the model's template; `raw: true` or a `suffix` ->
  `/v1/completions` with the prompt as it is.
* `/api/embed` and `/api/embeddings` -> `/v1/embeddings`.

`options` are mapped to their OpenAI names (`num_predict` -> `max_tokens`, ...) and llama.cpp's
(`top_k`, `min_p`, `repeat_penalty`, ...); the options that say how a model is loaded (`num_ctx`,
`num_gpu`, ...) are dropped, since swapd runs each model as its config says; any other passes
as it is. A streamed answer asks for OpenAI's usage chunk (`stream_options`), where the counts
come from.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from ...floor.errors import BadRequest
from . import values

Kind = Literal["chat", "generate", "embed", "embeddings"]
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"

# Ollama option -> the name in the model's request.
_RENAMED = {"num_predict": "max_tokens", "num_keep": "n_keep"}
# Options that say how a model is loaded, not how it answers: swapd runs what its config says.
_LOAD_TIME = frozenset(
    {
        "num_ctx",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mmap",
        "use_mlock",
        "embedding_only",
        "num_thread",
        "numa",
    }
)
_IMAGE_TYPES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)
_encode = msgspec.json.Encoder().encode


@dataclass(slots=True)
class Translated:
    """One Ollama request as the model's own: `body` goes to `path`; `asked` is the name as the
    client wrote it (echoed in the answer), `name` what the route decision gets. `empty`: a
    chat or generate with nothing to answer (Ollama's way to load, or with `keep_alive: 0` to
    unload, a model). `keep_alive`: seconds (-1: for ever), None: not given."""

    kind: Kind
    asked: str
    name: str
    path: str
    body: dict[str, Any]
    stream: bool = False
    keep_alive: float | None = None
    keep_alive_given: bool = False
    empty: bool = False
    completion: bool = False  # generate sent to /v1/completions (raw or suffix)
    single: bool = False  # /api/embeddings: one prompt, one `embedding`
    extra: dict[str, Any] = field(default_factory=dict)


def model_of(doc: dict[str, Any]) -> str:
    name = doc.get("model") or doc.get("name")  # `name`: Ollama's older field
    if not isinstance(name, str) or not name:
        raise BadRequest("model is required")
    return name


def translate(kind: Kind, doc: dict[str, Any], name: str) -> Translated:
    asked = model_of(doc)
    if kind == "chat":
        out = _chat(doc, asked, name)
    elif kind == "generate":
        out = _generate(doc, asked, name)
    else:
        out = _embed(kind, doc, asked, name)
    if "keep_alive" in doc and doc["keep_alive"] is not None:
        out.keep_alive = values.keep_alive(doc["keep_alive"])
        out.keep_alive_given = True
    return out


def encode(body: dict[str, Any]) -> bytes:
    return _encode(body)


# --------------------------------------------------------------------------------------------------


def _stream(doc: dict[str, Any]) -> bool:
    stream = doc.get("stream", True)
    if stream is None:
        return True
    if not isinstance(stream, bool):
        raise BadRequest(f"stream must be true or false, got {stream!r}")
    return stream


def _common(doc: dict[str, Any], body: dict[str, Any], stream: bool) -> None:
    """`stream`, `options`, `format` and `think`, the same for chat and generate."""
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(options(doc.get("options")))
    fmt = doc.get("format")
    if fmt == "json":
        body["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "response", "schema": fmt, "strict": True},
        }
    elif fmt not in (None, ""):
        raise BadRequest(f'format must be "json" or a JSON schema, got {fmt!r}')
    think = doc.get("think")
    if isinstance(think, bool):
        body["chat_template_kwargs"] = {"enable_thinking": think}
    elif isinstance(think, str) and think:
        body["reasoning_effort"] = think
    if doc.get("logprobs"):
        body["logprobs"] = True
        if isinstance(doc.get("top_logprobs"), int):
            body["top_logprobs"] = doc["top_logprobs"]


def options(given: object) -> dict[str, Any]:
    """Ollama's `options` under the model's own names (the module's docstring)."""
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise BadRequest("options must be a JSON object")
    out: dict[str, Any] = {}
    for key, value in given.items():
        if not isinstance(key, str) or key in _LOAD_TIME or value is None:
            continue
        if key == "num_predict" and isinstance(value, int) and value < 0:
            continue  # -1: until the model stops, -2: until the context is full (the default)
        if key == "stop" and isinstance(value, str):
            value = [value]
        out[_RENAMED.get(key, key)] = value
    return out


def _chat(doc: dict[str, Any], asked: str, name: str) -> Translated:
    stream = _stream(doc)
    given = doc.get("messages")
    if given is not None and not isinstance(given, list):
        raise BadRequest("messages must be a list")
    body: dict[str, Any] = {"model": name, "messages": messages(given or [])}
    _common(doc, body, stream)
    tools = doc.get("tools")
    if tools:
        if not isinstance(tools, list):
            raise BadRequest("tools must be a list")
        body["tools"] = [{"type": "function", **t} if isinstance(t, dict) else t for t in tools]
    return Translated("chat", asked, name, CHAT_PATH, body, stream, empty=not given)


def _generate(doc: dict[str, Any], asked: str, name: str) -> Translated:
    stream = _stream(doc)
    prompt = doc.get("prompt") or ""
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string")
    images = doc.get("images") or []
    suffix = doc.get("suffix")
    empty = not prompt and not images
    if doc.get("raw") or suffix:
        body: dict[str, Any] = {"model": name, "prompt": prompt}
        if suffix:
            body["suffix"] = suffix
        _common(doc, body, stream)
        return Translated(
            "generate", asked, name, COMPLETIONS_PATH, body, stream, empty=empty, completion=True
        )
    turns: list[dict[str, Any]] = []
    system = doc.get("system")
    if isinstance(system, str) and system:
        turns.append({"role": "system", "content": system})
    turns.append({"role": "user", "content": prompt, "images": images})
    body = {"model": name, "messages": messages(turns)}
    _common(doc, body, stream)
    return Translated("generate", asked, name, CHAT_PATH, body, stream, empty=empty)


def _embed(kind: Kind, doc: dict[str, Any], asked: str, name: str) -> Translated:
    if kind == "embeddings":
        text = doc.get("prompt")
        if not isinstance(text, str):
            raise BadRequest("prompt must be a string")
        body: dict[str, Any] = {"model": name, "input": text}
        return Translated(kind, asked, name, EMBEDDINGS_PATH, body, single=True)
    given = doc.get("input")
    if isinstance(given, str):
        given = [given]
    if not isinstance(given, list) or not all(isinstance(t, str) for t in given):
        raise BadRequest("input must be a string or a list of strings")
    body = {"model": name, "input": given}
    if isinstance(doc.get("dimensions"), int):
        body["dimensions"] = doc["dimensions"]
    return Translated(kind, asked, name, EMBEDDINGS_PATH, body, empty=not given)


# --------------------------------------------------------------------------------------------------


def messages(given: list[Any]) -> list[dict[str, Any]]:
    """Ollama's messages as OpenAI's. Tool calls get ids (`call_N`, unless Ollama's carries one),
    and a `tool` message the id of the latest call of its `tool_name` not answered yet (else of
    the latest call not answered)."""
    out: list[dict[str, Any]] = []
    open_calls: list[tuple[str, str]] = []  # (id, function name) not answered yet
    counter = 0
    for item in given:
        if not isinstance(item, dict):
            raise BadRequest("each message must be a JSON object")
        role = item.get("role")
        if not isinstance(role, str):
            raise BadRequest("each message needs a role")
        content = item.get("content")
        message: dict[str, Any] = {"role": role, "content": content if content is not None else ""}
        images = item.get("images")
        if images:
            message["content"] = _with_images(message["content"], images)
        thinking = item.get("thinking")
        if isinstance(thinking, str) and thinking:
            message["reasoning_content"] = thinking
        calls = item.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise BadRequest("tool_calls must be a list")
        if calls:
            message["tool_calls"] = []
            for call in calls:
                if not isinstance(call, dict):
                    raise BadRequest("each tool call must be a JSON object")
                function = call.get("function") or {}
                if not isinstance(function, dict):
                    raise BadRequest("a tool call's function must be a JSON object")
                call_id = call["id"] if isinstance(call.get("id"), str) else f"call_{counter}"
                counter += 1
                arguments = function.get("arguments", {})
                message["tool_calls"].append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": function.get("name", ""),
                            "arguments": arguments
                            if isinstance(arguments, str)
                            else _encode(arguments).decode(),
                        },
                    }
                )
                open_calls.append((call_id, function.get("name", "")))
        if role == "tool":
            tool_name = item.get("tool_name") or item.get("name")
            found = item.get("tool_call_id")
            if not isinstance(found, str):
                found = _answer(open_calls, tool_name)
            if found is not None:
                message["tool_call_id"] = found
            if tool_name:
                message["name"] = tool_name
        out.append(message)
    return out


def _answer(open_calls: list[tuple[str, str]], tool_name: object) -> str | None:
    for i in range(len(open_calls) - 1, -1, -1):
        if open_calls[i][1] == tool_name:
            return open_calls.pop(i)[0]
    return open_calls.pop()[0] if open_calls else None


def _with_images(content: object, images: object) -> list[dict[str, Any]]:
    if not isinstance(images, list):
        raise BadRequest("images must be a list of base64 strings")
    parts: list[dict[str, Any]] = []
    if isinstance(content, str) and content:
        parts.append({"type": "text", "text": content})
    for image in images:
        if not isinstance(image, str):
            raise BadRequest("images must be a list of base64 strings")
        url = image if image.startswith("data:") else f"data:{_image_type(image)};base64,{image}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _image_type(data: str) -> str:
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4), validate=False)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest("an image is not valid base64") from exc
    for magic, kind in _IMAGE_TYPES:
        if head.startswith(magic):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"  # servers decode by content; the label is a hint
