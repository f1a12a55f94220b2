"""Malformed HTTP/1.1 request heads, generated from a seed for the proxy's bounded fuzz loop.

Each generator breaks RFC 9112 in one way a strict parser must refuse (a 4xx or a closed
connection), so any other answer is a finding: a 5xx, a 2xx, or a hang.
"""

from __future__ import annotations

import random
from collections.abc import Callable

PATHS = ["/v1/chat/completions", "/upstream/alpha/x", "/comfyui/api/queue", "/health", "/models"]
TOKEN = "abcdefghijklmnopqrstuvwxyz0123456789-"
CONTROLS = [chr(c) for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)] + ["\x7f"]


def _word(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice(TOKEN) for _ in range(rng.randint(1, n)))


def _garble(rng: random.Random, text: str) -> str:
    at = rng.randrange(len(text) + 1)
    return text[:at] + rng.choice(CONTROLS) + text[at:]


def _head(start: str, headers: list[str], body: str = "", eol: str = "\r\n") -> bytes:
    return (eol.join([start, *headers]) + eol + eol + body).encode("latin-1")


def _ok_headers(rng: random.Random) -> list[str]:
    return ["Host: swapd", f"X-{_word(rng)}: {_word(rng)}"][: rng.randint(1, 2)]


def bad_method(rng: random.Random) -> bytes:
    return _head(f"{_garble(rng, 'POST')} {rng.choice(PATHS)} HTTP/1.1", _ok_headers(rng))


def bad_version(rng: random.Random) -> bytes:
    version = rng.choice(["HTTP/1.", "HTTX/1.1", "HTTP/11", "HTTP/1.1x", "http/1.1", "HTTP/a.b"])
    return _head(f"GET {rng.choice(PATHS)} {version}", _ok_headers(rng))


def bad_target(rng: random.Random) -> bytes:
    return _head(f"GET {_garble(rng, rng.choice(PATHS))} HTTP/1.1", _ok_headers(rng))


def bad_header_name(rng: random.Random) -> bytes:
    name = rng.choice([_garble(rng, "X-Name"), "Bad Name", "X-(a)", "X-[a]", "X@a", ""])
    return _head(f"GET {rng.choice(PATHS)} HTTP/1.1", ["Host: swapd", f"{name}: {_word(rng)}"])


def missing_colon(rng: random.Random) -> bytes:
    return _head(f"GET {rng.choice(PATHS)} HTTP/1.1", ["Host: swapd", f"X-{_word(rng)}"])


def bad_header_value(rng: random.Random) -> bytes:
    value = _garble(rng, _word(rng, 12))
    return _head(f"GET {rng.choice(PATHS)} HTTP/1.1", ["Host: swapd", f"X-Value: {value}"])


def bad_content_length(rng: random.Random) -> bytes:
    value = rng.choice(["-1", "1e3", "abc", "0x10", "+5", "5 5", "5,6", "99999999999999999999999"])
    headers = ["Host: swapd", "Content-Type: application/json", f"Content-Length: {value}"]
    return _head("POST /v1/chat/completions HTTP/1.1", headers, '{"model":"alpha"}')


def conflicting_lengths(rng: random.Random) -> bytes:
    a, b = rng.sample(range(1, 64), 2)
    headers = ["Host: swapd", f"Content-Length: {a}", f"Content-Length: {b}"]
    return _head(f"POST {rng.choice(PATHS)} HTTP/1.1", headers, "x" * max(a, b))


def length_and_chunked(rng: random.Random) -> bytes:
    headers = ["Host: swapd", f"Content-Length: {rng.randint(1, 9)}", "Transfer-Encoding: chunked"]
    rng.shuffle(headers)
    return _head(f"POST {rng.choice(PATHS)} HTTP/1.1", headers, "0\r\n\r\n")


def bad_chunk_size(rng: random.Random) -> bytes:
    size = rng.choice(["zz", "-1", "0x5", " 5", "5 5", "fffffffffffffffffffff"])
    headers = ["Host: swapd", "Transfer-Encoding: chunked"]
    return _head(f"POST {rng.choice(PATHS)} HTTP/1.1", headers, f"{size}\r\nhello\r\n0\r\n\r\n")


def unknown_transfer_coding(rng: random.Random) -> bytes:
    coding = rng.choice(["xchunked", "chunked, identity", "gzip", "chunked;q=1", "chunked-ish"])
    headers = ["Host: swapd", f"Transfer-Encoding: {coding}"]
    return _head(f"POST {rng.choice(PATHS)} HTTP/1.1", headers, "5\r\nhello\r\n0\r\n\r\n")


def oversized(rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return _head(f"GET /{'a' * rng.randint(9000, 20000)} HTTP/1.1", ["Host: swapd"])
    big = "b" * rng.randint(9000, 20000)
    return _head("GET /health HTTP/1.1", ["Host: swapd", f"X-Big: {big}"])


def garbage(rng: random.Random) -> bytes:
    noise = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
    return noise.replace(b"\r\n", b"\x00\x00") + b"\r\n\r\n"


GENERATORS: list[Callable[[random.Random], bytes]] = [
    bad_method,
    bad_version,
    bad_target,
    bad_header_name,
    missing_colon,
    bad_header_value,
    bad_content_length,
    conflicting_lengths,
    length_and_chunked,
    bad_chunk_size,
    unknown_transfer_coding,
    oversized,
    garbage,
]


def cases(seed: int, count: int) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        make = rng.choice(GENERATORS)
        out.append((make.__name__, make(rng)))
    return out
