"""A model's conversation caches (llama.cpp's KV slots) saved before its process stops or sleeps,
and restored after it starts or wakes (`kvCache`, docs/guides/kv-cache.md).

Save, after the drain: the server lists its slots (`GET /slots`); each one holding a conversation
(llama.cpp shows the last task's `id_task` and `n_prompt_tokens` on it) is saved to its file in
the model's folder (`POST /slots/<id>?action=save`), then the manifest is written
(`kv_store.py`). Restore, after the health check (or the wake), before the first request goes
through: each slot of the manifest of the model's definition now is restored into the same slot
(`?action=restore`). Both are bounded by the setting's `timeout` in all, and nothing fails
because of them: a call that errors, times out, or a disk without room raises `KvFailed`, which
the caller logs and counts, and the model is stopped, or serves with a full prefill, as without
the setting.

What a restore brought back is recorded twice: the server's own count (llama.cpp's
`n_restored`), and the `cache_n` of the first request answered after it (from the activity
records); either below what was saved marks the restore `short` (a sliding-window model run
without `--swa-full` restores only to a checkpoint).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from ...ipc.activity import ActivityRecord
from ...ipc.model_status import KvStatus
from ...ipc.routing_table import HttpCall
from ..config import Config, KvCacheSetting, ModelConfig
from . import kv_store
from .kv_store import Manifest, Moved, SavedSlot

log = logging.getLogger("swapd.kv")

# A first request whose `cache_n` falls this many tokens short of the largest slot saved still
# counts as a full restore: llama.cpp evaluates the last token or two of a prompt again.
SHORT_MARGIN = 16
MB = 1024 * 1024


class KvFailed(Exception):
    """A save or restore that failed; the words say why."""


class KvSlots:
    def __init__(self, budget_mb: int = 0, root: str = "") -> None:
        self.budget = budget_mb * MB
        self.root = Path(root) if root else None
        self.facts: dict[str, KvStatus] = {}
        # By model id: the tokens the largest slot held when the restore under way was saved,
        # until the first request after it is answered.
        self._awaiting: dict[str, int] = {}
        # By model id: its folder (a budget removal names folders).
        self._dirs: dict[str, Path] = {}
        # The quick unloads under way (`swapd unload --now`), by model id (None: every model):
        # their stops save nothing.
        self._quick: Counter[str | None] = Counter()

    @contextlib.contextmanager
    def skipping(self, now: bool, model_id: str | None) -> Iterator[None]:
        """While a quick unload (`swapd unload --now`) of `model_id` (None: of every model) runs,
        its stops save nothing."""
        self._quick[model_id] += int(now)
        try:
            yield
        finally:
            self._quick[model_id] -= int(now)

    def quick(self, model_id: str) -> bool:
        return self._quick[None] > 0 or self._quick[model_id] > 0

    def reconfigure(self, config: Config) -> None:
        """At the daemon's start and every reload: the budget, and the files of definitions
        gone or changed removed."""
        self.budget = config.kv_cache_budget * MB
        self.root = Path(config.kv_cache_dir) if config.kv_cache_dir else None
        if self.root is None:
            return
        current = {
            Path(m.kv_cache.dir): kv_store.definition_key(m)
            for m in config.models.values()
            if m.kv_cache is not None
        }
        kv_store.prune(self.root, current)
        for model in config.models.values():
            if model.kv_cache is None:
                self.facts.pop(model.id, None)
            else:
                self._note_saved(model.id, model.kv_cache, self._manifest(model))

    def status(self, model: ModelConfig | None) -> KvStatus | None:
        if model is None or model.kv_cache is None:
            return None
        return self.facts.get(model.id) or KvStatus(preset=model.kv_cache.preset or "")

    # ------------------------------------------------------------------------------- save

    async def save(
        self, session: aiohttp.ClientSession, upstream: str, model: ModelConfig
    ) -> Moved:
        setting = model.kv_cache
        assert setting is not None
        folder = Path(setting.dir)
        key = kv_store.definition_key(model)
        began, wall = time.monotonic(), time.time()
        try:
            async with asyncio.timeout(setting.save.timeout):
                manifest = await self._save(session, upstream, setting, folder, key)
        except TimeoutError:
            raise self._failed(model.id, f"the save took over {setting.save.timeout:g}s") from None
        except KvFailed as exc:
            raise self._failed(model.id, str(exc)) from None
        except (OSError, aiohttp.ClientError) as exc:
            raise self._failed(model.id, f"the save failed: {exc}") from None
        self._note_saved(model.id, setting, manifest, saves=1)
        # What this save wrote (an earlier save kept as it was wrote nothing now).
        fresh = manifest is not None and manifest.saved_at >= wall
        slots = manifest.slots if manifest is not None and fresh else ()
        return Moved(
            time.monotonic() - began,
            sum(s.bytes for s in slots),
            tuple(s.id for s in slots),
            sum(s.tokens for s in slots),
        )

    async def _save(
        self,
        session: aiohttp.ClientSession,
        upstream: str,
        setting: KvCacheSetting,
        folder: Path,
        key: str,
    ) -> Manifest | None:
        slots = _holding(await _call(session, upstream, setting.list, {}))
        if not slots:
            # Nothing in its slots now (it served nothing since its start): the last save, if
            # any, is still its conversation, and stays.
            return await asyncio.to_thread(kv_store.read_manifest, folder, key)
        ok, free = await asyncio.to_thread(kv_store.prepare, folder, key)
        if not ok:
            raise KvFailed(f"not enough free disk space in {folder} ({free // MB} MB free)")
        answers = []
        for slot in slots:
            name = kv_store.slot_file(key, slot)
            answer = await _call(session, upstream, setting.save, {"id": slot, "file": name})
            answers.append((slot, _count(answer, "n_saved")))
        return await asyncio.to_thread(self._keep, folder, key, answers)

    def _keep(self, folder: Path, key: str, answers: list[tuple[int, int]]) -> Manifest | None:
        """The files the server wrote, in a manifest; then the budget kept (in a worker thread)."""
        saved = []
        for slot, tokens in answers:
            if tokens == 0:
                continue  # an empty slot after all: nothing worth restoring
            path = folder / kv_store.slot_file(key, slot)
            if not path.exists():
                # Not where swapd looks (a server given another folder), or removed meanwhile
                # by another model's save over the budget: nothing to restore from.
                log.warning("kv cache: %s was not written; not kept", path)
                continue
            saved.append(SavedSlot(slot, path.name, max(tokens, 0), path.stat().st_size))
        if not saved:
            return kv_store.read_manifest(folder, key)  # every slot was empty after all
        manifest = Manifest(key, time.time(), tuple(saved))
        kv_store.write_manifest(folder, manifest)
        kv_store.keep_only(folder, manifest)
        if self.root is None or not self.budget:
            return manifest
        for gone in kv_store.enforce_budget(self.root, self.budget):
            log.info("kv cache: %s removed (over kvCacheBudget, oldest first)", gone)
            for model_id, facts in list(self.facts.items()):
                if self._dirs.get(model_id) == gone:
                    self.facts[model_id] = msgspec.structs.replace(
                        facts, slots=(), tokens=0, bytes=0, saved_at=0.0
                    )
            if gone == folder:
                return None  # it alone did not fit the budget
        return manifest

    # ---------------------------------------------------------------------------- restore

    def saved(self, model: ModelConfig) -> Manifest | None:
        """What a restore would bring back (None: nothing for this definition)."""
        return self._manifest(model) if model.kv_cache is not None else None

    async def restore(
        self, session: aiohttp.ClientSession, upstream: str, model: ModelConfig, manifest: Manifest
    ) -> Moved:
        setting = model.kv_cache
        assert setting is not None
        began = time.monotonic()
        restored = read = 0
        errors: list[str] = []
        try:
            async with asyncio.timeout(setting.restore.timeout):
                for slot in manifest.slots:
                    values = {"id": slot.id, "file": slot.file}
                    try:
                        answer = await _call(session, upstream, setting.restore, values)
                    except KvFailed as exc:
                        errors.append(f"slot {slot.id}: {exc}")
                        continue
                    count = _count(answer, "n_restored")
                    restored += count if count >= 0 else slot.tokens
                    read += max(_count(answer, "n_read"), 0) or slot.bytes
        except TimeoutError:
            errors.append(f"the restore took over {setting.restore.timeout:g}s")
        except (OSError, aiohttp.ClientError) as exc:
            errors.append(f"the restore failed: {exc}")
        facts = self._facts(model.id, setting)
        short = restored < manifest.tokens
        facts = msgspec.structs.replace(
            facts, restored_tokens=restored, first_cache_n=-1, short=short
        )
        self.facts[model.id] = facts
        if errors:
            raise self._failed(model.id, "; ".join(errors))
        self.facts[model.id] = msgspec.structs.replace(facts, restores=facts.restores + 1)
        self._awaiting[model.id] = max((s.tokens for s in manifest.slots), default=0)
        return Moved(time.monotonic() - began, read, tuple(s.id for s in manifest.slots), restored)

    def answered(self, records: Iterable[ActivityRecord]) -> list[str]:
        """The activity records of answered requests: the first one after a restore says what it
        reused (`cache_n`); the models whose restore turned out short."""
        short = []
        for record in records:
            expected = self._awaiting.get(record.model)
            cached = record.tokens.cache_tokens
            if expected is None or cached < 0:
                continue
            del self._awaiting[record.model]
            facts = self.facts.get(record.model)
            if facts is None:
                continue
            was_short = facts.short
            is_short = was_short or cached < expected - SHORT_MARGIN
            self.facts[record.model] = msgspec.structs.replace(
                facts, first_cache_n=cached, short=is_short
            )
            if is_short and not was_short:
                log.warning(
                    "%s: the first request after its cache's restore reused %d of %d tokens "
                    "(a sliding-window model needs --swa-full: docs/guides/kv-cache.md)",
                    record.model,
                    cached,
                    expected,
                )
                short.append(record.model)
        return short

    # ---------------------------------------------------------------------------- inside

    def _manifest(self, model: ModelConfig) -> Manifest | None:
        assert model.kv_cache is not None
        return kv_store.read_manifest(Path(model.kv_cache.dir), kv_store.definition_key(model))

    def _facts(self, model_id: str, setting: KvCacheSetting) -> KvStatus:
        return self.facts.get(model_id) or KvStatus(preset=setting.preset or "")

    def _note_saved(
        self, model_id: str, setting: KvCacheSetting, manifest: Manifest | None, saves: int = 0
    ) -> None:
        facts = self._facts(model_id, setting)
        slots = manifest.slots if manifest is not None else ()
        self.facts[model_id] = msgspec.structs.replace(
            facts,
            preset=setting.preset or "",
            slots=tuple(s.id for s in slots),
            tokens=sum(s.tokens for s in slots),
            bytes=sum(s.bytes for s in slots),
            saved_at=manifest.saved_at if manifest is not None else 0.0,
            saves=facts.saves + saves,
        )
        self._dirs[model_id] = Path(setting.dir)

    def _failed(self, model_id: str, why: str) -> KvFailed:
        facts = self.facts.get(model_id) or KvStatus()
        self.facts[model_id] = msgspec.structs.replace(
            facts, failures=facts.failures + 1, last_failure=why
        )
        return KvFailed(why)


def _holding(answer: Any) -> list[int]:
    """The slots that hold a conversation, from the list call's answer (llama.cpp's `/slots`:
    a list of `{id, id_task, n_prompt_tokens, is_processing, ...}`)."""
    if not isinstance(answer, list):
        raise KvFailed(f"the slot list is not a list: {str(answer)[:100]!r}")
    slots = []
    for item in answer:
        if not isinstance(item, dict) or not isinstance(item.get("id"), int):
            continue
        tokens = item.get("n_prompt_tokens")
        if item.get("id_task") is not None or (isinstance(tokens, int) and tokens > 0):
            slots.append(int(item["id"]))
    return slots


def _count(answer: Any, name: str) -> int:
    value = answer.get(name) if isinstance(answer, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


async def _call(
    session: aiohttp.ClientSession, upstream: str, call: HttpCall, values: dict[str, Any]
) -> Any:
    """One call to the model's server; its JSON answer. KvFailed when it does not answer 2xx."""
    endpoint, body = call.endpoint, call.body
    for name, value in values.items():
        endpoint = endpoint.replace("{" + name + "}", str(value))
        body = body.replace("{" + name + "}", str(value))
    url = upstream.rstrip("/") + endpoint
    data = body.encode() if body else None
    headers = {"Content-Type": "application/json"} if body else {}
    async with session.request(call.method, url, data=data, headers=headers) as response:
        text = await response.text()
        if response.status // 100 != 2:
            raise KvFailed(f"{call.method} {endpoint} answered {response.status}: {_message(text)}")
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:
            raise KvFailed(f"{call.method} {endpoint} answered no JSON: {text[:100]!r}") from None


def _message(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:200]
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:200]
    return text[:200]
