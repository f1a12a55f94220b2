"""Every config text the config tests load (tests/data/config_corpus/texts.json, recorded by
`python -m tests.support.config_corpus record`), and each key read by hand given every kind of
value, loads as it did when recorded: the same errors and warnings (message, file, line, key path,
in order), the same `check-config --print`, the same `Config`. A change that means to change what
a config gives is recorded again with `python -m tests.support.config_corpus snapshot`."""

from __future__ import annotations

import json

from tests.support import config_corpus


def test_every_recorded_config_loads_as_recorded() -> None:
    entries = config_corpus.corpus()
    kept = json.loads(config_corpus.OUTCOMES.read_text())
    assert len(kept) == len(entries)
    differ = [
        entry["text"]
        for entry, digest in zip(entries, kept, strict=True)
        if config_corpus.digest(config_corpus.outcome(entry)) != digest
    ]
    assert not differ, (
        f"{len(differ)} configs load differently (`python -m tests.support.config_corpus compare` "
        "shows how; `snapshot` records them again when that is meant); the first:\n" + differ[0]
    )
