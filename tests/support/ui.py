"""Helpers of the web UI's browser tests: a Playwright browser on Debian's chromium
(tests/support/realparts/browser.py), the page of a stack, screenshots, and plain HTTP calls.

A page's JavaScript errors and its Content-Security-Policy violations are collected in
`page.errors`; every test asserts that list empty."""

from __future__ import annotations

import base64
import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.realparts import browser as browser_part
from tests.support.realparts.provision import cache_dir

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PAGES = ("models", "playground", "activity", "swaps", "logs", "gpus", "hardware")
# Where the screenshots go for people to look at: this, else `ui-shots` in the test cache
# ($SWAPD_TEST_CACHE, default ~/.cache/swapd-tests), outside the repository either way.
SHOTS_ENV = "SWAPD_UI_SHOTS_DIR"
_announced = pytest.StashKey[bool]()


def shots_dir(config: pytest.Config) -> Path:
    """The screenshots' folder; said once per session on the terminal (workers of xdist have
    none: docs/ui.md names the folder)."""
    folder = Path(os.environ.get(SHOTS_ENV) or cache_dir() / "ui-shots")
    folder.mkdir(parents=True, exist_ok=True)
    if not config.stash.get(_announced, False):
        config.stash[_announced] = True
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"UI screenshots: {folder}")
    return folder


def module_shots(request: pytest.FixtureRequest) -> Path:
    """A test module's screenshots: a folder of its own name in `shots_dir`."""
    return shots_dir(request.config) / request.module.__name__.rsplit(".", 1)[-1]


def _csp_violation(message: Any) -> bool:
    return message.type == "error" and "Content Security Policy" in message.text


@contextmanager
def ui_page(
    executable: Path,
    url: str,
    *,
    viewport: dict[str, int] = DESKTOP,
    password: str | None = None,
    args: tuple[str, ...] = (),
) -> Iterator[Any]:
    """A fresh chromium (own profile) with one page on `url`; `password`: the Basic one; `args`:
    more command-line flags (a host resolver rule, say)."""
    from playwright.sync_api import sync_playwright

    profile = browser_part.new_profile()
    try:
        with sync_playwright() as p:
            options: dict[str, Any] = {"viewport": viewport}
            if password is not None:
                options["http_credentials"] = {"username": "swapd", "password": password}
            context = p.chromium.launch_persistent_context(
                str(profile),
                executable_path=str(executable),
                args=[*browser_part.FLAGS, *args],
                headless=True,
                **options,
            )
            try:
                page = context.pages[0] if context.pages else context.new_page()
                page.set_default_timeout(20_000)
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.on(
                    "console",
                    lambda msg: errors.append(msg.text) if _csp_violation(msg) else None,
                )
                page.errors = errors  # type: ignore[attr-defined]
                if url:
                    page.goto(url)
                yield page
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def tab(page: Any, name: str) -> None:
    page.click(f'.tabs a[data-tab="{name}"]')
    page.wait_for_selector(f"#page-{name}:not([hidden])")


def shoot(page: Any, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class _Keep(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is an answer to look at, not to follow


_NO_REDIRECTS = urllib.request.build_opener(_Keep)


def call(
    url: str,
    method: str = "GET",
    body: Any = None,
    password: str | None = None,
    timeout=30.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if password is not None:
        token = base64.b64encode(f"swapd:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with _NO_REDIRECTS.open(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
