"""Content-addressed record / replay store of LLM calls (one SQLite table, WAL mode).

The key of a call is the sha256 of the canonical JSON of its request: model name, messages, sampling params
and a *sample index*, so N identical requests made for N samples are N distinct entries. Transport details
(API base, key, timeout, retries) are not part of the key: a run recorded against one endpoint replays
against none.

The first reply stored under a key is canonical: in ``auto`` mode a concurrent duplicate does not overwrite
it, and the caller gets the stored reply back, so the run sees exactly what a later replay will see. Only
``record`` mode replaces entries (it is the explicit "refresh the recording" mode).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any

#: Version of the request-key format; bump it if the canonical request changes shape.
KEY_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_calls (
    request_hash TEXT PRIMARY KEY,
    request_json TEXT NOT NULL,
    response_json TEXT NOT NULL,
    raw_response_json TEXT,
    created_at TEXT NOT NULL
)
"""


class CacheMode(StrEnum):
    RECORD = "record"
    """Always call the provider; store (and replace) the reply."""
    REPLAY = "replay"
    """Never touch the network; a missing entry raises :class:`~coharden.llm.errors.ReplayMiss`."""
    AUTO = "auto"
    """Use the stored reply when present, else call the provider and store the reply."""


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, ASCII only (so any str, even a lone surrogate, encodes)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def request_hash(request: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of a request (which includes its sample index)."""
    return hashlib.sha256(canonical_json(request).encode("ascii")).hexdigest()


def build_request(
    model: str, messages: list[dict[str, Any]], params: dict[str, Any], sample_index: int
) -> dict[str, Any]:
    """The canonical request that is hashed and stored."""
    return {
        "v": KEY_VERSION,
        "model": model,
        "messages": messages,
        "params": params,
        "sample_index": sample_index,
    }


@dataclass(frozen=True)
class StoredCall:
    request_hash: str
    request: dict[str, Any]
    response: dict[str, Any]
    created_at: str


class CallStore:
    """SQLite store of LLM calls keyed by request hash. Thread-safe; several processes may share the file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(_SCHEMA)

    def get(self, key: str) -> StoredCall | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT request_hash, request_json, response_json, created_at FROM llm_calls WHERE request_hash = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        return StoredCall(row[0], json.loads(row[1]), json.loads(row[2]), row[3])

    def put(
        self,
        key: str,
        request: dict[str, Any],
        response: dict[str, Any],
        *,
        raw_response: dict[str, Any] | None = None,
        replace: bool = False,
    ) -> StoredCall:
        """Store a reply and return the entry now stored under ``key``.

        Without ``replace`` an existing entry wins (first write is canonical) and is returned instead.
        """
        if request_hash(request) != key:
            raise ValueError(f"request does not hash to {key}")
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        raw = canonical_json(raw_response) if raw_response is not None else None
        created = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock:
            self._conn.execute(
                f"{verb} INTO llm_calls (request_hash, request_json, response_json, raw_response_json, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (key, canonical_json(request), canonical_json(response), raw, created),
            )
        stored = self.get(key)
        assert stored is not None  # just written (or already present)
        return stored

    def raw_response(self, key: str) -> dict[str, Any] | None:
        """The provider's full JSON reply as recorded (for audits); None if absent."""
        with self._lock:
            row = self._conn.execute(
                "SELECT raw_response_json FROM llm_calls WHERE request_hash = ?", (key,)
            ).fetchone()
        return json.loads(row[0]) if row is not None and row[0] is not None else None

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        with self._lock:
            return self._conn.execute("SELECT 1 FROM llm_calls WHERE request_hash = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0])

    def keys(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT request_hash FROM llm_calls ORDER BY request_hash")]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> CallStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
