"""A corpus of config texts and what loading each gives, to hold the config package's behaviour
while it is restructured: every error and warning (message, file, line, key path, in order),
`check-config --print`, and `repr(Config)`.

    python -m tests.support.config_corpus record    # run the config tests, keep every text loaded
    python -m tests.support.config_corpus snapshot  # load each, keep the outcomes
    python -m tests.support.config_corpus compare   # load each, compare with the kept outcomes

`tests/unit/test_config_corpus.py` compares on every run (the outcomes are kept as digests;
`snapshot` also writes them in full to a temporary file, which `compare` shows beside a change).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from swapd.daemon.config import ConfigError, loader
from swapd.daemon.config.render import render

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "config_corpus"
CORPUS = DATA / "texts.json"
OUTCOMES = DATA / "outcomes.json"
FULL = Path(tempfile.gettempdir()) / "config_corpus_outcomes.json"

# What the recording runs: the config tests and those of the keys typed by hand.
TESTS = [
    "tests/unit/test_config_loader.py",
    "tests/unit/test_config_edges.py",
    "tests/unit/test_config_errors.py",
    "tests/unit/test_config_sleep.py",
    "tests/unit/test_config_keys.py",
    "tests/unit/test_config_every_key.py",
    "tests/unit/test_config_compat.py",
    "tests/unit/test_config_layout.py",
    "tests/unit/test_config_docs.py",
    "tests/unit/test_config_gpus_auto_routing.py",
    "tests/unit/test_config_llama_swap_fixtures.py",
    "tests/unit/test_macros.py",
    "tests/unit/test_busy.py",
    "tests/unit/test_wake_probe.py",
    "tests/unit/test_placement_config.py",
    "tests/unit/test_performance.py",
    "tests/unit/test_selectors.py",
    "tests/unit/test_profiles.py",
    "tests/unit/test_timeouts.py",
    "tests/unit/test_params_by_id.py",
    "tests/unit/test_gpu.py",
]
_ENV_REF = re.compile(r"\$\{env\.([A-Za-z_][A-Za-z0-9_]*)\}")


class Recorder:
    """A pytest plugin: every `loader.load_text` call's arguments, kept once each."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}

    def pytest_configure(self, config: Any) -> None:
        original = loader.load_text

        def recording(text: str, source: str = "config.yaml", **options: Any) -> Any:
            environ = options.get("environ")
            if environ is None:
                environ = {k: os.environ[k] for k in _ENV_REF.findall(text) if k in os.environ}
            ports = options.get("ports")
            entry = {
                "text": text,
                # A file of this checkout by its path in the repository, so the corpus reads the
                # same in any checkout (`outcome`).
                "source": source.removeprefix(f"{REPO}/"),
                "environ": dict(environ),
                "ports": None if ports is None else dict(ports),
                "strict": bool(options.get("strict", False)),
            }
            self.entries.setdefault(json.dumps(entry, sort_keys=True), entry)
            return original(text, source, **options)

        loader.load_text = recording  # type: ignore[assignment]


# Values of every YAML kind, each written where the keys typed by hand stand.
_VALUES = (
    "1",
    "-1",
    "0",
    "0.5",
    "1.5",
    "-0.5",
    ".nan",
    ".inf",
    "-.inf",
    "true",
    "x",
    "'5s'",
    "500ms",
    "1m",
    "auto",
    "AUTO",
    "24GiB",
    "'10 gb'",
    "0GiB",
    "1.5GB",
    "null",
    "[]",
    "{}",
    "[1]",
    "[0, 1]",
    "[a, b]",
    "[A=1, B=2]",
    "['A=1', 1]",
    "[1GiB, 2GiB]",
    "[1GiB, x]",
    "{a: 1}",
    "{auto: [0]}",
    "{auto: 1}",
    "{auto: [0], x: 1}",
    "{A: 1}",
    "[{a: 1}]",
    "[null]",
    "vllm",
    "sglang",
    "comfyui",
    "vlm",
    "enable",
    "disable",
    "ENABLE",
)
_MODEL = "models:\n  m:\n    cmd: vllm serve --port ${PORT} --enable-sleep-mode\n"
_SLEEP_KEYS = (
    "preset",
    "sleepEndpoints",
    "wakeEndpoints",
    "sleepRequestTimeout",
    "wakeRequestTimeout",
    "stopAfter",
    "servesAsleep",
    "wakeOn",
    "bogus",
)
_CALL_KEYS = ("endpoint", "method", "body", "timeout", "bogus")


