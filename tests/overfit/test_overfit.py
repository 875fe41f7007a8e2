"""Test overfitting (coharden overfit): the reward of a (fix, test) pair with real changed-line coverage, the
reward-guided refinement loop driven by scripted critic replies through the real HTTP client and the local mock
server, and the overfitting numbers of ``coharden eval --overfit``. Real git, real pytest, real coverage.py, on
the bundled examples (boundary_check, two_files)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.evaluation.grading import GradeOptions
from coharden.evaluation.grading_jobs import Grading
from coharden.evaluation.refinement import load_refinement
from coharden.evaluation.runner import EvalInputs, run_evaluation
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import load_local
from coharden.llm import LLMClient, LLMConfig, MockLLMServer
from coharden.overfit.coverage import changed_line_coverage, changed_lines
from coharden.overfit.critic_prompt import apply_reply, parse_decision
from coharden.overfit.refine import RefineResult, RefineRun, refine_pair
from coharden.overfit.refine_config import RefineConfig
from coharden.overfit.report import IterationLog, summarize, write_outputs
from coharden.overfit.reward import coverage_settings, evaluate_pair, reward_of
from coharden.patches import make_patch
from coharden.schema.mpe_config import MPEConfig

# (not importorskip: importing litellm before the client configures it fetches its price table from the network)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("litellm") is None,
                                reason="the LLM client needs litellm (the llm extra)")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KEY_VAR = "COHARDEN_TEST_OVERFIT_KEY"
MODEL = "openai/critic-model"
LIMITER = "throttle/limiter.py"

# the four statements the golden fix of boundary_check changes (old text -> new text)
A_OLD, A_NEW = "    return [t for t in history if t >= cutoff]", "    return [t for t in history if t > cutoff]"
B_OLD, B_NEW = ("    return len(recent_hits(history, now, window)) <= limit",
                "    return len(recent_hits(history, now, window)) < limit")
C_OLD, C_NEW = "    if len(recent) <= limit:", "    if len(recent) < limit:"
D_OLD, D_NEW = "    return recent[-limit - 1] + window - now", "    return recent[-limit] + window - now"
COMMENT = "    # the oldest of the last `limit` requests has to expire first"


# --- helpers ---------------------------------------------------------------------------------------------------

def base_file(example: str, rel: str) -> str:
    return (EXAMPLES / example / "project" / rel).read_text()


def replaced(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert text.count(old + "\n") == 1, f"the example changed: {old!r} is not one line of the base file"
        text = text.replace(old + "\n", new + "\n")
    return text


def line_of(text: str, line: str) -> int:
    """1-based number of the one line of ``text`` equal to ``line``."""
    hits = [i + 1 for i, x in enumerate(text.splitlines()) if x == line]
    assert len(hits) == 1, (line, hits)
    return hits[0]


def fix_for(example: str, edits: dict[str, tuple[tuple[str, str], ...]]) -> tuple[str, dict[str, tuple[str, str]]]:
    """A source patch replacing whole lines of the example's base files, and (old, new) of every file."""
    files = {rel: (base_file(example, rel), replaced(base_file(example, rel), *pairs)) for rel, pairs in edits.items()}
    return make_patch((rel, old, new) for rel, (old, new) in files.items()), files


def block(path: str, search: str, replace: str) -> str:
    return f"{path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def reply(change: str, *blocks: str, text: str = "The pair is not fail-to-pass yet.") -> str:
    return f"{text}\n\n{json.dumps({'change': change})}\n\n" + "\n".join(blocks) + "Summary: one edit\n"


def rules(*replies: str, **kw: Any) -> list[dict[str, Any]]:
    return [{"reply": r, "times": 1, "usage": {"prompt_tokens": 100, "completion_tokens": 20}, **kw} for r in replies]


# lax candidate of boundary_check: only `is_allowed([0, 1, 2], now=5, limit=3, window=60) is False`
INCOMPLETE = {LIMITER: ((A_OLD, A_NEW),)}  # recent_hits only: is_allowed still lets a 4th request through
FOCAL_B = block(LIMITER, B_OLD, B_NEW)


# --- fixtures --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("overfit")


@pytest.fixture(scope="module")
def boundary(workdir: Path):  # type: ignore[no-untyped-def]
    return load_local(EXAMPLES / "boundary_check", workdir / "cache")


