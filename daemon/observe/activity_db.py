"""The activity log on disk (`store.path`): a SQLite file in WAL mode that keeps every record
(not pruned, as llama-swap's file-backed store), so the log survives `swapd` restarted.

One worker thread owns the connection: the event loop hands it each report's records as one
batch (one transaction) and never waits for the write; queries run on the same thread after
the writes handed over before them, so an answer includes every record stored before it was
asked. Ids continue from the file's highest.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec

from ...ipc.activity import ActivityRecord
from .activity_query import ActivityQuery, page_of, stats_of

log = logging.getLogger("swapd.daemon")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS activity (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    model TEXT NOT NULL,
    req_path TEXT NOT NULL,
    resp_status_code INTEGER NOT NULL,
    resp_content_type TEXT NOT NULL,
    cache_tokens INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    draft_tokens INTEGER NOT NULL,
    prompt_per_second REAL NOT NULL,
    tokens_per_second REAL NOT NULL,
    duration_ms REAL NOT NULL,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS activity_ts ON activity (ts);
CREATE INDEX IF NOT EXISTS activity_model ON activity (model);
"""

# llama-swap's sort keys (activity_query.SORT_KEYS) and their columns: only these reach the SQL.
_COLUMNS = {
    "id": "id",
    "time": "ts",
    "model": "model",
    "req_path": "req_path",
    "resp_status_code": "resp_status_code",
    "resp_content_type": "resp_content_type",
    "cached": "cache_tokens",
    "prompt": "input_tokens",
    "generated": "output_tokens",
    "drafted": "draft_tokens",
    "prompt_speed": "prompt_per_second",
    "gen_speed": "tokens_per_second",
    "duration": "duration_ms",
}

_INSERT = f"INSERT OR REPLACE INTO activity VALUES ({','.join('?' * 14)})"
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(ActivityRecord).decode


def _row(r: ActivityRecord) -> tuple[Any, ...]:
    t = r.tokens
    return (
        r.id,
        r.timestamp,
        r.model,
        r.req_path,
        r.resp_status_code,
        r.resp_content_type,
        t.cache_tokens,
        t.input_tokens,
        t.output_tokens,
        t.draft_tokens,
        t.prompt_per_second,
        t.tokens_per_second,
        r.duration_ms,
        _encode(r),
    )


def _where(q: ActivityQuery) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    if q.models:
        clauses.append(f"model IN ({','.join('?' * len(q.models))})")
        args += q.models
    for sql, value in (
        ("ts >= ?", q.start),
        ("ts <= ?", q.end),
        ("id >= ?", q.min_id or None),
        ("id <= ?", q.max_id or None),
    ):
        if value is not None:
            clauses.append(sql)
            args.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


class ActivityDB:
    def __init__(self, path: str) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="swapd-activity-db")
        self._db: sqlite3.Connection | None = None
        try:
            self.next_id = self._pool.submit(self._open).result()
        except sqlite3.Error:
            self.close()
            raise

    def _open(self) -> int:
        db = self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        (top,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM activity").fetchone()
        return int(top) + 1

    def _conn(self) -> sqlite3.Connection:
        assert self._db is not None
        return self._db

    def write(self, records: Sequence[ActivityRecord]) -> None:
        """Store a batch, off the event loop (encoded here: the records change no more)."""
        rows = [_row(r) for r in records]
        self._pool.submit(self._insert, rows)

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        db = self._conn()
        try:
            with db:
                db.execute("BEGIN")
                db.executemany(_INSERT, rows)
        except sqlite3.Error as exc:
            log.error("activity store %s: %d record(s) not written: %s", self.path, len(rows), exc)

    def recent(self, count: int) -> list[ActivityRecord]:
        """The newest `count` records, oldest first (the in-memory log at start)."""
        return self._pool.submit(self._recent, count).result()

    def _recent(self, count: int) -> list[ActivityRecord]:
        rows = (
            self._conn()
            .execute("SELECT record FROM activity ORDER BY id DESC LIMIT ?", (count,))
            .fetchall()
        )
        return [_decode(row[0]) for row in reversed(rows)]

    async def page(self, query: ActivityQuery) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._page, query)

    def _page(self, q: ActivityQuery) -> dict[str, Any]:
        db = self._conn()
        where, args = _where(q)
        (total,) = db.execute(f"SELECT COUNT(*) FROM activity{where}", args).fetchone()
        order = "DESC" if q.order == "desc" else "ASC"
        rows = db.execute(
            f"SELECT record FROM activity{where} ORDER BY {_COLUMNS[q.sort]} {order}, id {order}"
            " LIMIT ? OFFSET ?",
            [*args, q.limit, (q.page - 1) * q.limit],
        ).fetchall()
        return page_of([_decode(row[0]) for row in rows], int(total), q)

    async def stats(self, model: str) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._stats, model)

    def _stats(self, model: str) -> dict[str, Any]:
        db = self._conn()
        model = model.strip()
        where, args = (" WHERE model = ?", [model]) if model else ("", [])
        count, inputs, outputs, cached = db.execute(
            "SELECT COUNT(*), SUM(MAX(input_tokens, 0)), SUM(MAX(output_tokens, 0)),"
            f" SUM(MAX(cache_tokens, 0)) FROM activity{where}",
            args,
        ).fetchone()
        speeds = db.execute(
            f"SELECT prompt_per_second, tokens_per_second FROM activity{where}", args
        ).fetchall()
        return stats_of(
            int(count),
            int(inputs or 0),
            int(outputs or 0),
            int(cached or 0),
            [p for p, _ in speeds if p > 0],
            [g for _, g in speeds if g > 0],
        )

    def close(self) -> None:
        """Write what was handed over, then close the file."""
        self._pool.submit(self._close)
        self._pool.shutdown(wait=True)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
