"""llama-swap's `security.cors`, read with llama-swap's checks: each origin `*` or a bare
`scheme://host[:port]` (a path, a trailing slash, a query would never match what a browser
sends), `*` never with `allowCredentials` (the Fetch standard forbids the pair), methods and
header names HTTP tokens, `maxAge` not negative (0: the default, a day). Each problem is an error
at its line, as llama-swap refuses to start on it. docs/configuration.md, "security.cors"."""

from __future__ import annotations

from urllib.parse import urlsplit

from ....ipc.routing_table import CorsPolicy
from .. import shape
from ..floor.issues import Report
from ..floor.typed import Converter

_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_WHERE = ("security", "cors")


def cors(top: shape.Top, typed: Converter, report: Report) -> CorsPolicy:
    spec = top.security.cors if top.security is not None else None
    if spec is None:
        return CorsPolicy()
    origins = []
    for index, origin in typed.indexed((*_WHERE, "allowedOrigins"), spec.allowed_origins):
        problem = origin_problem(origin)
        if problem is not None:
            report.error((*_WHERE, "allowedOrigins", index), problem)
        elif origin == "*" and spec.allow_credentials:
            report.error(
                (*_WHERE, "allowedOrigins", index),
                'allowedOrigins may not contain "*" when allowCredentials is true; list the '
                "origins explicitly",
            )
        else:
            origins.append(origin if origin == "*" else origin.lower())
    tokens = {}
    for name, values in (
        ("allowedMethods", spec.allowed_methods),
        ("allowedHeaders", spec.allowed_headers),
        ("exposedHeaders", spec.exposed_headers),
    ):
        good = []
        for index, value in typed.indexed((*_WHERE, name), values):
            if value and set(value) <= _TOKEN:
                good.append(value)
            else:
                what = "HTTP method" if name == "allowedMethods" else "HTTP header name"
                report.error((*_WHERE, name, index), f"{value!r} is not a valid {what}")
        tokens[name] = tuple(good)
    max_age = spec.max_age or 0
    if max_age < 0:
        report.error((*_WHERE, "maxAge"), f"maxAge must be >= 0, got {max_age}")
    return CorsPolicy(
        allowed_origins=tuple(origins),
        allow_credentials=bool(spec.allow_credentials),
        allowed_methods=tokens["allowedMethods"],
        allowed_headers=tokens["allowedHeaders"],
        exposed_headers=tokens["exposedHeaders"],
        max_age=max_age if max_age > 0 else CorsPolicy().max_age,
    )


def origin_problem(origin: str) -> str | None:
    """Why `origin` cannot be an allowed origin, or None."""
    if origin == "*":
        return None
    if not origin:
        return "an allowed origin must not be empty"
    if origin != origin.strip():
        return f"{origin!r} must not have leading or trailing whitespace"
    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as exc:
        return f"{origin!r} is not a valid origin: {exc}"
    if not parts.scheme or not parts.netloc:
        return (
            f"{origin!r} must be a scheme://host[:port] origin, e.g. https://dashboard.example.com"
        )
    if parts.path or parts.query or parts.fragment or "@" in parts.netloc or "#" in origin:
        return f"{origin!r} must not include a path, query, fragment or userinfo"
    return None
