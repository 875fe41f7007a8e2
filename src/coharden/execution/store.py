"""SQLite result store (WAL): verdicts keyed by content hashes, plus JSON records for resumable batches.

Every write is its own committed transaction, so a run killed with SIGKILL keeps every verdict it finished.
Safe to share between processes (WAL + busy timeout) and threads (one connection per thread).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from coharden.schema.verdict import Verdict

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    key TEXT PRIMARY KEY,
    outcome TEXT NOT NULL,
    verdict TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    data TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (kind, key)
);
"""


def verdict_key(*, repo: str, base_commit: str, source_patch: str, test_patch: str, test_ids: list[str],
                environment: str) -> str:
    """Content hash of everything a verdict depends on."""
    payload = json.dumps(
        [repo, base_commit, hashlib.sha256(source_patch.encode()).hexdigest(),
         hashlib.sha256(test_patch.encode()).hexdigest(), sorted(test_ids), environment],
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class Store:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._conn() as conn:
            conn.executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_verdict(self, key: str) -> Verdict | None:
        row = self._conn().execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        verdict = Verdict.model_validate_json(row[0])
        verdict.cached = True
        return verdict

    def put_verdict(self, key: str, verdict: Verdict) -> None:
        data = verdict.model_copy(update={"cached": False}).model_dump_json()
        self._conn().execute(
            "INSERT OR REPLACE INTO verdicts (key, outcome, verdict, created) VALUES (?, ?, ?, ?)",
            (key, verdict.outcome.value, data, time.time()),
        )

    def get_record(self, kind: str, key: str) -> Any | None:
        row = self._conn().execute("SELECT data FROM records WHERE kind = ? AND key = ?", (kind, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def put_record(self, kind: str, key: str, data: Any) -> None:
        self._conn().execute(
            "INSERT OR REPLACE INTO records (kind, key, data, created) VALUES (?, ?, ?, ?)",
            (kind, key, json.dumps(data, sort_keys=True), time.time()),
        )

    def count(self, table: str = "verdicts") -> int:
        if table not in ("verdicts", "records"):
            raise ValueError(table)
        return self._conn().execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
