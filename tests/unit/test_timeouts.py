"""`timeouts` (llama-swap's keys and defaults) without a stack: the config, the aiohttp limits they
become, and the lean pool's idle connections."""

from __future__ import annotations

import asyncio
import socket
import textwrap

import pytest

from swapd.daemon.config import ConfigError, load, load_config_text
from swapd.ipc.routing_table import Timeouts
from swapd.proxy.upstream.pool import UpstreamPool
from swapd.proxy.upstream.transport import _client_timeout

HEADER = """
models:
  m:
    cmd: "x"
    proxy: "http://127.0.0.1:9"
"""


PEER = """
peers:
  p:
    proxy: http://127.0.0.1:9
    models: [remote]
"""


def test_defaults_are_llama_swaps_and_values_override_them() -> None:
    config = load_config_text(HEADER + PEER)
    assert config.models["m"].timeouts == Timeouts(
        connect=30, keepalive=30, response_header=0, tls_handshake=10, expect_continue=1,
        idle_conn=90,
    )  # fmt: skip
    assert config.peers["p"].timeouts == Timeouts(response_header=60)
    text = HEADER + "    timeouts: {connect: 5, responseHeader: 2, idleConn: 0}\n"
    text += PEER + "    timeouts: {responseHeader: 0, tlsHandshake: 3}\n"
    config = load_config_text(text)
    assert config.models["m"].timeouts == Timeouts(connect=5, response_header=2, idle_conn=0)
    assert config.peers["p"].timeouts == Timeouts(response_header=0, tls_handshake=3)


def test_timeouts_load_without_warnings_and_bad_values_say_where(tmp_path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEADER + "    timeouts: {connect: 5, keepalive: 10, expectContinue: 2}\n")
    assert load(path, environ={}).warnings == ()
    with pytest.raises(ConfigError) as caught:
        load_config_text(HEADER + "    timeouts:\n      connect: -1\n      idle: 3\n")
    assert (
        str(caught.value) == "config.yaml:7 models.m.timeouts.connect: must be at least 0, got -1"
    )
    assert [str(w) for w in caught.value.warnings] == [
        "config.yaml:8 models.m.timeouts.idle: unknown key 'idle'; did you mean 'idleConn'? "
        "(ignored, as llama-swap ignores it)"
    ]


def test_aiohttp_limits_from_timeouts() -> None:
    assert _client_timeout(None, False) is None
    plain = _client_timeout(Timeouts(connect=5), False)
    assert plain is not None and (plain.sock_connect, plain.connect, plain.total) == (5, None, None)
    tls = _client_timeout(Timeouts(connect=5, tls_handshake=3), True)
    assert tls is not None and (tls.sock_connect, tls.connect) == (5, 8)
    none = _client_timeout(Timeouts(connect=0), True)
    assert none is not None and (none.sock_connect, none.connect) == (None, None)


class _CountingServer:
    """Answers every HTTP/1.1 request on a kept-alive connection; counts connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def _get(pool: UpstreamPool, port: int, timeouts: Timeouts) -> bytes:
    head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    response = await pool.request("127.0.0.1", port, head, None, timeouts=timeouts)
    return await response.read()


@pytest.mark.parametrize(("idle_conn", "connections"), [(0.2, 2), (0, 1)])
async def test_idle_connections_past_idle_conn_are_not_reused(
    idle_conn: float, connections: int
) -> None:
    counting = _CountingServer()
    async with counting as port:
        pool = UpstreamPool()
        limits = Timeouts(idle_conn=idle_conn, keepalive=7)
        try:
            assert await _get(pool, port, limits) == b"ok"
            (conn,) = pool._idle[("127.0.0.1", port)]
            sock = conn.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
            await asyncio.sleep(0.5)  # idle past the 0.2 s limit (the condition under test)
            assert await _get(pool, port, limits) == b"ok"
        finally:
            pool.close()
    assert counting.connections == connections


def test_llama_swaps_defaults_written_out_are_the_defaults() -> None:
    example = textwrap.dedent(
        """
        models:
          m:
            cmd: x
            proxy: http://127.0.0.1:9
            timeouts:
              connect: 30
              keepalive: 30
              responseHeader: 0
              tlsHandshake: 10
              expectContinue: 1
              idleConn: 90
        """
    )
    assert load_config_text(example).models["m"].timeouts == Timeouts()