def mutants() -> list[dict[str, Any]]:
    """Each key typed by hand given each kind of value (and some pairs of them)."""
    texts: list[str] = []
    for value in _VALUES:
        for key in (
            "sleep",
            "sleepMode",
            "sleepEndpoints",
            "wakeEndpoints",
            "env",
            "gpus",
            "vram",
            "macros",
            "busyCheck",
            "wakeProbe",
            "aliases",
        ):
            texts.append(f"{_MODEL}    {key}: {value}\n")
        for key in ("vramMargin", "sleepRequestTimeout", "wakeRequestTimeout", "macros", "gpus"):
            texts.append(f"{key}: {value}\n{_MODEL}")
        texts.append(f"performance:\n  every: {value}\n{_MODEL}")
        texts.append(f"gpus: auto\n{_MODEL}    vram: {value}\n")
        for key in _SLEEP_KEYS:
            texts.append(f"{_MODEL}    sleep: {{preset: vllm, {key}: {value}}}\n")
            texts.append(f"{_MODEL}    sleep: {{{key}: {value}}}\n")
        for key in _CALL_KEYS:
            call = f"{{endpoint: /s, {key}: {value}}}"
            texts.append(f"{_MODEL}    sleep: {{sleepEndpoints: [{call}]}}\n")
            texts.append(
                f"{_MODEL}    sleepMode: enable\n    sleepEndpoints: [{call}]\n"
                "    wakeEndpoints: [/w]\n"
            )
        texts.append(f"{_MODEL}    sleep: {{preset: comfyui, wakeOn: {value}}}\n")
        texts.append(
            f"{_MODEL}    sleep: {{preset: vllm, servesAsleep: true, wakeOn: [{value}]}}\n"
        )
    for first in ("sleep: vllm", "sleep: 1", "sleep: {}"):
        for second in ("sleepMode: enable", "sleepEndpoints: 1", "wakeEndpoints: [/w]"):
            texts.append(f"{_MODEL}    {first}\n    {second}\n")
    texts.append(f"{_MODEL}    sleepMode: enable\n    sleepEndpoints: [{{endpoint: /s}}]\n")
    texts.append(f"{_MODEL}    sleepMode: disable\n    sleepEndpoints: [{{endpoint: /s}}]\n")
    texts.append(
        f"sleepRequestTimeout: 0.5\nwakeRequestTimeout: 30\n{_MODEL}    sleep: vllm\n"
        "    env: [VLLM_SERVER_DEV_MODE=1]\n"
    )
    texts += _pairs()
    options = {"source": "config.yaml", "environ": {}, "ports": None, "strict": False}
    return [{"text": text, **options} for text in texts]


# Two wrong values at once: which are reported, and in what order, is behaviour too.
_WRONG = {
    "sleep": "{bogus: 1}",
    "sleepMode": "maybe",
    "sleepEndpoints": "1",
    "wakeEndpoints": "{a: 1}",
    "env": "['A=1', 1, x]",
    "gpus": "[x]",
    "vram": "[true, x]",
    "checkEndpoint": "'no slash'",
    "aliases": "[1, '']",
    "busyCheck": "{count: 1}",
    "wakeProbe": "1",
    "ttl": "-5",
    "macros": "{'bad name': 1}",
    "cmdStop": "'kill ${PID} #x'",
}
_WRONG_SLEEP = {
    "preset": "1",
    "stopAfter": "-1",
    "sleepRequestTimeout": "x",
    "sleepEndpoints": "[{endpoint: 'http://x/s'}]",
    "wakeEndpoints": "[1]",
    "servesAsleep": "2",
    "wakeOn": "['GET x']",
    "bogus": "1",
}


