"""The imitation step's figures (per source, golden against itself, over-specification) on hand-made rows, and the
LLM operators' imitation figure end to end: recorded against the mock OpenAI-compatible server, then replayed
with the server off; without a model the study skips them and says why."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from tests.study.test_study import _study_data_dir
from typer.testing import CliRunner

from coharden.cli import app
from coharden.study.imitation_report import render_imitation
from coharden.study.imitation_summary import golden_vs_golden, imitating_operators, summarize_imitation

TESTS = ["golden", "Otter", "Otter++"]


def _mutant(mid: str, op: str, verdicts: tuple[str, str, str], source: str = "mechanical",
            copy: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"id": mid, "operator": op, "source": source,
                         "verdicts": dict(zip(TESTS, verdicts, strict=True))}
    if copy is not None:
        m["golden_copy"] = copy
    return m


def _row(iid: str, wrong: tuple[str, str, str], mutants: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"instance_id": iid, "tests": TESTS, "buggy": dict.fromkeys(TESTS, "FAIL"),
            "fixed": dict.fromkeys(TESTS, "PASS"), "wrong": dict(zip(TESTS, wrong, strict=True)), "mutants": mutants,
            "golden_copy": {"buggy": "FAIL", "fixed": "PASS", "wrong": wrong[0]}, **extra}


def test_imitation_per_source_golden_against_itself_and_over_specification() -> None:
    lax_wrong = ("FAIL", "PASS", "FAIL")  # Otter lets the wrong fix through
    rows = [
        _row("a-1", lax_wrong, [_mutant("narrowed_scope-1", "narrowed_scope", ("FAIL", "PASS", "FAIL"), copy="FAIL"),
                                _mutant("incomplete_fix-1", "incomplete_fix", ("FAIL", "FAIL", "FAIL"), copy="FAIL"),
                                _mutant("vanilla-1", "vanilla", ("FAIL", "FAIL", "FAIL"), "llm", copy="FAIL")],
             llm_pool={"model": "m", "complete": True, "per_operator": {"vanilla": {}}}, pool={"dropped": {}}),
        # the golden copy disagrees with the golden test on one mutant: beta = 1 on this instance
        _row("b-2", lax_wrong, [_mutant("token_revert-1", "token_revert", ("PASS", "PASS", "PASS"), copy="PASS"),
                                _mutant("caller_patch-1", "caller_patch", ("FAIL", "FAIL", "FAIL"), copy="PASS"),
                                _mutant("vanilla-1", "vanilla", ("FAIL", "PASS", "FAIL"), "llm", copy="FAIL")],
             llm_pool={"model": "m", "complete": True, "per_operator": {"vanilla": {}}}, pool={"dropped": {}}),
    ]
    assert imitating_operators(rows[0]) == {"narrowed_scope": ["narrowed_scope-1"]}
    assert imitating_operators(rows[1], "llm") == {"vanilla": ["vanilla-1"]}
    fixes = [{"instance_id": "a-1", "kind": "correct", "fix_id": "alt-1",
              "verdicts": {"golden": {"outcome": "PASS"}, "Otter": {"outcome": "PASS"},
                           "Otter++": {"outcome": "FAIL"}}}]
    ops = ["incomplete_fix", "narrowed_scope", "token_revert", "caller_patch"]
    summary = summarize_imitation(rows, ops, tau=0.202, fix_rows=fixes)
    assert summary["overall"].text().startswith("1/2")
    assert summary["per_operator"]["narrowed_scope"].hits == 1
    assert summary["llm"]["overall"].hits == 1  # the LLM mutant imitates b-2's wrong fix, not a-1's
    assert summary["llm"]["either"].hits == 2
    # validity: on the mechanical pool only (the LLM mutant of b-2 is not part of it)
    classes = {(t["instance_id"], t["system"]): t["test_class"] for t in summary["tests"]}
    # narrowed_scope-1: Otter passes, golden fails; 1 of 2 (and 0 of 2) of a spent pool decide nothing
    assert classes[("a-1", "Otter")] == "Borderline"
    assert classes[("a-1", "Otter++")] == "Borderline"
    over = summary["over_specification"]
    assert (over["pairs"], over["fixes"], over["correct_fixes"]) == (2, 1, 1)
    assert [(p["system"], p["test_class"]) for p in over["rejecting"]] == [("Otter++", "Borderline")]
    gvg = summary["golden_vs_golden"]
    assert (gvg["instances"], gvg["ok"], gvg["admissible"]) == (2, 1, 6)
    (broken,) = gvg["broken"]
    assert broken["instance_id"] == "b-2"
    assert broken["broken"] == [{"id": "caller_patch-1", "operator": "caller_patch", "source": "mechanical",
                                 "cell": "beta", "copy": "PASS", "golden": "FAIL"}]
    text = "\n".join(render_imitation(summary, ops, 3))
    assert "beta = gamma = 0 (and the copy F->P) on 1/2 instances, 6 admissible mutants." in text
    assert "- b-2: caller_patch-1 (caller_patch, mechanical): beta, copy PASS, golden FAIL" in text
    assert "### LLM operators (m), the same figure" in text
    assert "Otter++ (Borderline) rejects alt-1" in text


def test_validity_per_pool_takes_its_classes_from_the_laxity_interval() -> None:
    """Classes come from the laxity's exact interval, whether or not every mutant the operators gave ran (a
    census is said, and is still a sample of the wrong fixes: issue 50); the validity figure is given for the
    mechanical pool, the LLM pool alone and both pooled, each with its own classes."""
    accepts = ("FAIL", "PASS", "FAIL")  # Otter lets the wrong fix through, Otter++ does not
    mechanical = [_mutant("narrowed_scope-1", "narrowed_scope", ("FAIL", "PASS", "FAIL")),
                  _mutant("incomplete_fix-1", "incomplete_fix", ("FAIL", "FAIL", "FAIL"))]
    llm = [_mutant(f"vanilla-{i}", "vanilla", ("FAIL", "PASS", "PASS"), "llm") for i in range(1, 5)]
    pool = {"model": "m", "complete": True, "per_operator": {"vanilla": {}}}
    census = _row("a-1", accepts, [*mechanical, *llm], llm_pool=pool, pool={"dropped": {}})
    sampled = _row("b-2", accepts, [*mechanical, *llm], llm_pool=pool,
                   pool={"dropped": {"narrowed_scope": {"over_budget": 4}}})
    summary = summarize_imitation([census, sampled], ["narrowed_scope", "incomplete_fix"], tau=0.202)
    mech = {(t["instance_id"], t["system"]): t for t in summary["tests"]}
    assert (mech[("a-1", "Otter")]["test_class"], mech[("a-1", "Otter")]["census"]) == ("Borderline", True)
    assert mech[("a-1", "Otter")]["interval"] == mech[("b-2", "Otter")]["interval"]  # census or not: one interval
    assert mech[("b-2", "Otter")]["test_class"] == "Borderline"  # 1 of 2 sampled: [0.013, 0.987] straddles tau
    low, high = mech[("b-2", "Otter")]["interval"]
    assert low < 0.202 < high
    assert mech[("a-1", "Otter++")]["test_class"] == "Borderline"  # 0 of 2 of a spent pool: [0, 0.84]
    assert mech[("b-2", "Otter++")]["test_class"] == "Borderline"  # 0 of 2 sampled: [0, 0.84]
    figures = summary["llm"]
    only = {(t["instance_id"], t["system"]): t for t in figures["tests_llm"]}
    # 4 of 4 LLM mutants let through by both system tests: Lax on either instance ([0.40, 1] lies above tau)
    assert {t["test_class"] for t in only.values()} == {"Lax"}
    assert not any(t["census"] for t in only.values())
    assert only[("a-1", "Otter++")]["accepts"] is False
    assert (figures["validity_llm"].n, figures["validity_llm"].per_class["Lax"].hits) == (4, 2)
    assert figures["validity_mechanical"].n == 4
    assert "Borderline" in figures["validity_mechanical"].per_class
    mixed = {(t["instance_id"], t["system"]): t for t in figures["tests_mixed"]}
    assert mixed[("a-1", "Otter")]["census"] is False  # LLM mutants in the pool: a sample
    assert mixed[("a-1", "Otter")]["laxity"] == 5 / 6
    text = "\n".join(render_imitation(summary, ["narrowed_scope", "incomplete_fix"], 3))
    assert "| LLM pool, per test | 2/4" in text
    assert "| b-2 | Otter | Borderline | 0.50 [0.01, 0.99] |" in text
    assert "| a-1 | Otter | Lax 1.00 [0.40, 1.00] | Lax 0.83 [0.36, 1.00] | accepts |" in text
    assert "| a-1 | Otter | Borderline | 0.50 [0.01, 0.99] |" in text  # the census's interval is shown too
    # a test graded on few of the census's mutants (it timed out on the others) is not measured exactly: 1 of 10
    timed_out = [_mutant(f"token_revert-{i}", "token_revert", ("FAIL", "TIMEOUT", "FAIL")) for i in range(1, 10)]
    partial = _row("c-3", accepts, [*timed_out, _mutant("token_revert-10", "token_revert", ("FAIL", "FAIL", "FAIL"))],
                   pool={"dropped": {}})
    tests = summarize_imitation([partial], ["token_revert"], tau=0.202)["tests"]
    (otter,) = [t for t in tests if t["system"] == "Otter"]
    assert (otter["census"], otter["test_class"]) == (False, "Borderline")
    unknown = {k: v for k, v in census.items() if k != "pool"}  # no pool summary: not known to be a census
    assert not summarize_imitation([unknown], ["narrowed_scope"], tau=0.202)["tests"][0]["census"]


def test_golden_against_itself_flags_a_copy_that_is_not_fail_to_pass() -> None:
    row = _row("c-3", ("FAIL", "FAIL", "FAIL"), [])
    row["golden_copy"]["buggy"] = "PASS"
    assert golden_vs_golden([row])["broken"][0]["copy_fail_to_pass"] is False
    assert golden_vs_golden([{k: v for k, v in row.items() if k != "golden_copy"}])["instances"] == 0


# --- the LLM operators, end to end ---------------------------------------------------------------------------

KEY_VAR = "COHARDEN_TEST_LLM_KEY"
MODEL = "openai/gpt-4o-mini"
#: the wrong fix itself, written as SEARCH/REPLACE blocks against the fixed code
REPLY = """throttle/limiter.py
```python
<<<<<<< SEARCH
    return [t for t in history if t > cutoff]
=======
    return [t for t in history if t >= cutoff]
>>>>>>> REPLACE
<<<<<<< SEARCH
    if len(recent) < limit:
        return 0
    # the oldest of the last `limit` requests has to expire first
    return recent[-limit] + window - now
=======
    if len(recent) <= limit:
        return 0
    return recent[-limit - 1] + window - now
>>>>>>> REPLACE
```
Summary: only is_allowed is fixed
"""


def _run(data_dir: Path, repos: Path, store: Path, mutator: Any) -> dict[str, Any]:
    """The verify and imitation phases on the example instance (one operator, one mutant of it, so the run is
    short), then the report's summary."""
    from coharden.config import Settings
    from coharden.execution.store import Store
    from coharden.schema.mpe_config import MPEConfig
    from coharden.schema.mutant import Operator
    from coharden.study.data import StudySource, load_data
    from coharden.study.real_bugs import RealBugsStudy, StudyConfig
    from coharden.study.report import write_report

    settings = Settings(repos_dir=repos, store=store, cache_dir=store.parent / "cache", timeout=60, workers=1)
    data = load_data(StudySource(data_dir, python_version=".".join(map(str, sys.version_info[:3]))),
                     settings.tests.test_patterns)
    config = StudyConfig(workers=1, bytecode=[], mpe=MPEConfig(per_operator=1, operators=[Operator.INCOMPLETE_FIX]))
    with RealBugsStudy(data, settings, Store(store), config, mutator) as study:
        rows = study.run(phases=("verify", "imitation"))
    summary = write_report(study, rows, store.parent / f"out-{store.stem}")
    return {"rows": rows, "summary": summary, "report": (store.parent / f"out-{store.stem}" / "real_bugs_report.md")
            .read_text()}


