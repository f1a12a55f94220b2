"""Images made on the spot for the real docker engine (no registry is reachable).

`busybox_rootfs(dest, files)` lays out a root filesystem holding Debian's static busybox
(`busybox-static`) as `/bin/busybox` plus the given files; `build_busybox_image(engine, tag)`
imports one with a page at `/www/index.html` and `ENTRYPOINT ["/bin/busybox"]`, so
`docker run IMAGE httpd -f -p 127.0.0.1:PORT -h /www` is a web server (`/bin/sh`, `/bin/sleep`
and a few other applets are there too). Busybox as PID 1 has no
SIGTERM handler, so it ignores `docker stop`'s SIGTERM and goes only at the SIGKILL after
`-t N`, as many real images do.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tests.support.realparts.docker_engine import DockerEngine

BUSYBOX = Path("/bin/busybox")
BUSYBOX_IMAGE = "swapd-test/busybox-httpd:1"
PAGE = "<!doctype html><title>swapd test page</title><p>served by busybox httpd in docker</p>\n"
PT_INTERP = 3
# Applets a command in the image may name directly (`sh -c "sleep 1; exec httpd ..."`).
APPLETS = ("sh", "sleep", "httpd", "cat", "echo", "ls", "true")


def is_static_elf(path: Path) -> bool:
    """True for a 64-bit ELF with no program interpreter (runs in an empty root filesystem)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return all(
        struct.unpack_from("<I", data, phoff + i * phentsize)[0] != PT_INTERP for i in range(phnum)
    )


def static_busybox() -> Path | None:
    return BUSYBOX if BUSYBOX.exists() and is_static_elf(BUSYBOX) else None


def busybox_rootfs(dest: Path, files: Mapping[str, str | bytes] | None = None) -> Path:
    """`dest` filled with /bin/busybox (static), /tmp, and `files` (path in the image → content)."""
    busybox = static_busybox()
    if busybox is None:
        raise FileNotFoundError(
            f"{BUSYBOX} is missing or not statically linked (Debian package busybox-static)"
        )
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    (dest / "tmp").mkdir(mode=0o1777, exist_ok=True)
    shutil.copy2(busybox, dest / "bin" / "busybox")
    for applet in APPLETS:
        (dest / "bin" / applet).symlink_to("busybox")
    for name, content in (files or {}).items():
        target = dest / name.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    return dest


def build_busybox_image(engine: DockerEngine, tag: str = BUSYBOX_IMAGE) -> str:
    """Import the busybox httpd image into `engine`; returns `tag`."""
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=engine.base) as tmp:
        rootfs = busybox_rootfs(Path(tmp), {"www/index.html": PAGE})
        engine.import_image(rootfs, tag, changes=['ENTRYPOINT ["/bin/busybox"]'])
    return tag