@pytest.fixture(scope="module")
def settings(workdir: Path) -> Settings:
    return coverage_settings(Settings(timeout=60, store=workdir / "store.sqlite", cache_dir=workdir / "cache",
                                      workers=1), "coverage")


@pytest.fixture(scope="module")
def executor(boundary, settings: Settings) -> Iterator[InstanceExecutor]:  # type: ignore[no-untyped-def]
    inst = boundary.instance
    with InstanceExecutor(inst, Path(inst.repo), settings, Store(settings.store)) as ex:
        yield ex


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, mock_llm):  # type: ignore[no-untyped-def]
    monkeypatch.setenv(KEY_VAR, "sk-test")
    return mock_llm


def client_for(server: MockLLMServer, **overrides: Any) -> LLMClient:
    values: dict[str, Any] = {"model": MODEL, "api_base": server.base_url, "api_key_env": KEY_VAR, "max_tokens": 1024,
                              "max_retries": 0, "timeout": 20}
    values.update(overrides)
    return LLMClient(LLMConfig.model_validate(values))


# --- the reward --------------------------------------------------------------------------------------------------

def test_reward_equals_a_hand_computation_with_changed_line_coverage(executor: InstanceExecutor) -> None:
    # the golden fix's four statement changes, plus a blank line and a comment line that must not count
    fix, files = fix_for("boundary_check", {LIMITER: ((A_OLD, A_NEW), (B_OLD, B_NEW), (C_OLD, C_NEW),
                                                      (D_OLD, "\n" + COMMENT + "\n" + D_NEW))})
    old, new = files[LIMITER]
    # by hand: executable deleted lines A, B, C, D of the old file; executable added lines A, B, C, D of the new
    # file (the inserted blank line and the comment are not executable): 8 changed lines
    deleted = sorted(line_of(old, x) for x in (A_OLD, B_OLD, C_OLD, D_OLD))
    added = sorted(line_of(new, x) for x in (A_NEW, B_NEW, C_NEW, D_NEW))
    assert line_of(new, COMMENT) == added[-1] - 1
    assert new.splitlines()[added[-1] - 3] == ""

    # the lax test calls is_allowed only: it runs B (is_allowed) and A (recent_hits) on both sides, not C, D
    lax = evaluate_pair(executor, fix, (EXAMPLES / "boundary_check/candidates/lax.patch").read_text())
    cov = lax.coverage
    assert cov is not None
    [fc] = cov.files
    assert (fc.path, fc.deleted, fc.added) == (LIMITER, deleted, added)
    assert fc.deleted_covered == sorted(line_of(old, x) for x in (A_OLD, B_OLD))
    assert fc.added_covered == sorted(line_of(new, x) for x in (A_NEW, B_NEW))
    assert (cov.covered, cov.total) == (4, 8)
    assert (lax.old.outcome.value, lax.new.outcome.value) == ("FAIL", "PASS")  # type: ignore[union-attr]
    assert lax.reward == pytest.approx((1 + 1 + 4 / 8) / 3)

    # the golden test: one case per input (issue 50's parametrized example), so on the old code too the cases
    # that reach retry_after run it although the is_allowed cases fail: all four statements on both sides
    golden = evaluate_pair(executor, fix, executor.instance.test_patch)
    assert golden.coverage is not None
    assert (golden.coverage.covered, golden.coverage.total) == (8, 8)
    assert golden.coverage.missed() == {LIMITER: {"old": [], "new": []}}
    assert golden.reward == pytest.approx((1 + 1 + 8 / 8) / 3)

    # the stdlib fallback tracer measures the same lines
    test = executor.test_patch((EXAMPLES / "boundary_check/candidates/lax.patch").read_text())
    traced = changed_line_coverage(executor, fix, test, backend="settrace")
    assert traced.files == cov.files
    assert traced.backend == "settrace"

    # a test that passes on the old code and fails on the new one scores only its coverage
    assert reward_of(False, False, 0.5) == pytest.approx(1 / 6)


