"""A model's weight files and the host's page cache: which files they are (the paths after
`-m`/`--model`/`--mmproj` in its `cmd`, and its `weights` key), how much of them the page cache
holds (`mincore` on a read-only mapping, through ctypes: no extra dependency), reading them in
ahead of a start (`posix_fadvise(WILLNEED)`), and the host's free memory (`/proc/meminfo`).

Only regular files are read, their real path outside /proc, /sys and /dev: a `cmd` may name
anything, and a device or a pseudo-file must never be mapped or read ahead. Bounded: at most
MAX_FILES files a model."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

# The flags whose next word is a weight file; `--flag=path` counts too.
WEIGHT_FLAGS = ("-m", "--model", "--mmproj")
REFUSED_ROOTS = ("/proc", "/sys", "/dev")
MAX_FILES = 16


def named_files(cmd: Sequence[str], weights: Sequence[str] = ()) -> list[str]:
    """The paths `cmd` names after a weight flag, then `weights`; repeats dropped, in order."""
    found: list[str] = []
    args = list(cmd)
    for index, arg in enumerate(args):
        if arg in WEIGHT_FLAGS and index + 1 < len(args):
            found.append(args[index + 1])
        else:
            flag, eq, value = arg.partition("=")
            if eq and flag in WEIGHT_FLAGS and flag.startswith("--") and value:
                found.append(value)
    found.extend(weights)
    out: list[str] = []
    for path in found:
        if path and path not in out:
            out.append(path)
    return out


def usable(path: str) -> str | None:
    """The real path of `path` when it is a regular file outside /proc, /sys and /dev; else
    None (missing, a folder, a device, a pseudo-file, unreadable)."""
    try:
        real = os.path.realpath(os.path.expanduser(path))
        info = os.stat(real)
    except (OSError, ValueError):
        return None
    if any(real == root or real.startswith(root + "/") for root in REFUSED_ROOTS):
        return None
    if not stat.S_ISREG(info.st_mode) or not os.access(real, os.R_OK):
        return None
    return real


def weight_files(cmd: Sequence[str], weights: Sequence[str] = ()) -> list[str]:
    """The usable files among those a model names, at most MAX_FILES."""
    out: list[str] = []
    for path in named_files(cmd, weights):
        real = usable(path)
        if real is not None and real not in out:
            out.append(real)
    return out[:MAX_FILES]


@dataclass(frozen=True)
class Residency:
    files: int
    size: int  # bytes
    cached: int  # bytes the page cache holds


_PAGE = mmap.PAGESIZE
_ONE_BIT = bytes(b & 1 for b in range(256))
_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        _libc = lib
    return _libc


def cached_bytes(path: str) -> int:
    """Bytes of the file at `path` the page cache holds now (0 for an empty file)."""
    lib = _c()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "mmap failed")
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vec = ctypes.create_string_buffer(pages)
            if lib.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
            resident = vec.raw[:pages].translate(_ONE_BIT).count(1)
        finally:
            lib.munmap(addr, size)
    finally:
        os.close(fd)
    return min(size, resident * _PAGE)


def residency(files: Sequence[str]) -> Residency:
    """How much of `files` (usable ones, `weight_files`) the page cache holds; a file that went
    away or cannot be mapped counts as not there."""
    count = size = cached = 0
    for path in files[:MAX_FILES]:
        try:
            file_size = os.stat(path).st_size
            held = cached_bytes(path)
        except OSError:
            continue
        count += 1
        size += file_size
        cached += held
    return Residency(count, size, cached)


def sizes(files: Sequence[str]) -> list[int]:
    """The size of each of `files` (0 for one that went away)."""
    out = []
    for path in files[:MAX_FILES]:
        try:
            out.append(os.stat(path).st_size)
        except OSError:
            out.append(0)
    return out


def read_ahead(files: Sequence[str]) -> int:
    """Asks the kernel to read `files` into the page cache (WILLNEED; it reads in the
    background); the bytes asked for."""
    asked = 0
    for path in files[:MAX_FILES]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            asked += os.fstat(fd).st_size
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked


def memory() -> tuple[int, int]:
    """(MemAvailable, MemTotal) in bytes from /proc/meminfo; (0, 0) when unreadable."""
    found: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in ("MemAvailable", "MemTotal"):
                    found[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    return found.get("MemAvailable", 0), found.get("MemTotal", 0)
