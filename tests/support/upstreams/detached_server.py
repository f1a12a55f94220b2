"""Stands for `docker run` without `cmdStop` (docker is not on this machine): the process swapd
starts serves nothing itself; the server it launches is detached (its own session, reparented
away from it, as a container is a child of the docker engine, not of the `docker run` CLI), so
stopping the process swapd started leaves the server listening on the model's port.

    detached_server.py --port N [--name NAME]

The server answers GET /health and POST /v1/chat/completions with 200 and its pid.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(port: int, name: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = json.dumps({"served_by": {"name": name, "pid": os.getpid()}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer()

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="detached")
    args = parser.parse_args()
    intermediate = os.fork()
    if intermediate == 0:
        os.setsid()
        if os.fork() == 0:
            for fd in (0, 1, 2):
                os.close(fd)
            os.open(os.devnull, os.O_RDWR)
            os.dup2(0, 1)
            os.dup2(0, 2)
            serve(args.port, args.name)
        os._exit(0)
    os.waitpid(intermediate, 0)
    # The "CLI": wait until the server listens, then stay attached until stopped.
    print(f"detached server for {args.name} starting on port {args.port}", flush=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", args.port)) == 0:
                break
        time.sleep(0.02)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