def _pairs() -> list[str]:
    texts = []
    names = list(_WRONG)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            texts.append(f"{_MODEL}    {first}: {_WRONG[first]}\n    {second}: {_WRONG[second]}\n")
    names = list(_WRONG_SLEEP)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            pair = f"{first}: {_WRONG_SLEEP[first]}, {second}: {_WRONG_SLEEP[second]}"
            texts.append(f"{_MODEL}    sleep: {{{pair}}}\n")
            texts.append(f"{_MODEL}    sleep: {{preset: vllm, {pair}}}\n")
    for top in ("vramMargin: x", "sleepRequestTimeout: -1", "gpus: [0]", "performance: {every: 1}"):
        for key, value in _WRONG.items():
            texts.append(f"{top}\n{_MODEL}    {key}: {value}\n")
    return texts


def outcome(entry: dict[str, Any]) -> dict[str, Any]:
    """What loading `entry` gives, as plain values, the same in any checkout: a source recorded
    relative to the repository (a file of tests/data) is read from this checkout, and this
    checkout's path is written `<repo>` in what loading it gives (a relative `store.path` is made
    absolute against its config file's folder)."""
    source = entry["source"]
    if source.startswith("tests/"):
        source = str(REPO / source)
    return json.loads(json.dumps(_outcome(entry, source)).replace(str(REPO), "<repo>"))


def _outcome(entry: dict[str, Any], source: str) -> dict[str, Any]:
    try:
        loaded = loader.load_text(
            entry["text"],
            source,
            environ=entry["environ"],
            ports=entry["ports"],
            strict=entry["strict"],
        )
    except ConfigError as error:
        return {"errors": [_issue(i) for i in error.issues], "warnings": _issues(error.warnings)}
    return {
        "warnings": _issues(loaded.warnings),
        "print": render(loaded.config),
        "repr": repr(loaded.config),
    }


def _issues(issues: Any) -> list[list[Any]]:
    return [_issue(i) for i in issues]


def _issue(issue: Any) -> list[Any]:
    return [issue.file, issue.line, issue.path, issue.message]


def corpus() -> list[dict[str, Any]]:
    """The recorded texts, then the mutants."""
    return [*json.loads(CORPUS.read_text()), *mutants()]


def digest(result: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()[:16]


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "compare"
    if command == "record":
        import pytest

        recorder = Recorder()
        pytest.main(["-q", "-p", "no:cacheprovider", *TESTS], plugins=[recorder])
        DATA.mkdir(parents=True, exist_ok=True)
        # What can be replayed from text alone (not the -c/--config-dir merges).
        CORPUS.write_text(json.dumps(list(recorder.entries.values()), indent=0) + "\n")
        print(f"{len(recorder.entries)} texts recorded")
        return 0
    entries = corpus()
    now = [outcome(entry) for entry in entries]
    if command == "snapshot":
        OUTCOMES.write_text(json.dumps([digest(result) for result in now], indent=0) + "\n")
        # The outcomes in full, for `compare` to show what changed (not kept in the tree).
        FULL.write_text(json.dumps(now))
        return 0
    kept = json.loads(OUTCOMES.read_text())
    full = json.loads(FULL.read_text()) if FULL.exists() else None
    differ = [i for i, result in enumerate(now) if digest(result) != kept[i]]
    for i in differ[:20]:
        print(f"--- #{i}\n{entries[i]['text'][:400]}")
        if full is not None:
            print(f"kept: {full[i]}")
        print(f"now:  {now[i]}\n")
    print(f"{len(differ)} of {len(now)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
