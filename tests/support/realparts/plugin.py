"""pytest side of the real tier (loaded by tests/conftest.py).

- After collection, for each part that a selected test needs (markers `docker`, `llamacpp`,
  `systemd`, `browser`), the part is prepared once (tests/support/realparts/provision.py): installed
  when missing under `SWAPD_REAL_PARTS=require` (the default where `CI=true`), which can take
  minutes on a clean machine, so it runs here and not inside a test's timeout. Under pytest-xdist
  every worker collects: the first to take the run's lock prepares, and leaves what it found (paths,
  or why a part cannot run) in the run's directory for the others, so apt-get and pip run once.
- `docker_engine` (session): a private real dockerd with the busybox httpd image imported, started
  on first use and stopped at the end of the session; `docker` (function): the same engine, with
  every container removed after the test; `busybox_image`: that image's tag.
- `llamacpp` (session): where llama.cpp's server code and the Gemma 270M GGUF are.
- `chromium` (session): Debian's chromium for the web UI's Playwright tests (marker `browser`).

A part that cannot run skips its tests with the reason, or, in `require` mode, fails them.
"""

from __future__ import annotations

import contextlib
import fcntl
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.realparts import browser, provision, systemd_image
from tests.support.realparts.docker_engine import DockerEngine, EngineUnavailable
from tests.support.realparts.images import BUSYBOX_IMAGE, build_busybox_image

PARTS: dict[str, Callable[[str], Any]] = {
    "docker": provision.ensure_docker,
    "llamacpp": provision.ensure_llamacpp,
    "systemd": systemd_image.prepare,
    "browser": browser.ensure_browser,
}
# part -> what its preparation returned, or the PartMissing it raised
_prepared: dict[str, Any] = {}
# xdist: the run's directory (made by the controller) where workers share `_prepared`.
SHARED_KEY = "swapd_real_parts_dir"
_shared_dir = pytest.StashKey[str]()


def _prepare(part: str, how: str) -> Any:
    if part not in _prepared:
        try:
            _prepared[part] = PARTS[part](how)
        except provision.PartMissing as exc:
            _prepared[part] = exc
    return _prepared[part]


def _need(part: str, make: Callable[[Any], Any] = lambda prepared: prepared) -> Any:
    how = provision.mode()
    if how == "off":
        pytest.skip(f"real {part} tier switched off (SWAPD_REAL_PARTS=off)")
    try:
        prepared = _prepare(part, how)
        if isinstance(prepared, Exception):
            raise prepared
        return make(prepared)
    except (provision.PartMissing, EngineUnavailable) as exc:
        reason = str(exc)
    if how == "require":
        pytest.fail(f"real {part} part cannot run (CI requires it): {reason}", pytrace=False)
    pytest.skip(f"real {part} part not available: {reason}")


def pytest_report_header() -> str:
    markers = "docker, llamacpp, systemd, browser"
    return f"real tier (markers {markers}): SWAPD_REAL_PARTS={provision.mode()}"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist, on the controller, once per worker: the run's directory for sharing `_prepared`."""
    stash = node.config.stash
    if _shared_dir not in stash:
        stash[_shared_dir] = tempfile.mkdtemp(prefix="swapd-parts-", dir="/tmp")
    node.workerinput[SHARED_KEY] = stash[_shared_dir]


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_shared_dir, None)
    if shared is not None:
        shutil.rmtree(shared, ignore_errors=True)


@contextlib.contextmanager
def _shared_with_other_workers(config: pytest.Config) -> Iterator[None]:
    """On an xdist worker: hold the run's lock, take what an earlier worker prepared, and leave
    what this one adds. Without xdist: nothing to share."""
    shared = getattr(config, "workerinput", {}).get(SHARED_KEY)
    if shared is None:
        yield
        return
    results = Path(shared) / "prepared.pickle"
    with (Path(shared) / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if results.exists():
            _prepared.update(pickle.loads(results.read_bytes()))
        yield
        results.write_bytes(pickle.dumps(_prepared))


def pytest_collection_finish(session: pytest.Session) -> None:
    how = provision.mode()
    if how == "off":
        return
    wanted = sorted({p for item in session.items for p in PARTS if item.get_closest_marker(p)})
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    with _shared_with_other_workers(session.config):
        for part in wanted:
            if part in _prepared:
                continue
            if reporter is not None and how == "require":
                reporter.write_line(f"real tier: preparing {part} (installs what is missing)")
            prepared = _prepare(part, how)
            if reporter is not None and isinstance(prepared, Exception):
                reporter.write_line(f"real tier: {part} cannot run: {prepared}")


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    def start(_: object) -> DockerEngine:
        engine = DockerEngine().start()
        try:
            build_busybox_image(engine)
        except BaseException:
            engine.stop()
            raise
        return engine

    engine: DockerEngine = _need("docker", start)
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
def chromium() -> Any:
    """Debian's chromium, ready for Playwright (tests/support/realparts/browser.py): its path."""
    return _need("browser")


@pytest.fixture(scope="session")
def llamacpp() -> provision.LlamaCpp:
    prepared: provision.LlamaCpp = _need("llamacpp")
    return prepared
