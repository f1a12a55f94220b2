"""A real circusd with no daemon and no proxy (the `circus` fixture), and a model config whose
process is the fake model upstream."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from swapd.daemon.config import ModelConfig
from swapd.daemon.machinery.circus_client import CircusClient, CircusUnavailable
from tests.support.stack import FAKE_MODEL


@pytest.fixture
async def circus() -> AsyncIterator[tuple[CircusClient, Path]]:
    base = Path(tempfile.mkdtemp(prefix="swapd-c-", dir="/tmp"))
    ini = base / "circus.ini"
    ini.write_text(
        textwrap.dedent(
            f"""\
            [circus]
            endpoint = ipc://{base}/ctl.sock
            pubsub_endpoint = ipc://{base}/pub.sock
            multicast_endpoint =
            check_delay = 1
            """
        )
    )
    proc = _start_circusd(base, ini)
    client = CircusClient(f"ipc://{base}/ctl.sock", timeout=5)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                await client.call("list", timeout=0.5)
                break
            except CircusUnavailable:
                assert time.monotonic() < deadline, "circusd did not come up"
        yield client, base
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _model(mid: str, port: int, *extra: str, cmd: tuple[str, ...] | None = None) -> ModelConfig:
    argv = cmd or (sys.executable, str(FAKE_MODEL), "--port", str(port), "--name", mid, *extra)
    return ModelConfig(
        id=mid,
        cmd=argv,
        cmd_stop=None,
        proxy=f"http://127.0.0.1:{port}",
        check_endpoint="/health",
        ttl=0,
        unload_timeout=2,
        health_check_timeout=15,
        concurrency_limit=10,
        port=port,
    )


def _start_circusd(base: Path, ini: Path) -> subprocess.Popen[bytes]:
    log = str(base / "circusd.log")
    return subprocess.Popen(
        [sys.executable, "-m", "circus.circusd", "--log-output", log, str(ini)],
        start_new_session=True,
    )
