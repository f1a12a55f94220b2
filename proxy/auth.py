"""API keys (`apiKeys`): when set, every route but `/health` (and CORS preflights) needs one.

A key is taken from the first of: the password of `Authorization: Basic`, `Authorization: Bearer`,
`x-api-key`. It is compared with every configured key in constant time (`hmac.compare_digest`, and
no early exit, so timing reveals neither the key nor which one matched). Keys are never logged; the
client's headers are forwarded upstream unchanged, as llama-swap does.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from aiohttp import web

from .floor.errors import BadRequest, Unauthorized

REALM = 'Basic realm="swapd"'
# What answers without a key (and to any site's page: `origin_check.py`).
OPEN_PATHS = frozenset({"/health", "/wol-health", "/favicon.ico"})
UNAUTHORIZED = "unauthorized: invalid or missing API key"


def presented_key(request: web.BaseRequest) -> bytes | None:
    headers = request.headers
    return key_from(headers.get("Authorization", ""), headers.get("x-api-key"))


def key_from(authorization: str, x_api_key: str | None) -> bytes | None:
    """The key a client presents, from its `Authorization` and `x-api-key` header values."""
    scheme, _, credentials = authorization.partition(" ")
    scheme = scheme.lower()
    credentials = credentials.strip()
    if scheme == "basic" and credentials:
        try:
            decoded = base64.b64decode(credentials, validate=True)
        except (binascii.Error, ValueError):
            decoded = b""
        _, sep, password = decoded.partition(b":")
        if sep:
            return password
    if scheme == "bearer" and credentials:
        return credentials.encode()
    return x_api_key.encode() if x_api_key else None


def check_single_credentials(request: web.BaseRequest) -> None:
    """400 for a request with more than one `Authorization` or `x-api-key` header, on every
    route: servers disagree on which of several counts (first or last), so none does."""
    headers = request.headers
    for name in ("Authorization", "x-api-key"):
        if len(headers.getall(name, ())) > 1:
            raise BadRequest(f"more than one {name} header: ambiguous credentials")


def check_api_key(request: web.BaseRequest, keys: tuple[bytes, ...]) -> None:
    """Raise 401 unless `request` carries one of `keys` (no-op when `keys` is empty)."""
    if not keys:
        return
    if not key_ok(presented_key(request), keys):
        raise unauthorized()


def key_ok(presented: bytes | None, keys: tuple[bytes, ...]) -> bool:
    if presented is None:
        return False
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(presented, key)
    return ok


def unauthorized() -> Unauthorized:
    return Unauthorized(UNAUTHORIZED, headers={"WWW-Authenticate": REALM})
