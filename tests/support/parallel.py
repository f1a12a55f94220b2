"""How the suite splits across pytest-xdist workers (`-n N --dist loadgroup`, docs/testing.md).

Every test gets at most one `xdist_group`, and `--dist loadgroup` runs a group on one worker:

- `docker`: every test with the marker `docker` (tests/real/test_docker.py and the systemd
  container of tests/real/test_systemd.py). They share one private dockerd (a session fixture,
  so per worker) and run containers on the host's network: one engine, one worker, no cross-talk.
- `llamacpp`, `browser`: the tests of those markers, so llama.cpp's servers and chromium (CPU
  heavy on two cores) run one at a time, and their session parts are set up once.
- a module's path: the other tests of a module that uses a fixture wider than a function (the
  ComfyUI modules' module-scoped `stack`, `peer_url`), so that fixture starts once, not once
  per worker that happens to get one of its tests.

Every other test is scheduled on its own, to whichever worker is free.

On a worker the groups come first, in the order above, the rest in their usual order, and the
plugin turns off xdist's reordering by group size (`--loadscope-reorder`): a group runs start to
end on one worker, so the longest ones must start first or they finish last. A run without xdist
(`-n 0`, `-p no:xdist`, no `-n`) keeps the usual order.
"""

from __future__ import annotations

import pytest

# Markers whose tests form one group each, in the order they start (longest first).
TIER_GROUPS = ("docker", "llamacpp", "browser")
WIDE_SCOPES = ("module", "class", "package")


def group_of(item: pytest.Item) -> str | None:
    for marker in TIER_GROUPS:
        if item.get_closest_marker(marker) is not None:
            return marker
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is None:
        return None
    for defs in fixtures.name2fixturedefs.values():
        if any(d.scope in WIDE_SCOPES for d in defs):
            return item.nodeid.split("::", 1)[0]
    return None


def _rank(group: str | None) -> int:
    if group in TIER_GROUPS:
        return TIER_GROUPS.index(group)
    return len(TIER_GROUPS) if group is not None else len(TIER_GROUPS) + 1


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks (it appends "@group" to node ids)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("dist", None) is None:  # no xdist (`-p no:xdist`): no groups to form
        return
    groups = {}
    for item in items:
        group = group_of(item)
        groups[item.nodeid] = group
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):
        # sorted() is stable: within a rank, the collection order stays.
        items[:] = sorted(items, key=lambda item: _rank(groups[item.nodeid]))


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False
