"""The local model (Qwen2.5-Coder-1.5B served by ``scripts/local-model``), without the model: its recorded replies
go through the same applier and admission filter as a live run, and the bad input a small local model or a
missing server gives is a counted rejection or a clear error, never a hang. One test talks to a running server
and skips with a reason when none is running.

The recordings (``tests/fixtures/local_model/``) were made on this machine with the server of
``scripts/local-model serve``; docs/local_model.md reports what they show.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.llm import CallStore, LLMClient, LLMConfig, MockLLMServer
from coharden.llm.cache import request_hash
from coharden.loop.demo import (
    LIVE_CONFIG,
    LIVE_STEP_LIMIT,
    DemoRun,
    check_live_server,
    local_base,
    replies_from_recording,
    run_demo,
)
from coharden.mutation.context import FileChange, FixContext
from coharden.mutation.llm_edits import EditFormatError, reply_to_raw_mutant
from coharden.mutation.llm_operators import is_repetition
from coharden.mutation.pool import AdmissionFilter
from coharden.schema.mutant import Operator

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "local_model"
EXAMPLE = ROOT / "examples" / "warn_or_raise"
SOURCE = "timespan/parse.py"


def free_port() -> int:
    with socket.socket() as sock:  # free a moment ago, no listener now
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def warn_or_raise_context(tmp_path: Path) -> FixContext:
    """The buggy and fixed parse.py of the warn_or_raise example (what the recorded prompts showed)."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE / "project", project)
    buggy = (project / SOURCE).read_text()
    subprocess.run(["git", "apply", "--unsafe-paths", f"--directory={project.relative_to(tmp_path)}",
                    str(EXAMPLE / "fix.patch")], cwd=tmp_path, check=True)
    return FixContext(files=[FileChange(SOURCE, buggy, (project / SOURCE).read_text())])


def classify(reply: dict[str, Any], ctx: FixContext, max_tokens: int = 400) -> str:
    """What the LLM mutator makes of one recorded reply: ``admitted`` or the rejection reason (``max_tokens``:
    the recording's; a reply reaching it is rejected by the client as truncated)."""
    if reply["completion_tokens"] >= max_tokens:
        return "repetition" if is_repetition(reply["reply"]) else "truncated"
    try:
        raw = reply_to_raw_mutant(reply["reply"], ctx, Operator(reply["operator"]))
    except EditFormatError as exc:
        return exc.reason
    reason, _ = AdmissionFilter.of(ctx).check(raw.files, set())
    return reason or "admitted"


def test_recorded_mutant_replies_of_the_local_model_are_rejected_by_reason(tmp_path: Path) -> None:
    # Check 1 of issue 38 as recorded: 5 operators, one SEARCH/REPLACE sample each, 0 admissible. The 1.5B model
    # opens blocks it never divides, puts a diff inside a SEARCH part, or edits a docstring line that differs.
    replies = json.loads((FIXTURES / "mutant-replies-warn_or_raise.json").read_text())
    ctx = warn_or_raise_context(tmp_path)
    got = {r["operator"]: classify(r, ctx) for r in replies}
    assert got == {r["operator"]: r["reason"] for r in replies}
    assert sorted(got.values()) == ["malformed_block", "malformed_block", "search_not_found", "search_not_found",
                                    "truncated"]
    # the recorded cost of the model: about 2,100 prompt tokens and 5-10 minutes per reply on the busy machine
    assert all(2000 < r["prompt_tokens"] < 2200 for r in replies)
    assert all(200 < r["latency_s"] < 700 for r in replies)


