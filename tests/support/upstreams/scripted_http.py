"""A raw HTTP/1.1 upstream that misbehaves on purpose, for what an aiohttp server cannot be made
to send. It stands for an inference server (or something impersonating one on a model's port)
whose answers break the rules:

* `GET /health`: 200, so swapd sees it ready;
* `GET /big-line?size=N&piece=P`: a response head with one header line of N bytes;
* `GET /many-lines?count=K&size=N&piece=P`: a response head of K header lines of N bytes each;
  both written P bytes at a time with a pause between writes, so the proxy reads the head in
  pieces of any size the test chooses (no `piece`: the whole answer in one write);
* `GET /gzip-chunked`: `Transfer-Encoding: gzip, chunked`, the body `PLAIN` gzipped then chunked;
* anything else: 200 with a small JSON body naming the path.

Run as `python scripted_http.py --port N`. Keep-alive, request bodies read by Content-Length.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
from urllib.parse import parse_qs, urlsplit

PLAIN = b"the body, gzipped by transfer-coding\n" * 20
PAUSE_S = 0.002


def _chunked(data: bytes, size: int = 100) -> bytes:
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def answer(target: str) -> tuple[bytes, int | None]:
    """The bytes to send for `target`, and the size of the pieces to send them in."""
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}
    piece = int(query["piece"]) if "piece" in query else None
    if url.path in ("/big-line", "/many-lines"):
        size = int(query.get("size", 65536))
        count = int(query.get("count", 1))
        lines = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"f" * size) for i in range(count))
        body = b'{"relayed":"a head over the limit"}'
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + lines
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body, piece
    if url.path == "/gzip-chunked":
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
        head += b"Transfer-Encoding: gzip, chunked\r\n"
        return head + b"\r\n" + _chunked(gzip.compress(PLAIN)), piece
    body = json.dumps({"path": url.path, "ok": True}).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body, piece


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ValueError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            target = lines[0].split(" ")[1]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if length:
                await reader.readexactly(length)
            data, piece = answer(target)
            if piece is None:
                writer.write(data)
                await writer.drain()
                continue
            for start in range(0, len(data), piece):
                writer.write(data[start : start + piece])
                await writer.drain()
                await asyncio.sleep(PAUSE_S)
    writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    server = await asyncio.start_server(serve, args.host, args.port, reuse_address=True)
    print(f"scripted upstream listening on {args.host}:{args.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