def test_reward_of_two_files_covers_both_files(workdir: Path, settings: Settings) -> None:
    local = load_local(EXAMPLES / "two_files", workdir / "cache")
    fix, files = fix_for("two_files", {
        "billing/money.py": (("    return int(float(amount) * 100)", "    return round(float(amount) * 100)"),),
        "billing/invoice.py": (("    tax = subtotal * tax_percent // 100",
                                "    tax = (subtotal * tax_percent + 50) // 100"),)})
    inst = local.instance
    with InstanceExecutor(inst, Path(inst.repo), settings, Store(settings.store)) as ex:
        pair = evaluate_pair(ex, fix, (EXAMPLES / "two_files/candidates/rigorous.patch").read_text())
    # by hand: 2 deleted + 2 added lines. The rigorous test has one case per input (issue 50's parametrized
    # example): on the old code the invoice cases run invoice.py's old line too, though to_cents' cases fail; on
    # the new code all of it passes: (2 + 2) / 4
    assert pair.coverage is not None
    assert {f.path: (len(f.deleted_covered), len(f.added_covered)) for f in pair.coverage.files} == {
        "billing/invoice.py": (1, 1), "billing/money.py": (1, 1)}
    assert pair.fail_to_pass
    assert pair.reward == pytest.approx((1 + 1 + 4 / 4) / 3)


def test_executable_changed_lines_skip_blank_comment_and_docstring_lines() -> None:
    old = 'def f(x):\n    """Old doc."""\n    return g(\n        x,\n        1,\n    )\n'
    new = 'def f(x):\n    """New doc."""\n    # why 2\n    return g(\n        x,\n        2,\n    )\n\n'
    lines = changed_lines("m.py", old, new)
    # the docstring, the comment and the trailing blank line do not count; the argument line of the multi-line
    # call counts (its statement, `return g(...)`, is executable) on both sides
    assert (lines.deleted, lines.added) == ([5], [6])


# --- the reply format ------------------------------------------------------------------------------------------

def test_reply_decision_and_sides() -> None:
    fix = {LIMITER: f"{A_NEW}\n{B_OLD}\n"}
    test = {"tests/test_repro.py": "def test_x():\n    assert f() is False\n"}
    assert parse_decision('```json\n{"change": "both"}\n```') == "both"
    decision, changed, new_fix, new_test = apply_reply(reply("focal", FOCAL_B), fix, test)
    assert (decision, changed) == ("focal", "focal")
    assert new_fix[LIMITER] == f"{A_NEW}\n{B_NEW}\n"
    assert new_test == test
    both = reply("both", FOCAL_B, block("tests/test_repro.py", "    assert f() is False", "    assert not f()"))
    assert apply_reply(both, fix, test)[1] == "both"
    with pytest.raises(ValueError, match="the edits change the focal side"):
        apply_reply(reply("test", FOCAL_B), fix, test)
    with pytest.raises(ValueError, match="no JSON decision"):
        apply_reply(FOCAL_B, fix, test)
    with pytest.raises(ValueError, match="search_not_found"):
        apply_reply(reply("focal", block(LIMITER, "    nothing like this", "x")), fix, test)
    with pytest.raises(ValueError, match="the test is hidden"):
        apply_reply(reply("test", block("tests/test_repro.py", "    assert f() is False", "    pass")), fix, test,
                    hide_test=True)


# --- the refinement loop ---------------------------------------------------------------------------------------

