"""Notice a process's exit at once, even though it is circusd's child and not ours.

A pidfd (Linux 5.3+) becomes readable the moment the process exits, so the daemon need not
wait for circus's once-per-`check_delay` reap. The exit code is read from the zombie's
`/proc/<pid>/stat` while circusd has not reaped it yet; after that, circus's `reap` event has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os


async def wait_exit(pid: int) -> None:
    """Return when `pid` has exited (at once if it is already gone)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:
        # No pidfd support (Linux < 5.3): poll.
        await _poll_exit(pid)
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def _poll_exit(pid: int) -> None:
    while True:
        if not is_alive(pid):
            return
        await asyncio.sleep(0.02)


def is_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (exited, not yet reaped by circusd) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return fields[0] not in (b"Z", b"X")


def zombie_exit_code(pid: int) -> int | None:
    """The exit code of an exited, unreaped process, as circus reports it (-N for signal N)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        if fields[0] != b"Z":
            return None
        # Field 52 of proc(5) (`exit_code`, a wait status); fields[0] here is field 3.
        return os.waitstatus_to_exitcode(int(fields[52 - 3]))
    return None
