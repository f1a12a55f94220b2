"""The UI's static files, read from the installed package once and kept in memory (a few tens of
kilobytes), each with its content type and an ETag."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


@functools.cache
def all_assets() -> dict[str, Asset]:
    from importlib import resources  # here, not at start-up: the proxy's idle memory

    out: dict[str, Asset] = {}
    for entry in (resources.files(__package__) / "static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if not entry.is_file() or suffix not in _TYPES:
            continue
        body = entry.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        out[entry.name] = Asset(body, _TYPES[suffix], etag)
    return out


def get(name: str) -> Asset | None:
    return all_assets().get(name)