@pytest.mark.parametrize(("recording", "expected"), [
    # the replies the tolerant applier was built on (seed 0)
    ("mutant-replies-warn_or_raise-diff.json",
     [("input_specific_shortcut", 1), ("symptom_suppression", 0), ("vanilla", 1)]),
    # a fresh sample taken after it was built (seed 7: other test orders, so other prompts): held out
    ("mutant-replies-warn_or_raise-diff-seed7.json",
     [("behavior_substitution", 1), ("incomplete_fix", 0), ("input_specific_shortcut", 0), ("vanilla", 1)]),
])
def test_recorded_diff_replies_of_the_local_model_give_admissible_mutants(
        tmp_path: Path, recording: str, expected: list[tuple[str, int]]) -> None:
    # Check 1 of issue 38 with the diff edit format (-c mpe.llm_edit_format=diff, COHARDEN_LLM_MAX_TOKENS=600),
    # recorded on a quiet machine, 2 samples per operator at most. As written, almost none apply to the fixed
    # code; by their changed lines (context ignored) or against the buggy lines they copied from the fix's diff,
    # three or four are admissible mutants: enough for a class (the replay below).
    replies = json.loads((FIXTURES / recording).read_text())
    ctx = warn_or_raise_context(tmp_path)
    got = [(r["operator"], r["sample_index"], classify(r, ctx, max_tokens=600)) for r in replies]
    assert got == [(r["operator"], r["sample_index"], r["reason"]) for r in replies]
    assert sorted((op, i) for op, i, reason in got if reason == "admitted") == expected
    # the prompt is the full one (issue, fix, fixed code, both tests); the server reuses its shared prefix
    assert all(2100 < r["prompt_tokens"] < 2200 for r in replies)
    assert all(20 < r["latency_s"] < 120 for r in replies)


