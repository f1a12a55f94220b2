"""The resolved config as YAML, in llama-swap's key names, for `swapd check-config --print`.

Macros are expanded, defaults filled, `cmd` shown as the argv swapd will exec, and every setting the
loader forced carries a `# forced: <reason>` comment. API keys are never printed.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from . import shape
from .floor.keys import shown
from .model import Config, Forced

_KEY_LINE = re.compile(r"^( *)([A-Za-z_][A-Za-z0-9_]*):")


def render(config: Config) -> str:
    shown_top = shown(shape.Top, config)
    names = list(shown_top)
    at = names.index("models")
    parts = [_dump({k: shown_top[k] for k in names[:at]}, config.forced)]
    if config.models:
        parts.append("models:\n")
        for model in config.models.values():
            # The id line is dumped on its own: ids such as `org/model:q4` need YAML quoting.
            id_line = yaml.safe_dump({model.id: None}, width=1000).rstrip("\n")
            parts.append(f"  {id_line.removesuffix(' null')}\n")
            parts.append(_indent(_dump(shown(shape.Model, model), model.forced), "    "))
    else:
        parts.append("models: {}\n")
    rest = {k: shown_top[k] for k in names[at + 1 :]}
    if rest:
        parts.append(_dump(rest, ()))
    return "".join(parts)


def _dump(data: dict[str, Any], forced: tuple[Forced, ...]) -> str:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
    return _annotate(text, forced)


def _annotate(text: str, forced: tuple[Forced, ...]) -> str:
    """Append `# forced: reason` to the lines of forced keys (dotted key paths)."""
    if not forced:
        return text
    reasons = {f.key: f.reason for f in forced}
    stack: list[tuple[int, str]] = []
    lines = text.split("\n")
    for index, line in enumerate(lines):
        match = _KEY_LINE.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        reason = reasons.get(".".join(key for _, key in stack))
        if reason is not None:
            lines[index] = f"{line}  # forced: {reason}"
    return "\n".join(lines)


def _indent(text: str, prefix: str) -> str:
    return "".join(f"{prefix}{line}\n" if line else "\n" for line in text.rstrip("\n").split("\n"))
