"""Shared fixtures: `session` (an aiohttp client session), `stack_factory`, which starts real
swapd stacks (tests/support/stack.py) and stops every one of them at the end of the test, failing
the test if one did not exit 0 or left a process behind, and `peer_url` (a peer's upstream, one per
test module)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest

from tests.support.comfyui import ComfyUpstream, Running
from tests.support.proxy import standalone_upstream
from tests.support.stack import Stack, free_port

# The real tier's fixtures (`docker`, `docker_engine`, `busybox_image`, `llamacpp`), the xdist
# groups (which tests share a worker under `-n N --dist loadgroup`), the check that a test's
# markers agree with its tier's folder, and the `circus` fixture (a circusd on its own).
pytest_plugins = [
    "tests.support.realparts.plugin",
    "tests.support.parallel",
    "tests.support.tiers",
    "tests.support.circus",
]


# Set on a test that failed (any phase), so its stacks keep their directories for a look.
FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    return report


@pytest.fixture
def stack_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(config: str | dict[str, Any], *, start: bool = True, **kwargs: Any) -> Stack:
        stack = Stack(config, **kwargs)
        stacks.append(stack)
        return stack.start() if start else stack

    yield make
    problems = []
    for stack in stacks:
        try:
            stack.stop()
        except AssertionError as exc:
            problems.append(str(exc))
        else:
            if request.node.stash.get(FAILED, False):
                print(f"swapd's run directory, config and logs are kept in {stack.base}")
                continue
            # Its run directory, config and logs go with it; a stack that stopped badly, or
            # whose test failed, keeps them for a look (the failure names the directory).
            shutil.rmtree(stack.base, ignore_errors=True)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


# For the ComfyUI modules, whose module-scoped `stack` fixture carries its ComfyUI-like upstream
# as `stack.up`.
@pytest.fixture
def swapd(stack: Stack) -> Running:
    return Running(stack)


@pytest.fixture
def up(stack: Stack) -> ComfyUpstream:
    return stack.up  # type: ignore[attr-defined,no-any-return]


@pytest.fixture(scope="module")
def peer_url() -> Iterator[str]:
    """A real upstream on loopback that a stack's `peers` entry points at."""
    with standalone_upstream("peer-upstream", free_port()) as url:
        yield url
