"""tests/support/parallel.py under a real pytest-xdist run: the tests of a tier marker share one
worker, as do those of a module sharing a module-scoped fixture (set up once), and the tier groups
are handed out first. A small suite made on the spot runs in a child pytest on two workers; each of
its tests writes down which worker ran it, and when."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

CONFTEST = """\
pytest_plugins = ["tests.support.parallel"]


def pytest_configure(config):
    for marker in ("docker", "llamacpp", "browser"):
        config.addinivalue_line("markers", marker)
"""

RECORD = """\
import json, os, time
from pathlib import Path


def record(name):
    line = {"test": name, "worker": os.environ["PYTEST_XDIST_WORKER"], "at": time.monotonic()}
    with Path(os.environ["RECORDS"]).open("a") as out:
        out.write(json.dumps(line) + "\\n")
"""

SINGLES = """\
import pytest
from record import record


@pytest.mark.parametrize("n", range(6))
def test_single(n):
    record(f"single{n}")
"""

TIER = """\
import time
import pytest
from record import record

pytestmark = pytest.mark.{marker}


@pytest.mark.parametrize("n", range(3))
def test_{marker}(n):
    record(f"{marker}{{n}}")
    time.sleep(0.2)
"""

WIDE = """\
import pytest
from record import record

SETUPS = []


@pytest.fixture(scope="module")
def shared():
    SETUPS.append(1)
    return len(SETUPS)


@pytest.mark.parametrize("n", range(4))
def test_wide(shared, n):
    assert shared == 1  # set up once on this worker
    record(f"wide{n}")
"""


def _env(**more: str) -> dict[str, str]:
    # Under the suite's own xdist run this is a worker: the child is a controller of its own.
    # PYTEST_ADDOPTS (`-v`, `--durations`) is for the outer run: it would change what the
    # child prints.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_XDIST_") and k != "PYTEST_ADDOPTS"
    }
    # Only the plugins the child needs (`-p xdist.plugin`): the others cost seconds of start-up
    # in each of its processes.
    return {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **more}


def _suite(root: Path) -> None:
    (root / "conftest.py").write_text(CONFTEST)
    (root / "record.py").write_text(RECORD)
    (root / "test_a_singles.py").write_text(SINGLES)
    (root / "test_b_wide.py").write_text(WIDE)
    for marker in ("docker", "browser"):
        (root / f"test_z_{marker}.py").write_text(TIER.format(marker=marker))


def test_groups_share_a_worker_and_tiers_start_first(tmp_path: Path) -> None:
    _suite(tmp_path)
    records = tmp_path / "records.jsonl"
    env = _env(RECORDS=str(records), PYTHONPATH=f"{REPO}:{tmp_path}")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist.plugin",
         "-n", "2", "--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(runs) == 16
    worker = {}
    for run in runs:
        worker.setdefault(run["test"].rstrip("0123456789"), set()).add(run["worker"])
    assert len(worker["docker"]) == 1 and len(worker["browser"]) == 1
    assert len(worker["wide"]) == 1
    # The tier groups were given out first, though their modules come last and the module group
    # is larger (xdist alone hands out the largest group first): both workers took one, and the
    # module group waited for a worker to be free.
    first = {name: min(r["at"] for r in runs if r["test"].startswith(name)) for name in worker}
    assert first["docker"] < first["wide"] and first["browser"] < first["wide"]


def test_without_workers_nothing_is_moved(tmp_path: Path) -> None:
    """`-n 0`, and no xdist at all (as `-p no:xdist`): the usual order, and no warning."""
    _suite(tmp_path)
    for serial in (["-p", "xdist.plugin", "-n", "0"], []):
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *serial,
             "--collect-only", "--rootdir", str(tmp_path), str(tmp_path)],
            capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
            env=_env(PYTHONPATH=f"{REPO}:{tmp_path}"),
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        order = [line.split("::")[0] for line in result.stdout.splitlines() if "::" in line]
        assert len(order) == 16 and order == sorted(order), serial
        assert "Warning" not in result.stdout, result.stdout
