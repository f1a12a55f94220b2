"""Where a config comes from: one file (`-c`), the `*.yml`/`*.yaml` files of a directory
(`--config-dir`), or both, as llama-swap's `-config` and `-config-dir` (its `LoadConfigSources`).

The file comes first, then the directory's files in sorted order (not its subdirectories); they
are merged by `merge.py`. Empty and comment-only files count for nothing; when every file is empty
the config is empty (no models), which is valid. The file itself inside the directory is an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .floor.issues import ConfigError, ConfigIssue

Stamp = tuple[tuple[str, int, int, int], ...] | None


@dataclass(frozen=True)
class ConfigSources:
    file: Path | None = None
    directory: Path | None = None

    def __str__(self) -> str:
        parts = [str(self.file)] if self.file is not None else []
        if self.directory is not None:
            parts.append(f"{self.directory}{os.sep}*.yaml")
        return " + ".join(parts)

    def paths(self) -> list[Path]:
        """The files to read, in merge order. Raises ConfigError for llama-swap's refusals."""
        if self.file is None and self.directory is None:
            raise _error("", "at least one of --config or --config-dir must be provided")
        paths = [self.file] if self.file is not None else []
        if self.directory is not None:
            listed = _yaml_files(self.directory)
            if self.file is not None and os.path.abspath(self.file) in map(os.path.abspath, listed):
                raise _error(
                    str(self.file),
                    f"--config path {self.file} is also present in --config-dir "
                    f"{self.directory}; remove it from one",
                )
            paths += listed
        if not paths:
            raise _error(str(self.directory), "no configuration sources found")
        return paths

    def stamp(self) -> Stamp:
        """What --watch-config compares: each file's mtime, size and inode, and the directory's
        list of files (a file added or removed is a change). None: something cannot be read."""
        try:
            paths = self.paths()
            stats = [(str(p), os.stat(p)) for p in paths]
        except (ConfigError, OSError):
            return None
        return tuple((name, st.st_mtime_ns, st.st_size, st.st_ino) for name, st in stats)


def _yaml_files(directory: Path) -> list[Path]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as error:
        reason = error.strerror or str(error)
        raise _error(str(directory), f"--config-dir {directory}: {reason}") from None
    return [
        Path(directory) / entry.name
        for entry in entries
        if entry.name.endswith((".yml", ".yaml")) and not entry.is_dir(follow_symlinks=False)
    ]


def _error(source: str, message: str) -> ConfigError:
    return ConfigError([ConfigIssue(source or "swapd", None, "", message)])