def test_the_recorded_diff_replies_replay_to_a_class_offline(tmp_path: Path, mock_llm: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``coharden mpe --mutator llm -c mpe.llm_edit_format=diff`` on warn_or_raise, the model's recorded replies
    served in recorded order per operator: the three LLM mutants apply and run; each breaks an existing test of
    the golden file, so none is plausible (issue 50) and nothing is classified from them; without the
    plausibility rule they are admissible and give a class."""
    replies = json.loads((FIXTURES / "mutant-replies-warn_or_raise-diff.json").read_text())
    rules = [{"match": f"Mutation operator: {r['operator']}\n", "reply": r["reply"], "times": 1,
              "usage": {"prompt_tokens": r["prompt_tokens"], "completion_tokens": r["completion_tokens"]}}
             for r in sorted(replies, key=lambda r: (r["operator"], r["sample_index"]))]
    server = mock_llm(rules)
    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", "COHARDEN_TEST_KEY")
    monkeypatch.setenv("COHARDEN_TEST_KEY", "sk-test")
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    args = ["mpe", str(EXAMPLE), "--test", "lax", "--mutator", "llm", "--model", "openai/local", "--api-base",
            server.base_url, "--samples", "1", "-c", "mpe.llm_edit_format=diff", "--store", str(tmp_path / "s.sqlite"),
            "--llm-store", str(tmp_path / "calls.sqlite"), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["per_source"]["llm"]["total"] == 3
    assert data["per_source"]["llm"]["inadmissible"] == {"implausible": 3}
    assert (data["test_class"], data["undecided"]) == ("Inconclusive", "no_admissible")
    # the same replies (the call store replays them) under the old admission: three admissible mutants, a class
    old = CliRunner().invoke(app, [*args, "--llm-mode", "replay", "-c", "mpe.plausibility=false"])
    assert old.exit_code == 0, old.output
    data = json.loads(old.stdout)
    assert data["per_source"]["llm"]["admissible"] == 3
    assert data["test_class"] in ("Lax", "Borderline")


@pytest.mark.parametrize(("reply", "reason"), [
    ("Sure! The variant lowers the limit by one, which looks like a fix.", "no_edit_blocks"),  # not a diff
    ("```diff\n--- a/timespan/parse.py\n+++ b/timespan/parse.py\n@@ -1,3 +1,3 @@\n import re\n```\n",
     "no_change"),  # a diff that changes nothing
    ("timespan/parse.py\n<<<<<<< SEARCH\n    total = 0\n", "malformed_block"),  # a block cut short
])
def test_bad_replies_are_counted_rejections(tmp_path: Path, reply: str, reason: str) -> None:
    ctx = warn_or_raise_context(tmp_path)
    with pytest.raises(EditFormatError) as info:
        reply_to_raw_mutant(reply, ctx, Operator.VANILLA)
    assert info.value.reason == reason


def test_no_server_for_the_live_demo_is_a_clear_error_at_once() -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    with pytest.raises(CoHardenError, match="no local model server answers at .*scripts/local-model serve"):
        check_live_server(base)
    assert time.monotonic() - started < 10


def test_demo_live_without_a_server_says_so_before_any_work(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    result = CliRunner().invoke(app, ["demo", "loop", str(ROOT / "examples" / "boundary_check"), "--live",
                                      "--api-base", base, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "no local model server answers at" in result.output
    assert "scripts/local-model serve" in result.output
    assert not (tmp_path / "out" / "run").exists()


def test_local_base_prefers_the_flag_then_the_server_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1/")
    assert local_base(None) == "http://127.0.0.1:9999/v1"
    assert local_base("http://h:1/v1") == "http://h:1/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert local_base(None) == "http://127.0.0.1:8765/v1"


def _live_base() -> str | None:
    base = local_base(None)
    try:
        with urllib.request.urlopen(f"{base}/models", timeout=20) as reply:
            return base if any(m.get("id") == "local" for m in json.load(reply).get("data", [])) else None
    except (OSError, ValueError):
        return None


@pytest.mark.skipif(_live_base() is None,
                    reason="no local model server (scripts/local-model serve) is running, or it is busy")
def test_a_running_local_server_is_recognised() -> None:
    base = _live_base()
    assert base is not None
    assert "local" in check_live_server(base)


def _local_model_script() -> Any:
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("local_model_script", str(ROOT / "scripts" / "local-model"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_the_server_is_ready_only_once_it_generates_a_token() -> None:
    """``scripts/local-model serve`` waits for a generated token, not only ``/v1/models``: an engine that faults
    on this CPU answers the listing and dies at the first computation."""
    script = _local_model_script()
    with MockLLMServer([{"reply": "hi"}]) as server:
        port = int(server.base_url.rsplit(":", 1)[1].split("/", 1)[0])
        assert script.computes(port, timeout=10)
    with socket.socket() as probe:  # a port nothing listens on: as a server that died
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    assert not script.computes(free, timeout=5)


def test_a_recorded_live_run_becomes_rules_that_answer_in_recorded_order(tmp_path: Path) -> None:
    store = CallStore(tmp_path / "llm-calls.sqlite")
    for number, text in enumerate(["THOUGHT: first", "THOUGHT: second", "THOUGHT: third"]):
        response = {"content": text, "finish_reason": "stop", "prompt_tokens": 700 + number,
                    "completion_tokens": 30, "cost_usd": 0.0, "latency_s": 300.0 + number}
        store.put(request_hash({"n": number}), {"n": number}, response)
    rules = replies_from_recording(store.path)
    assert [r["reply"] for r in rules] == ["THOUGHT: first", "THOUGHT: second", "THOUGHT: third"]
    assert rules[1]["name"] == "call-2 (301 s live)"
    assert rules[2]["usage"] == {"prompt_tokens": 702, "completion_tokens": 30}
    with MockLLMServer(rules) as server:  # valid rules; each answers once, in order, whatever was asked
        client = LLMClient(LLMConfig(model="openai/local", api_base=server.base_url, api_key_env="REPLAY_KEY",
                                     max_retries=0))
        os.environ.setdefault("REPLAY_KEY", "sk-local")
        got = [client.complete([{"role": "user", "content": ask}]).content for ask in ("a", "b", "c")]
    assert got == ["THOUGHT: first", "THOUGHT: second", "THOUGHT: third"]


LOOP_RECORDING = FIXTURES / "loop-boundary_check"


@pytest.mark.skipif(not (LOOP_RECORDING / "replies.yaml").is_file(), reason="no recorded live loop run")
def test_the_recorded_live_loop_replays_offline_to_its_decision(tmp_path: Path, settings: Settings) -> None:
    # the real model's replies of `coharden run examples/boundary_check --model openai/local --rounds 1
    # --step-limit 5`, served in recorded order by the mock: the same commands, verdicts, mutants and decision
    recorded = json.loads((LOOP_RECORDING / "state.json").read_text())
    result = run_demo(ROOT / "examples" / "boundary_check", DemoRun(tmp_path / "run", settings),
                      replies=LOOP_RECORDING / "replies.yaml", config=LIVE_CONFIG, step_limit=LIVE_STEP_LIMIT)
    assert [r.decision for r in result.rounds] == [r["decision"] for r in recorded["rounds"]]
    assert result.decision == recorded["final_decision"]
    assert result.test == recorded["test"]
    assert result.fix == recorded["fix"]
