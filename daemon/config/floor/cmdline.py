"""`cmd` / `cmdStop` text to argv: comment lines, `\\` continuations, POSIX shell words, no shell.

Comment lines are whole lines of the parsed YAML string whose first non-blank character is `#`.
A folded (`>`) scalar has no such lines: YAML joins its lines with spaces, so a `#` line there is an
argument (the seed page's warning). The loader therefore strips comment lines only from text that
was not folded; see `docs/configuration.md`.
"""

from __future__ import annotations

import shlex


def strip_comment_lines(text: str) -> str:
    """Drop whole-line `#` comments; done before macros so a macro in a comment never counts."""
    return "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))


def join_continuations(text: str) -> str:
    """A line ending in `\\` continues on the next one (llama-swap replaces the `\\` by a space)."""
    lines = []
    for line in text.split("\n"):
        trimmed = line.strip()
        lines.append(trimmed[:-1] + " " if trimmed.endswith("\\") else line)
    return "\n".join(lines)


def split_command(text: str) -> list[str]:
    """Shell words, newlines counting as blanks. Raises ValueError on an unclosed quote."""
    return shlex.split(join_continuations(text), comments=False, posix=True)
