"""What swapd says it is (`GET /api/version`, `swapd --version`): llama-swap's `version`,
`commit` and `build_date`.

swapd installs from source rather than as a release binary, so the commit and the date are found
where they are: the commit an install from a git URL recorded (PEP 610's `direct_url.json`), or
else the git checkout the code runs from (its `HEAD`, read from the files: no `git` process);
the date the package was installed (its metadata's time), in RFC 3339 as llama-swap's. Either is
`unknown` when there is none, as llama-swap's UI shows it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from datetime import UTC, datetime
from pathlib import Path

UNKNOWN = "unknown"
_HERE = Path(__file__).resolve().parent


@functools.cache
def build_info() -> dict[str, str]:
    try:
        dist: importlib.metadata.Distribution | None = importlib.metadata.distribution("swapd")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    version = dist.version if dist is not None else UNKNOWN
    return {
        "version": version,
        "commit": _recorded_commit(dist) or checkout_commit(_HERE) or UNKNOWN,
        "build_date": _installed_at(dist) or UNKNOWN,
    }


def _recorded_commit(dist: importlib.metadata.Distribution | None) -> str | None:
    text = dist.read_text("direct_url.json") if dist is not None else None
    if not text:
        return None
    try:
        commit = json.loads(text).get("vcs_info", {}).get("commit_id")
    except (ValueError, AttributeError):
        return None
    return str(commit)[:12] if commit else None


def _installed_at(dist: importlib.metadata.Distribution | None) -> str | None:
    """When this install was made: the time of its metadata (a `PathDistribution`'s folder,
    `.dist-info` or `.egg-info`, is its `_path`)."""
    folder = getattr(dist, "_path", None)
    if folder is None:
        return None
    for name in ("METADATA", "PKG-INFO"):
        try:
            stamp = (Path(folder) / name).stat().st_mtime
        except OSError:
            continue
        return datetime.fromtimestamp(int(stamp), UTC).isoformat().replace("+00:00", "Z")
    return None


def checkout_commit(start: Path) -> str | None:
    """The commit `HEAD` names in the git checkout holding `start` (a worktree's too), short."""
    for folder in (start, *start.parents):
        dot_git = folder / ".git"
        if dot_git.exists():
            break
    else:
        return None
    try:
        if dot_git.is_file():  # a worktree: `gitdir: <path>`
            gitdir = Path(dot_git.read_text().split(":", 1)[1].strip())
            gitdir = gitdir if gitdir.is_absolute() else (folder / gitdir).resolve()
        else:
            gitdir = dot_git
        head = (gitdir / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head[:12] or None
        ref = head.split(":", 1)[1].strip()
        common = gitdir
        if (gitdir / "commondir").exists():
            common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
        for base in (gitdir, common):
            if (base / ref).exists():
                return (base / ref).read_text().strip()[:12] or None
        packed = common / "packed-refs"
        if packed.exists():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name.strip() == ref:
                    return sha[:12]
    except (OSError, IndexError):
        return None
    return None
