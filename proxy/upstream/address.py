"""An upstream's address, parsed once (when the routing table or a model's state arrives), never
per request."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UpstreamAddress:
    """`http://host:port/base` as its parts. `base` is the path prefix without a trailing slash
    ("" for none); `hostport` is what a Host header naming the upstream itself says."""

    scheme: str
    host: str
    port: int
    base: str
    hostport: str

    @classmethod
    def parse(cls, url: str) -> UpstreamAddress:
        parts = urllib.parse.urlsplit(url.strip())
        scheme = parts.scheme.lower() or "http"
        host = parts.hostname or "127.0.0.1"
        try:
            port = parts.port
        except ValueError:
            port = None
        if port is None:
            port = 443 if scheme == "https" else 80
        hostport = parts.netloc.rpartition("@")[2] or f"{host}:{port}"
        return cls(scheme, host, port, parts.path.rstrip("/"), hostport)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.hostport}{self.base}"

    @property
    def lean(self) -> bool:
        """Plain HTTP: the lean keep-alive pool can serve it (TLS goes through aiohttp)."""
        return self.scheme == "http"


NOWHERE = UpstreamAddress("http", "127.0.0.1", 0, "", "127.0.0.1:0")
