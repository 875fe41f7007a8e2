"""Record / replay: content-addressed SQLite store, byte-identical replay with the server stopped."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import coharden
from coharden.llm import (
    CacheMode,
    CallStore,
    LLMClient,
    LLMConfigError,
    ReplayMiss,
    TruncatedReply,
    request_hash,
)
from coharden.llm.cache import build_request

from ._helpers import Serve, make_config, reply_rule, user

pytestmark = pytest.mark.usefixtures("api_key")

# Replies with characters that a careless text round trip would change.
TRICKY = [
    "line one\r\nline two\n\ttabbed  trailing spaces   \n",
    'unicode: café — 漢字 🚀 \u200b zero-width, \\ backslash, "quotes"',
    "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n",
]


def test_record_then_replay_with_server_stopped_is_byte_identical(serve: Serve, tmp_path: Path) -> None:
    server = serve(
        [reply_rule(f"q{i}", text, prompt_tokens=10 + i, completion_tokens=5) for i, text in enumerate(TRICKY)]
    )
    db = tmp_path / "calls.sqlite"
    with CallStore(db) as store:
        recorder = LLMClient(make_config(server.base_url), store=store, mode="record")
        recorded = [recorder.complete(user(f"q{i}"), instance_id=f"i{i}") for i in range(len(TRICKY))]
    assert [c.content for c in recorded] == TRICKY
    server.stop()

    with CallStore(db) as store:
        # a different (dead) endpoint: the api base is transport, not part of the request hash
        replayer = LLMClient(make_config("http://127.0.0.1:9/v1"), store=store, mode=CacheMode.REPLAY)
        replayed = [replayer.complete(user(f"q{i}"), instance_id=f"i{i}") for i in range(len(TRICKY))]

    for rec, rep in zip(recorded, replayed, strict=True):
        assert rep.content.encode("utf-8") == rec.content.encode("utf-8")
        assert rep.cached
        assert not rec.cached
        assert rep.model_dump(exclude={"cached"}) == rec.model_dump(exclude={"cached"})
    # the replayed run accounts exactly like the recorded one (so reports and budget stops reproduce)
    rec_run, rep_run = recorder.ledger.to_dict()["run"], replayer.ledger.to_dict()["run"]
    assert rep_run["cost_usd"] == rec_run["cost_usd"]
    assert rep_run["prompt_tokens"] == rec_run["prompt_tokens"]
    assert (rep_run["cached_calls"], rep_run["cached_cost_usd"]) == (3, rec_run["cost_usd"])


def test_replay_miss_names_the_hash_and_never_calls(serve: Serve, tmp_path: Path) -> None:
    server = serve([reply_rule("hi", "hello")])
    with CallStore(tmp_path / "calls.sqlite") as store:
        client = LLMClient(make_config(server.base_url), store=store, mode="replay")
        with pytest.raises(ReplayMiss) as info:
            client.complete(user("hi"))
    assert len(info.value.request_hash) == 64
    assert info.value.request_hash in str(info.value)
    assert server.requests == []
    assert client.ledger.run_usage().errors_by_kind == {"replay_miss": 1}


def test_auto_mode_uses_the_store_when_present(serve: Serve, tmp_path: Path) -> None:
    server = serve([reply_rule("hi", "hello")])
    with CallStore(tmp_path / "calls.sqlite") as store:
        client = LLMClient(make_config(server.base_url), store=store, mode="auto")
        first = client.complete(user("hi"))
        second = client.complete(user("hi"))
        assert (first.cached, second.cached) == (False, True)
        assert first.request_hash == second.request_hash
        assert len(server.requests) == 1
        assert len(store) == 1


def test_samples_of_the_same_request_are_distinct_entries(serve: Serve, tmp_path: Path) -> None:
    server = serve(
        [
            reply_rule("hi", "first", times=1),
            reply_rule("hi", "second", times=1),
            reply_rule("hi", "third", times=1),
        ]
    )
    with CallStore(tmp_path / "calls.sqlite") as store:
        client = LLMClient(make_config(server.base_url, temperature=1.0), store=store, mode="auto")
        samples = [client.complete(user("hi"), sample_index=i) for i in range(3)]
        again = [client.complete(user("hi"), sample_index=i) for i in range(3)]
        assert [c.content for c in samples] == ["first", "second", "third"]
        assert len({c.request_hash for c in samples}) == 3
        assert [c.content for c in again] == ["first", "second", "third"]
        assert all(c.cached for c in again)
        assert len(server.requests) == 3
        assert len(store) == 3


def test_record_mode_calls_again_and_replaces(serve: Serve, tmp_path: Path) -> None:
    server = serve([reply_rule("hi", "old", times=1), reply_rule("hi", "new")])
    with CallStore(tmp_path / "calls.sqlite") as store:
        client = LLMClient(make_config(server.base_url), store=store, mode="record")
        assert client.complete(user("hi")).content == "old"
        assert client.complete(user("hi")).content == "new"
        assert len(server.requests) == 2
        assert LLMClient(make_config(server.base_url), store=store, mode="replay").complete(user("hi")).content == "new"


def test_truncated_reply_is_stored_and_replays_as_truncated(serve: Serve, tmp_path: Path) -> None:
    server = serve([reply_rule("hi", "cut", finish_reason="length")])
    with CallStore(tmp_path / "calls.sqlite") as store:
        with pytest.raises(TruncatedReply):
            LLMClient(make_config(server.base_url), store=store, mode="record").complete(user("hi"))
        replayer = LLMClient(make_config(server.base_url), store=store, mode="replay")
        with pytest.raises(TruncatedReply) as info:
            replayer.complete(user("hi"))
    assert info.value.completion.cached
    assert replayer.ledger.run_usage().truncations == 1
    assert len(server.requests) == 1


def test_request_hash_is_canonical_and_covers_what_changes_the_answer() -> None:
    base = build_request("openai/m", user("hi"), {"temperature": 0.0, "max_tokens": 5}, 0)
    reordered = build_request("openai/m", user("hi"), {"max_tokens": 5, "temperature": 0.0}, 0)
    assert request_hash(base) == request_hash(reordered)
    variants = [
        build_request("openai/other", user("hi"), {"temperature": 0.0, "max_tokens": 5}, 0),
        build_request("openai/m", user("hi!"), {"temperature": 0.0, "max_tokens": 5}, 0),
        build_request("openai/m", user("hi"), {"temperature": 0.5, "max_tokens": 5}, 0),
        build_request("openai/m", user("hi"), {"temperature": 0.0, "max_tokens": 5}, 1),
    ]
    assert len({request_hash(v) for v in [base, *variants]}) == 5


def test_store_is_one_table_in_wal_mode(serve: Serve, tmp_path: Path) -> None:
    server = serve([reply_rule("hi", "hello")])
    db = tmp_path / "calls.sqlite"
    with CallStore(db) as store:
        c = LLMClient(make_config(server.base_url), store=store).complete(user("hi"))
        assert store.keys() == [c.request_hash]
        raw = store.raw_response(c.request_hash)
        assert raw is not None
        assert raw["choices"][0]["message"]["content"] == "hello"
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert tables == ["llm_calls"]
        (request_json,) = conn.execute("SELECT request_json FROM llm_calls").fetchone()
    finally:
        conn.close()
    request = json.loads(request_json)
    assert request["messages"] == user("hi")
    assert request["sample_index"] == 0
    assert "api_base" not in request
    assert "api_key" not in json.dumps(request)


def test_first_stored_reply_wins_in_auto_mode(tmp_path: Path) -> None:
    request = build_request("openai/m", user("hi"), {"temperature": 0.0}, 0)
    key = request_hash(request)
    with CallStore(tmp_path / "calls.sqlite") as store:
        first = store.put(key, request, {"content": "first"})
        second = store.put(key, request, {"content": "second"})
        assert first.response == second.response == {"content": "first"}
        assert store.put(key, request, {"content": "third"}, replace=True).response == {"content": "third"}
        with pytest.raises(ValueError, match="does not hash"):
            store.put("0" * 64, request, {"content": "x"})


def test_replay_mode_needs_a_store() -> None:
    with pytest.raises(LLMConfigError, match="replay mode needs a CallStore"):
        LLMClient(make_config("http://127.0.0.1:9/v1"), mode="replay")


def test_replay_does_not_import_litellm(serve: Serve, tmp_path: Path) -> None:
    """Replay is offline by construction: it does not even load the HTTP client stack."""
    server = serve([reply_rule("hi", "hello")])
    db = tmp_path / "calls.sqlite"
    with CallStore(db) as store:
        LLMClient(make_config(server.base_url), store=store, mode="record").complete(user("hi"))
    script = f"""
import sys
from coharden.llm import CallStore, LLMClient, LLMConfig
config = LLMConfig(model="openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1", max_tokens=256)
with CallStore({str(db)!r}) as store:
    print(LLMClient(config, store=store, mode="replay").complete(
        [{{"role": "system", "content": "You are terse."}}, {{"role": "user", "content": "hi"}}]).content)
print("litellm" in sys.modules, "httpx" in sys.modules)
"""
    src = str(Path(coharden.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["hello", "False False"]
