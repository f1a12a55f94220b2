"""Shared fixtures. `stack_factory` starts real swapd stacks (tests/stack.py) and stops every one
of them at the end of the test, failing the test if one did not exit 0 or left a process behind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.stack import Stack


@pytest.fixture
def stack_factory() -> Iterator[Callable[..., Stack]]:
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
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)
