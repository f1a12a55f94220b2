"""A model's weight files and the page cache (issue 37 item 6, daemon/observe/page_cache.py):
which paths a `cmd` names, what is refused (devices, /proc, folders, missing files, through a
link too), and how much of a file the page cache holds, read with `mincore`."""

from __future__ import annotations

import os
from pathlib import Path

from swapd.daemon.observe import page_cache


def test_the_paths_after_the_weight_flags_and_the_weights_key() -> None:
    cmd = [
        "llama-server", "--port", "9000", "-m", "/m/a.gguf", "--mmproj", "/m/proj.gguf",
        "--model=/m/b.gguf", "--alias", "x", "-m", "/m/a.gguf", "--chat-template", "-m",
    ]  # fmt: skip
    assert page_cache.named_files(cmd, ["/m/extra.bin"]) == [
        "/m/a.gguf",
        "/m/proj.gguf",
        "/m/b.gguf",
        "/m/extra.bin",
    ]
    assert page_cache.named_files(["vllm", "serve", "--port", "1"]) == []
    assert page_cache.named_files(["x", "-m"]) == []  # a flag with no word after it


def test_only_regular_files_outside_proc_sys_and_dev(tmp_path: Path) -> None:
    weights = tmp_path / "w.gguf"
    weights.write_bytes(b"x" * 4096)
    link_to_proc = tmp_path / "status"
    link_to_proc.symlink_to("/proc/self/status")
    link_to_weights = tmp_path / "w-link.gguf"
    link_to_weights.symlink_to(weights)
    cmd = [
        "srv", "-m", str(weights), "-m", "/dev/zero", "-m", "/proc/self/mem", "-m", str(tmp_path),
        "-m", str(tmp_path / "missing.gguf"), "-m", str(link_to_proc), "-m", str(link_to_weights),
        "--mmproj", "/sys/kernel/mm/transparent_hugepage/enabled",
    ]  # fmt: skip
    assert page_cache.weight_files(cmd) == [str(weights)]  # the link resolves to the same file
    assert page_cache.usable("/dev/null") is None
    assert page_cache.usable(str(link_to_proc)) is None


def test_at_most_max_files(tmp_path: Path) -> None:
    paths = []
    for i in range(page_cache.MAX_FILES + 4):
        path = tmp_path / f"{i}.bin"
        path.write_bytes(b"w")
        paths.append(str(path))
    assert len(page_cache.weight_files([], paths)) == page_cache.MAX_FILES


def _fs_type(path: Path) -> str:
    """The file system type of the mount that holds `path` (/proc/mounts)."""
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        point = fields[1]
        if str(path).startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def _written(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())  # clean pages: DONTNEED can drop them


def test_a_file_just_written_is_in_the_page_cache_and_dontneed_lowers_it(tmp_path: Path) -> None:
    path = tmp_path / "w.gguf"
    size = 4 * 1024 * 1024 + 123
    _written(path, size)
    held = page_cache.residency([str(path)])
    assert (held.files, held.size) == (1, size)
    assert 0 < held.cached <= size
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    dropped = page_cache.cached_bytes(str(path))
    if _fs_type(path) in ("tmpfs", "ramfs"):
        assert 0 <= dropped <= held.cached  # memory is its only home: nothing to drop
    else:
        assert 0 <= dropped < held.cached
    assert page_cache.read_ahead([str(path)]) == size


def test_an_empty_or_vanished_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    held = page_cache.residency([str(empty), str(tmp_path / "gone")])
    assert (held.files, held.size, held.cached) == (1, 0, 0)


def test_memory_reads_meminfo() -> None:
    available, total = page_cache.memory()
    assert 0 < available <= total