def test_refinement_passing_the_generated_test_but_failing_golden_counts_as_overfitting(
        executor: InstanceExecutor, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = serve(rules(reply("focal", FOCAL_B)))
    fix, _ = fix_for("boundary_check", INCOMPLETE)
    lax = (EXAMPLES / "boundary_check/candidates/lax.patch").read_text()
    log = IterationLog(tmp_path / "out" / "iterations.jsonl")
    result = refine_pair(executor, fix, lax, RefineRun(client_for(server), RefineConfig(), "crit", on_iteration=log))

    # start: fails on old, fails on new (is_allowed unchanged), both changed lines run: (1 + 0 + 2/2) / 3
    assert result.initial["reward"] == pytest.approx(2 / 3)
    [it] = result.records
    assert (it.status, it.decision, it.changed) == ("kept", "focal", "focal")
    assert it.reward_after == pytest.approx(1.0)  # F->P and all 4 changed lines run
    assert result.stop_reason == "fail_to_pass"
    assert result.iterations == 1
    assert result.changed == {"focal": 1, "test": 0, "both": 0}
    assert result.test == result.initial_test
    assert result.fix != result.initial_fix
    # the critic saw both logs, the focal function and the test, and never the golden test
    prompt = server.requests[0].messages[1]["content"]
    assert "def recent_hits" in prompt
    assert "test_repro_fourth_request_is_rejected" in prompt
    assert "On the old (buggy) code" in prompt
    assert "AssertionError" in prompt
    assert "test_limit_and_window_boundaries" not in prompt

    # graded by coharden eval: the refined fix passes its own test but not the golden test -> overfitting
    summary = summarize([result], RefineConfig(), "crit", MODEL)
    write_outputs([result], tmp_path / "out", summary)
    lines = [json.loads(x) for x in (tmp_path / "out" / "iterations.jsonl").read_text().splitlines()]
    assert [(x["iteration"], x["status"], x["changed"]) for x in lines] == [(1, "kept", "focal")]
    inst = executor.instance
    run = load_refinement(tmp_path / "out", {inst.instance_id: inst})
    grading = Grading(executor.settings, Store(executor.settings.store),
                      GradeOptions(mpe=MPEConfig(cutoffs=[0.2]), workers=1))
    report = run_evaluation(EvalInputs({inst.instance_id: inst}, refinements=[run]), grading)
    sec = report["refinement"]["crit"]
    after = sec["after"]["instances"][inst.instance_id]
    assert after == {"own_test": "PASS", "passes_own_test": True, "resolved": False, "fails_golden": True,
                     "fails_regression": False, "overfit": True}
    assert sec["overfit_rate"] == {"before": None, "after": 1.0}  # before: the fix failed its own test
    assert sec["coverage"]["after"]["overfit"] == {"n": 1, "n_without_coverage": 0, "mean_coverage": 1.0,
                                                   "ids": [inst.instance_id]}


def test_a_lower_reward_step_is_not_kept(executor: InstanceExecutor, serve) -> None:  # type: ignore[no-untyped-def]
    # 1st proposal reverts the fix: nothing changed, the test fails on both sides: 1/3 < 2/3 -> discarded
    server = serve(rules(reply("focal", block(LIMITER, A_NEW, A_OLD)), reply("focal", FOCAL_B)))
    fix, _ = fix_for("boundary_check", INCOMPLETE)
    lax = (EXAMPLES / "boundary_check/candidates/lax.patch").read_text()
    result = refine_pair(executor, fix, lax, RefineRun(client_for(server), RefineConfig(), "crit"))
    first, second = result.records
    assert (first.status, first.changed) == ("rejected", "focal")
    assert first.reward_before == pytest.approx(2 / 3)
    assert first.reward_after == pytest.approx(1 / 3)
    assert first.after is not None
    assert first.after["changed_lines"] == 0
    assert (second.status, second.reward_before) == ("kept", pytest.approx(2 / 3))  # from the kept pair
    assert result.changed["focal"] == 1
    assert result.attempted["focal"] == 2
    # the second prompt shows the unchanged pair and says why the proposal was dropped
    second_prompt = server.requests[1].messages[1]["content"]
    assert "not higher than the current 0.6667" in second_prompt
    assert A_NEW.strip() in second_prompt


def test_the_15_iteration_cap_holds(executor: InstanceExecutor, serve) -> None:  # type: ignore[no-untyped-def]
    # every reply edits the test without changing what it does: equal reward, never kept, never F->P
    same = reply("test", block("tests/test_repro.py", "def test_repro_fourth_request_is_rejected():",
                               "def test_repro_fourth_request_is_rejected():  # same test"))
    server = serve([{"reply": same, "usage": {"prompt_tokens": 100, "completion_tokens": 20}}])
    fix, _ = fix_for("boundary_check", INCOMPLETE)
    lax = (EXAMPLES / "boundary_check/candidates/lax.patch").read_text()
    result = refine_pair(executor, fix, lax, RefineRun(client_for(server), RefineConfig(max_iterations=15), "crit"))
    assert result.stop_reason == "max_iterations"
    assert result.iterations == 15
    assert len(server.requests) == 15
    assert {r.status for r in result.records} == {"rejected"}
    assert result.attempted == {"focal": 0, "test": 15, "both": 0}
    assert result.changed["test"] == 0
    assert (result.fix, result.test) == (result.initial_fix, result.initial_test)
    with pytest.raises(ValueError, match="less than or equal to 15"):
        RefineConfig(max_iterations=16)


def test_a_truncated_reply_stops_the_loop(executor: InstanceExecutor, serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(rules(reply("focal", FOCAL_B), finish_reason="length"))
    fix, _ = fix_for("boundary_check", INCOMPLETE)
    lax = (EXAMPLES / "boundary_check/candidates/lax.patch").read_text()
    result = refine_pair(executor, fix, lax, RefineRun(client_for(server), RefineConfig(), "crit"))
    assert result.stop_reason == "truncated"
    assert "truncated" in (result.error or "")
    [it] = result.records
    assert it.status == "stopped"
    assert it.changed is None
    assert result.fix == result.initial_fix  # a truncated reply is never applied
    summary = summarize([result], RefineConfig(), "crit", MODEL)
    assert summary["stop_reasons"] == {"truncated": 1}
    assert "example__boundary_check" in summary["errors"]


def test_hidden_test_and_no_extra_context_variants(executor: InstanceExecutor, serve) -> None:  # type: ignore[no-untyped-def]
    test_edit = block("tests/test_repro.py", "    assert is_allowed([0, 1, 2], now=5, limit=3, window=60) is False",
                      "    assert True")
    server = serve(rules(reply("test", test_edit), reply("focal", FOCAL_B)))
    fix, _ = fix_for("boundary_check", INCOMPLETE)
    lax = (EXAMPLES / "boundary_check/candidates/lax.patch").read_text()
    config = RefineConfig(hide_test=True, extra_context=False)
    result = refine_pair(executor, fix, lax, RefineRun(client_for(server), config, "crit"))
    first, second = result.records
    assert first.status == "invalid"
    assert "the test is hidden" in first.reason
    assert (second.status, second.changed) == ("kept", "focal")
    prompt = server.requests[0].messages[1]["content"]
    assert "test_repro_fourth_request_is_rejected" not in prompt  # no test code, no logs
    assert "AssertionError" not in prompt
    assert "The test FAILS." in prompt
    assert "def recent_hits" in prompt
    assert "RateLimiter lets limit + 1" not in prompt  # no issue text
    assert "Coverage of the changed lines" not in prompt
    assert "def is_allowed" not in prompt  # only the focal function, recent_hits
    assert first.variant == {"hide_test": True, "extra_context": False}

    # the default variant shows the issue and the changed lines the test misses
    server = serve(rules(reply("focal", FOCAL_B)))
    refine_pair(executor, fix, lax, RefineRun(client_for(server), RefineConfig(), "crit"))
    prompt = server.requests[0].messages[1]["content"]
    assert "RateLimiter lets limit + 1" in prompt
    assert "Coverage of the changed lines" in prompt
    assert "def is_allowed" in prompt  # the fix's file, whole

# --- the command line and coharden eval --overfit --------------------------------------------------------------

def test_cli_refine_outputs_and_eval_overfitting(workdir: Path, serve, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    instances = tmp_path / "instances"
    for name in ("boundary_check", "two_files"):
        shutil.copytree(EXAMPLES / name, instances / name)
    b_fix, _ = fix_for("boundary_check", INCOMPLETE)
    # two_files: money.py right, invoice.py rounds half to even (100.5 -> 100): fails the rigorous test
    wrong_tax = ("    tax = subtotal * tax_percent // 100", "    tax = round(subtotal * tax_percent / 100)")
    money = ("    return int(float(amount) * 100)", "    return round(float(amount) * 100)")
    t_fix, _ = fix_for("two_files", {"billing/money.py": (money,), "billing/invoice.py": (wrong_tax,)})
    b_id, t_id = "example__boundary_check", "example__two_files"

    def preds(rows: dict[str, str]) -> Path:
        path = tmp_path / f"preds{len(list(tmp_path.glob('preds*')))}.jsonl"
        path.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "sys", "model_patch": p}) + "\n"
                                for i, p in rows.items()))
        return path

    fixes = preds({b_id: b_fix, t_id: t_fix})
    tests = preds({b_id: (EXAMPLES / "boundary_check/candidates/lax.patch").read_text(),
                   t_id: (EXAMPLES / "two_files/candidates/rigorous.patch").read_text()})
    tax_fix = block("billing/invoice.py", wrong_tax[1], "    tax = (subtotal * tax_percent + 50) // 100")
    server = serve([{"match": {"contains": "throttle/limiter.py", "last_user": True}, "reply": reply("focal", FOCAL_B),
                     "times": 1},
                    {"match": {"contains": "billing/invoice.py", "last_user": True}, "reply": reply("focal", tax_fix),
                     "times": 1}])
    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", KEY_VAR)
    store = workdir / "cli-store.sqlite"
    common = ["--store", str(store), "--timeout", "60"]
    out = tmp_path / "refined"
    runner = CliRunner()
    monkeypatch.setenv("COHARDEN_CACHE", str(workdir / "cache"))
    result = runner.invoke(app, ["overfit", "refine", "--instances", str(instances), "--fixes", str(fixes),
                                 "--tests", str(tests), "--model", MODEL, "--api-base", server.base_url,
                                 "--run-name", "critic", "--output", str(out), *common])
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 2

    refined = {json.loads(x)["instance_id"]: json.loads(x) for x in (out / "fixes.jsonl").read_text().splitlines()}
    assert set(refined) == {b_id, t_id}
    assert {r["model_name_or_path"] for r in refined.values()} == {"critic"}
    assert "+    tax = (subtotal * tax_percent + 50) // 100" in refined[t_id]["model_patch"]
    tests_out = [json.loads(x) for x in (out / "tests.jsonl").read_text().splitlines()]
    assert all(r["model_patch"].startswith("diff --git a/tests/") for r in tests_out)
    iterations = [json.loads(x) for x in (out / "iterations.jsonl").read_text().splitlines()]
    assert [(r["instance"], r["changed"], r["status"]) for r in iterations] == [(b_id, "focal", "kept"),
                                                                               (t_id, "focal", "kept")]
    rows = {json.loads(x)["instance"]: json.loads(x) for x in (out / "instances.jsonl").read_text().splitlines()}
    # two_files by hand: 4 executable changed lines (the comment-free fix); the rigorous test's cases (one per
    # input) run both old and both new lines: 4/4 before and after
    assert rows[t_id]["initial"]["coverage"] == rows[t_id]["final"]["coverage"] == pytest.approx(4 / 4)
    assert rows[t_id]["final"]["reward"] == pytest.approx((1 + 1 + 4 / 4) / 3)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fail_to_pass"] == {"before": 0, "after": 2}
    assert summary["sides_changed"] == {"focal": 2, "test": 0, "both": 0}

    result = runner.invoke(app, ["eval", "--instances", str(instances), "--overfit", str(out), "--no-html",
                                 "--output", str(tmp_path / "report"), "--json", *common])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    sec = report["refinement"]["critic"]
    # before: neither fix passes its own test; after: both do, boundary_check's without being resolved
    assert sec["overfit_rate"] == {"before": None, "after": 0.5}
    assert sec["after"]["instances"][b_id]["overfit"] is True
    assert sec["after"]["instances"][t_id]["overfit"] is False
    change = sec["resolved_change"]
    assert (change["baseline_resolved"], change["injected_resolved"]) == (0, 1)
    assert (change["gained"], change["lost"], change["net_gain"], change["gained_ids"]) == (1, 0, 1, [t_id])
    assert sec["coverage"]["after"]["overfit"]["mean_coverage"] == pytest.approx(1.0)
    assert sec["coverage"]["after"]["not_overfit"]["mean_coverage"] == pytest.approx(4 / 4)
    assert sec["instances"][b_id]["stop_reason"] == "fail_to_pass"
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Test overfitting before and after refinement: critic" in markdown
    assert "net gain 1" in markdown
    assert "refinement" in report["definitions"]


def test_missing_coverage_in_the_test_interpreter_fails_clearly(tmp_path: Path) -> None:
    from coharden.overfit.reward import check_backend

    python = tmp_path / "python-without-coverage"
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(CoHardenError, match="--coverage-backend settrace"):
        check_backend(Settings(python=str(python)), "coverage")
    check_backend(Settings(python=str(python)), "settrace")  # the stdlib tracer needs nothing


def test_result_model_keeps_records_out_of_the_json() -> None:
    result = RefineResult(run="r", instance="i", stop_reason="fail_to_pass", initial_fix="", initial_test="",
                          fix="", test="")
    assert "records" not in result.model_dump()
