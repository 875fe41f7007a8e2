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

from coharden.errors import CoHardenError
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


# --- store keys: one hashing recipe, one key function per record kind -----------------------------------------

MPE_ROW = "mpe"
"""A batch MPE row (``coharden mpe --predictions``)."""
MPE_RESULT = "mpe-result"
"""The result of a single ``coharden mpe`` with its mutants (what ``coharden mutants`` lists; never read back as
a cache)."""
EVAL_TEST = "eval-test"
"""A graded test of ``coharden eval`` (F->P, class, laxity)."""
SUITE_RUN = "suite-run"
"""A finished mutant run of ``coharden suite`` (killed / survived)."""
STUDY_KINDS = ("study.verify", "study.golden", "study.mpe", "study.fix")
"""The real-bugs study's step records."""


def text_key(text: str | None) -> str:
    """sha256 of a text (a patch, a module); None and "" share a key."""
    return hashlib.sha256((text or "").encode()).hexdigest()


def content_key(*parts: Any) -> str:
    """The one recipe of every store key: sha256 of the JSON of ``parts`` (texts enter as :func:`text_key`)."""
    return hashlib.sha256(json.dumps(list(parts), sort_keys=True, default=str).encode()).hexdigest()


def verdict_key(*, repo: str, base_commit: str, source_patch: str, test_patch: str, test_ids: list[str],
                environment: str) -> str:
    """Content hash of everything a verdict depends on."""
    return content_key(repo, base_commit, text_key(source_patch), text_key(test_patch), sorted(test_ids),
                       environment)


def mpe_row_key(*, instance_id: str, base_commit: str, fix: str, reference: str, candidate: str,
                candidate_name: str, mpe: list[Any]) -> str:
    """Key of a batch MPE row: the instance, its fix and golden test, the prediction, the MPE config's
    :meth:`~coharden.schema.mpe_config.MPEConfig.cache_key`."""
    return content_key(MPE_ROW, instance_id, base_commit, candidate_name, text_key(candidate), text_key(fix),
                       text_key(reference), mpe)


def mpe_result_key(*, instance_id: str, base_commit: str, fix: str, reference: str, candidate: str,
                   candidate_name: str, mpe: list[Any]) -> str:
    """Key of a single MPE's result: as :func:`mpe_row_key` (one result per test, reference and config)."""
    return content_key(MPE_RESULT, instance_id, base_commit, candidate_name, text_key(candidate), text_key(fix),
                       text_key(reference), mpe)


def eval_test_key(*, instance_id: str, base_commit: str, fix: str, reference: str, reference_ids: list[str],
                  candidate: str | None, environment: str, mpe: list[Any]) -> str:
    """Key of a graded test (``coharden eval``): like :func:`mpe_row_key`, plus the reference ids and the test
    environment (the grade reads verdicts of that environment)."""
    return content_key(EVAL_TEST, instance_id, base_commit, text_key(fix), text_key(reference), reference_ids,
                       text_key(candidate), environment, mpe)


def suite_run_key(*, module_source: str, suite: str, test_ids: list[str], environment: str) -> str:
    """Key of a suite mutant run: the mutated module, the suite, the test ids, the environment."""
    return content_key(text_key(module_source), text_key(suite), sorted(test_ids), environment)


def study_key(kind: str, version: int, *parts: Any) -> str:
    """Key of a real-bugs study step record: its kind, the study's record version, the step's inputs."""
    return content_key(kind, version, *parts)


class StoreError(CoHardenError):
    """The result store cannot be opened or written."""


_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED


def _wal(conn: sqlite3.Connection, seconds: float = 60.0) -> None:
    """Put the store in WAL mode. Switching a new file's journal mode takes an exclusive lock and SQLite answers
    it without its busy handler: processes that open one new store at once (a batch's Ray workers) got "database
    is locked" at once. So it is retried, by the error's code, for as long as the connection's own timeout."""
    deadline = time.monotonic() + seconds
    delay = 0.01
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) not in _BUSY or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


class Store:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._conn() as conn:
                conn.executescript(_SCHEMA)
                conn.execute("BEGIN IMMEDIATE")  # a write lock: a read-only store fails here, before any work
                conn.execute("ROLLBACK")
        except (OSError, sqlite3.Error) as exc:
            self.close()
            raise StoreError(f"{self.path.absolute()}: cannot open the result store for writing "
                             f"({getattr(exc, 'strerror', None) or exc}); give a writable --store") from exc

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            _wal(conn)
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

    def records(self, kind: str) -> list[tuple[Any, float]]:
        """Every record of ``kind`` with the time it was stored, oldest first."""
        rows = self._conn().execute("SELECT data, created FROM records WHERE kind = ? ORDER BY created, key",
                                    (kind,)).fetchall()
        return [(json.loads(data), created) for data, created in rows]

    def count(self, table: str = "verdicts") -> int:
        if table not in ("verdicts", "records"):
            raise ValueError(table)
        return self._conn().execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