@pytest.mark.slow
def test_study_llm_imitation_recorded_then_replayed(tmp_path: Path, mock_llm: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from coharden.llm import CacheMode, CallStore, LLMClient, LLMConfig
    from coharden.mutation.llm_operators import LLMMutator, LLMMutatorSettings

    repos = tmp_path / "repos"
    repos.mkdir()
    data = _study_data_dir(tmp_path, repos)
    monkeypatch.setenv(KEY_VAR, "sk-test-123")
    server = mock_llm([{"reply": REPLY, "usage": {"prompt_tokens": 100, "completion_tokens": 50}}])
    calls = tmp_path / "calls.sqlite"

    def mutator(base_url: str, mode: CacheMode) -> LLMMutator:
        config = LLMConfig.model_validate({"model": MODEL, "api_base": base_url, "api_key_env": KEY_VAR,
                                           "max_tokens": 512, "timeout": 5.0, "max_retries": 1})
        return LLMMutator(LLMClient(config, store=CallStore(calls), mode=mode), LLMMutatorSettings(samples=1))

    recorded = _run(data, repos, tmp_path / "a.sqlite", mutator(server.base_url, CacheMode.AUTO))
    (row,) = recorded["rows"]["imitation"]
    assert {m["source"] for m in row["mutants"]} == {"mechanical", "llm"}
    assert row["llm_pool"]["complete"]
    figure = recorded["summary"]["imitation"]["llm"]
    assert figure["overall"]["hits"] == 1  # the LLM mutant is the wrong fix itself: the same signature
    assert figure["model"] == MODEL
    assert "### LLM operators (openai/gpt-4o-mini), the same figure" in recorded["report"]
    assert "LLM operators skipped" not in recorded["report"]
    seen = len(server.requests)
    assert seen >= 5  # one call per LLM operator at least
    server.stop()

    # a fresh result store, the same LLM call store, the server off: the figure comes from the recorded replies
    replayed = _run(data, repos, tmp_path / "b.sqlite", mutator("http://127.0.0.1:9/v1", CacheMode.REPLAY))
    again = replayed["summary"]["imitation"]["llm"]
    assert (again["overall"], again["per_operator"]) == (figure["overall"], figure["per_operator"])
    (row_again,) = replayed["rows"]["imitation"]
    assert [m["patch_sha"] for m in row_again["mutants"]] == [m["patch_sha"] for m in row["mutants"]]

    # without a mutator the imitation step is mechanical and the report says why the LLM operators are absent
    plain = _run(data, repos, tmp_path / "a.sqlite", None)
    assert "llm" not in plain["summary"]["imitation"]
    assert "LLM operators skipped: no model configured" in plain["report"]


def test_study_cli_says_why_llm_operators_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    data = _study_data_dir(tmp_path, repos)
    monkeypatch.delenv("COHARDEN_LLM_MODEL", raising=False)
    base = ["study", "real-bugs", "--data", str(data), "--repos", str(repos), "--python", sys.executable,
            "--store", str(tmp_path / "s.sqlite"), "-o", str(tmp_path / "out"), "--report-only"]
    skipped = CliRunner().invoke(app, [*base, "--mutator", "mechanical,llm"])
    assert skipped.exit_code == 0, skipped.output
    assert "LLM operators skipped: no model configured (--model or $COHARDEN_LLM_MODEL)" in skipped.stderr
    quiet = CliRunner().invoke(app, base)
    assert quiet.exit_code == 0, quiet.output
    assert "LLM operators skipped" not in quiet.stderr
    bad = CliRunner().invoke(app, [*base, "--mutator", "mechanical,gpt"])
    assert bad.exit_code == 2
    assert "--mutator" in bad.stderr
