"""An older tree of swapd (`--before REF`), runnable beside this one without a venv of its own.

`git archive REF` is unpacked into a temporary folder (no `git worktree add`: that writes to the
repository's shared metadata, and a benchmark killed midway would leave a stale worktree behind),
and its folders are laid out as the `swapd` package the way the editable install maps them: REF's
own `pyproject.toml` says which folder is which subpackage (`[tool.setuptools.package-dir]`:
`"swapd.daemon" = "daemon"`, ...), and each becomes `PKG/swapd/<sub>`, a symbolic link to the
unpacked folder. PKG first on `PYTHONPATH` then wins over this tree's editable install: Python's
path finder (which reads `PYTHONPATH`) comes before the editable finder in `sys.meta_path`, so
`swapd.daemon` is found in PKG/swapd, a namespace portion, as the install's own `swapd` is. The
same interpreter and site-packages run it (the dependencies are this venv's), and `resolve`
checks by importing it that the old tree is the one imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[2]


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, check=True).stdout


class BeforeTree:
    """`with BeforeTree("192744c") as tree:` `tree.env()` runs `python -m swapd...` from REF."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.commit = ""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.pythonpath = Path()

    def __enter__(self) -> BeforeTree:
        self.commit = _git("rev-parse", "--short", f"{self.ref}^{{commit}}").decode().strip()
        self._tmp = tempfile.TemporaryDirectory(prefix=f"swapd-before-{self.commit}-")
        root = Path(self._tmp.name)
        tree, self.pythonpath = root / "tree", root / "pkg"
        tree.mkdir()
        archive = root / "tree.tar"
        archive.write_bytes(_git("archive", "--format=tar", self.commit))
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        archive.unlink()
        package = self.pythonpath / "swapd"
        package.mkdir(parents=True)
        for sub, folder in package_dirs(tree / "pyproject.toml").items():
            (package / sub).symlink_to(tree / folder, target_is_directory=True)
        self.check()
        return self

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(self.pythonpath) + (os.pathsep + old if old else "")
        return env

    def check(self) -> None:
        """Import `swapd.daemon` as the benchmark will run it: from the old tree, or stop."""
        code = "import swapd.daemon, swapd.proxy; print(swapd.daemon.__file__)"
        found = subprocess.run(
            [sys.executable, "-c", code], env=self.env(), capture_output=True, text=True, cwd="/"
        )
        where = found.stdout.strip()
        if found.returncode != 0 or not where.startswith(str(self.pythonpath)):
            raise RuntimeError(
                f"--before {self.ref}: swapd imported from {where!r}: {found.stderr}"
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def package_dirs(pyproject: Path) -> dict[str, str]:
    """`swapd`'s subpackages and their folders, from a tree's `[tool.setuptools.package-dir]`."""
    dirs = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    return {name.removeprefix("swapd."): folder for name, folder in dirs.items()}
