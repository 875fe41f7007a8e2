"""``coharden suite``: whole-module mutants, the kill oracle, the add-only guard, critic rounds against the mock LLM
server, arms x replicates with the cluster bootstrap, the pre-registration, and the CLI.

Everything runs for real: pytest through the fork server on a copy of ``examples/suite`` and the LLM client
through litellm and HTTP to an in-process :class:`MockLLMServer` with scripted replies. To keep the file fast the
oracle runs a fixed set of 11 mutants of ``intervals.py`` (2 killed by the seed tests, 9 survivors), and all runs
share one result store, so identical (mutant, suite) runs are executed once.
"""

from __future__ import annotations

import json
import random
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.execution.pytest_results import Case, PytestRun
from coharden.execution.store import Store
from coharden.llm import CostOverride, LLMClient, LLMConfig, MockLLMServer
from coharden.schema.verdict import TestStatus
from coharden.suite.compare import (
    Arm,
    CompareDesign,
    cluster_bootstrap_ci,
    paired_bootstrap_diff_ci,
    percentile,
    ratio,
    run_compare,
)
from coharden.suite.critic import critic_messages, shown_mutants
from coharden.suite.guard import _classify, _existing, apply_reply, extract_code
from coharden.suite.loop import (
    HardeningConfig,
    HardeningStart,
    Replicate,
    Round0,
    build_round0,
    evaluate_round0,
    harden,
)
from coharden.suite.operators import ModuleMutant, generate_mutants, mutmut_available, select_mutants
from coharden.suite.prereg import default_hypotheses, digest, load_hypotheses, preregister, verify
from coharden.suite.runner import KillOracle, MutantStatus, mutant_status

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "suite"
MODULE = EXAMPLE / "intervals.py"
SEED_TESTS = (EXAMPLE / "test_intervals.py").read_text()
KEY_VAR = "COHARDEN_TEST_LLM_KEY"
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
PRICE = CostOverride(input_per_token=1e-6, output_per_token=2e-6)
CALL_COST = 1000 * 1e-6 + 100 * 2e-6  # 0.0012 USD per scripted reply

#: days (m0007 +, m0008 None), contains (m0011..m0013), overlaps or (m0016), merge (m0033, m0037: killed by
#: the seed tests), format_interval (m0080 !=, m0081/m0082 None)
SUBSET = ["m0007", "m0008", "m0011", "m0012", "m0013", "m0016", "m0033", "m0037", "m0080", "m0081", "m0082"]
SURVIVORS0 = [m for m in SUBSET if m not in ("m0033", "m0037")]

IMPORTS = "from datetime import date\n\nfrom intervals import Interval, format_interval, merge, parse\n"
TEST_DAYS = """
def test_days():
    assert Interval(date(2024, 1, 1), date(2024, 1, 4)).days == 3
"""
TEST_CONTAINS_END = """
def test_contains_excludes_end():
    iv = Interval(date(2024, 1, 1), date(2024, 1, 4))
    assert iv.contains(date(2024, 1, 4)) is False
"""
TEST_FORMAT_DAY = """
def test_format_one_day():
    assert format_interval(parse("2024-01-01")) == "2024-01-01"
"""
TEST_MERGE_EMPTY = """
def test_merge_empty():
    assert merge([]) == []
"""
TEST_FAILS_ON_ORIGINAL = """
def test_format_range_wrong():
    assert format_interval(parse("2024-01-01..2024-01-03")) == "wrong"
"""
EDIT_EXISTING = """
def test_merge_overlapping():
    assert merge([]) == []
"""


def reply(*tests: str, imports: str = IMPORTS) -> str:
    body = imports + "".join("\n\n" + textwrap.dedent(t).strip() + "\n" for t in tests)
    return f"Here are new tests.\n\n```python\n{body}```\n"


def llm_config(base_url: str, model: str, **overrides: Any) -> LLMConfig:
    return LLMConfig.model_validate({"model": model, "api_base": base_url, "api_key_env": KEY_VAR,
                                     "max_tokens": 2000, "timeout": 10.0, "max_retries": 0,
                                     "cost_overrides": {model: PRICE}, **overrides})


def rule(model: str, text: str, **kw: Any) -> dict[str, Any]:
    return {"match": {"model": model}, "reply": text, "usage": USAGE, "times": 1, **kw}


# --- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mutants() -> list[ModuleMutant]:
    found = {m.id: m for m in generate_mutants(MODULE.read_text(), "intervals.py")}
    return [found[i] for i in SUBSET]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store(tmp_path_factory.mktemp("suite-store") / "store.sqlite")


@pytest.fixture(scope="module")
def oracle(store: Store) -> Iterator[KillOracle]:
    with KillOracle(MODULE, Settings(timeout=60), store=store, workers=2) as o:
        yield o


@pytest.fixture(scope="module")
def round0(oracle: KillOracle, mutants: list[ModuleMutant]) -> Round0:
    return evaluate_round0(oracle, mutants, SEED_TESTS)


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-test")


# --- operators ---------------------------------------------------------------------------------------------


def test_builtin_operators_cover_the_whole_module() -> None:
    source = MODULE.read_text()
    found = generate_mutants(source, "intervals.py")
    assert {m.operator for m in found} == {"behavior_substitution", "statement_deletion", "return_value"}
    assert len({m.sha256 for m in found}) == len(found)
    assert all(m.source != source and m.diff.startswith("--- a/intervals.py") for m in found)
    lines = {m.line for m in found}
    assert min(lines) < 30
    assert max(lines) > 95
    assert [m.id for m in generate_mutants(source, "intervals.py")] == [m.id for m in found]  # stable ids
    by_id = {m.id: m for m in found}
    assert by_id["m0008"].description == "return (self.end - self.start).days -> return None"
    assert "+            pass" in by_id["m0006"].diff


def test_pragma_no_mutate_and_operator_choice() -> None:
    source = "def f(a, b):\n    return a + b  # pragma: no mutate\n\n\ndef g(a):\n    x = a * 2\n    return x\n"
    found = generate_mutants(source, "m.py")
    assert found
    assert all(m.line >= 5 for m in found)
    only = generate_mutants(source, "m.py", operators=["statement_deletion"])
    assert [m.description for m in only] == ["delete `x = a * 2`"]
    with pytest.raises(CoHardenError, match="unknown"):
        generate_mutants(source, "m.py", operators=["nope"])
    assert [m.id for m in select_mutants(found, 2, seed=1)] == [m.id for m in select_mutants(found, 2, seed=1)]
    assert len(select_mutants(found, 2, seed=1)) == 2


@pytest.mark.skipif(not mutmut_available(), reason="mutmut is not installed (pip install 'coharden[mutmut]')")
def test_mutmut_engine_generates_whole_module_mutants() -> None:
    source = MODULE.read_text()
    found = generate_mutants(source, "intervals.py", engine="mutmut")
    assert len(found) > 20
    assert {m.operator for m in found} == {"mutmut"}
    compile_all = [compile(m.source, "intervals.py", "exec") for m in found]
    assert len(compile_all) == len(found)
    assert any("self.end <= self.start" in m.source for m in found)  # mutmut's < -> <=


# --- the oracle --------------------------------------------------------------------------------------------


def _run(rc: int | None, cases: list[Case], *, timed_out: bool = False, junit_ok: bool = True) -> PytestRun:
    return PytestRun(returncode=rc, timed_out=timed_out, duration=0.1, output="", cases=cases, junit_ok=junit_ok)


def test_classify_fixed_vocabulary() -> None:
    ok = Case("coharden_suite.test_m", "test_a", TestStatus.PASSED)
    bad = Case("coharden_suite.test_m.TestC", "test_b", TestStatus.FAILED)
    collection = Case("", "coharden_suite.test_m", TestStatus.ERROR)
    assert mutant_status(_run(0, [ok])).status is MutantStatus.SURVIVED
    killed = mutant_status(_run(1, [ok, bad]))
    assert (killed.status, killed.failed, killed.passed) == (MutantStatus.KILLED, ["TestC::test_b"], ["test_a"])
    assert mutant_status(_run(1, [collection])).failed == ["<collection>"]
    assert mutant_status(_run(None, [], timed_out=True)).status is MutantStatus.TIMEOUT
    assert mutant_status(_run(-24, [])).status is MutantStatus.TIMEOUT  # SIGXCPU
    assert mutant_status(_run(3, [ok])).status is MutantStatus.ERROR  # pytest internal error is never a kill
    assert mutant_status(_run(1, [], junit_ok=False)).status is MutantStatus.ERROR
    assert mutant_status(_run(5, [])).status is MutantStatus.ERROR


def test_round0_baseline_forced_fail_and_verdicts(round0: Round0, oracle: KillOracle) -> None:
    assert round0.ids(MutantStatus.KILLED) == ["m0033", "m0037"]
    assert round0.ids(MutantStatus.SURVIVED) == SURVIVORS0
    assert round0.results["m0033"].failed == ["test_merge_overlapping"]
    assert 0 < oracle.mutant_timeout <= 60
    assert MODULE.read_text() == oracle.original  # the user's module is never written


def test_baseline_and_forced_fail_fail_closed(oracle: KillOracle) -> None:
    with pytest.raises(CoHardenError, match="baseline"):
        oracle.baseline(SEED_TESTS + "\n\ndef test_broken():\n    assert False\n")
    with pytest.raises(CoHardenError, match="forced-fail"):
        oracle.forced_fail("def test_nothing():\n    assert 1 + 1 == 2\n")


# --- the guard (pure parts) --------------------------------------------------------------------------------


def test_extract_code_and_whole_reply_rejections(oracle: KillOracle) -> None:
    assert extract_code("text\n```python\nx = 1\n```\nmore\n```py\ny = 2\n```") == "x = 1\n\n\ny = 2\n"
    assert extract_code("def test_a():\n    pass\n") == "def test_a():\n    pass\n"
    assert extract_code("```diff\n-a\n+b\n```") == ""
    assert apply_reply("no code here ```", SEED_TESTS, oracle, header="h").round_rejected == "no_code"
    bad = apply_reply("```python\ndef test_x(:\n```", SEED_TESTS, oracle, header="h")
    assert (bad.round_rejected, bad.rejected, bad.suite) == ("syntax_error", {"syntax_error": 1}, SEED_TESTS)


def test_guard_classifies_every_kind_of_addition() -> None:
    code = textwrap.dedent("""\
        import pytest
        from datetime import date
        from intervals import parse
        from datetime import datetime as date
        import intervals

        def test_parse_range():
            assert True

        def test_merge_overlapping():
            a = 1
            b = 2
            assert merge([]) == []

        def test_new():
            assert parse("2024-01-01")

        @pytest.fixture(autouse=True)
        def everywhere():
            yield

        def setup_module():
            pass

        intervals.merge = lambda xs: xs
        pytestmark = pytest.mark.skip
        CONST = 3

        def test_twice():
            pass

        def test_twice():
            pass

        class TestMore:
            def test_m(self):
                assert True
        """)
    import ast

    tests, support, rejections, ignored = _classify(ast.parse(code).body, _existing(SEED_TESTS), code)
    assert [n for n, _ in tests] == ["test_new", "TestMore"]
    reasons = {r.name: r.reason for r in rejections}
    assert reasons["test_parse_range"] == "edits_existing_test"
    assert reasons["test_merge_overlapping"] == "edits_existing_test"
    assert reasons["date"] == "rebinds_existing_name"  # `from datetime import datetime as date`
    assert reasons["everywhere"] == "affects_existing_tests"
    assert reasons["setup_module"] == "affects_existing_tests"
    assert reasons["pytestmark"] == "affects_existing_tests"
    assert reasons["test_twice"] == "duplicate_name"
    assert "module_level_code" in reasons.values()  # intervals.merge = ... (monkeypatching the module)
    assert any("CONST = 3" in s for s in support)
    assert any("import intervals" in s for s in support)
    assert ignored == 2  # `from datetime import date` and `from intervals import parse` repeat the suite's imports


# --- critic rounds against the mock server -----------------------------------------------------------------


def test_critic_round_keeps_killing_test_and_rejects_bad_ones(oracle: KillOracle, mutants: list[ModuleMutant],
                                                             round0: Round0, api_key: None) -> None:
    scripted = reply(TEST_FORMAT_DAY, TEST_FAILS_ON_ORIGINAL, EDIT_EXISTING)
    with MockLLMServer([rule("critic-a", scripted)]) as server:
        client = LLMClient(llm_config(server.base_url, "openai/critic-a"))
        run = harden(HardeningStart(oracle, mutants, round0), Replicate(client, "a"),
                     HardeningConfig(max_rounds=1, max_shown=5, seed=0))
        prompt = server.requests[0].messages[1]["content"]
    (first,) = run.rounds
    assert (run.complete, run.stop_reason) == (True, "max_rounds")
    assert first.guard is not None
    assert first.guard.accepted == ["test_format_one_day"]
    assert first.guard.rejected == {"edits_existing_test": 1, "fails_on_original": 1}
    # format_interval(one day) goes through Interval.days: it also kills the two `days` mutants
    assert first.killed == ["m0007", "m0008", "m0080", "m0081"]
    assert first.kills_by_test == {"test_format_one_day": ["m0007", "m0008", "m0080", "m0081"]}
    assert run.killed == first.killed
    assert run.survivors == ["m0011", "m0012", "m0013", "m0016", "m0082"]
    assert run.kill_rate == pytest.approx(4 / 9)
    # the reply is added, never rewrites: the existing test is untouched, the rejected ones are absent
    assert run.final_suite.startswith(SEED_TESTS.rstrip())
    assert "def test_format_one_day" in run.final_suite
    assert "wrong" not in run.final_suite
    assert run.final_suite.count("def test_merge_overlapping") == 1
    # the critic saw 5 of the 9 survivors as unified diffs
    assert prompt.count("## Mutant m") == 5
    assert "(5 of 9 shown)" in prompt


def test_provider_error_and_truncation_stop_the_run_fail_closed(oracle: KillOracle, mutants: list[ModuleMutant],
                                                                round0: Round0, api_key: None) -> None:
    rules = [rule("critic-t", "def test_", finish_reason="length")]
    with MockLLMServer(rules) as server:
        start = HardeningStart(oracle, mutants, round0)
        truncated = harden(start, Replicate(LLMClient(llm_config(server.base_url, "openai/critic-t")), "t"),
                           HardeningConfig(max_rounds=3))
        missing = harden(start, Replicate(LLMClient(llm_config(server.base_url, "openai/critic-t")), "t", 1),
                         HardeningConfig(max_rounds=3))
    assert (truncated.complete, truncated.stop_reason) == (False, "llm_failure")
    assert truncated.failure is not None
    assert truncated.failure["kind"] == "truncated"
    assert truncated.usage()["cost_usd"] == pytest.approx(CALL_COST)  # paid for, accounted, not used
    assert truncated.final_suite == SEED_TESTS
    assert truncated.killed == []
    assert missing.failure is not None
    assert missing.failure["kind"] == "bad_request"  # the ErrorKind of the rejected request (no rule matched)


def test_critic_messages_show_survivor_diffs(mutants: list[ModuleMutant]) -> None:
    shown = shown_mutants(mutants, 3, "0:0:1")
    assert shown == shown_mutants(mutants, 3, "0:0:1")
    assert len(shown) == 3
    messages = critic_messages("intervals.py", MODULE.read_text(), SEED_TESTS, shown, len(mutants))
    text = messages[1]["content"]
    assert all(m.id in text and m.diff.strip() in text for m in shown)
    assert "import it as `intervals`" in text


def test_tester_writes_round0_under_the_guard(oracle: KillOracle, api_key: None) -> None:
    rules = [rule("tester", reply(TEST_DAYS, TEST_FAILS_ON_ORIGINAL)),
             rule("tester", "```python\ndef test_", finish_reason="length")]
    with MockLLMServer(rules) as server:
        client = LLMClient(llm_config(server.base_url, "openai/tester"))
        suite, record = build_round0(oracle, "", client)
        prompt = server.requests[0].messages[1]["content"]
        with pytest.raises(CoHardenError, match="truncated"):
            build_round0(oracle, SEED_TESTS, client, sample_index=1)
    assert record.role == "tester"
    assert record.guard is not None
    assert record.guard.accepted == ["test_days"]
    assert record.guard.rejected == {"fails_on_original": 1}
    assert "def test_days" in suite
    assert "def test_format_range_wrong" not in suite
    assert "intervals.py" in prompt
    assert "def split_weeks" in prompt
    with pytest.raises(CoHardenError, match="no round-0 suite"):
        build_round0(oracle, "", None)


# --- statistics ------------------------------------------------------------------------------------------


def test_cluster_bootstrap_matches_hand_computation() -> None:
    clusters = [(1, 4), (3, 4), (4, 4)]
    # random.Random(0).randrange(3), three per draw, draws in order:
    rng = random.Random(0)
    draws = [[rng.randrange(3) for _ in range(3)] for _ in range(5)]
    assert draws == [[1, 1, 0], [1, 2, 1], [1, 1, 1], [1, 2, 0], [2, 0, 1]]
    # pooled ratios (killed / 12): 7/12, 10/12, 9/12, 8/12, 8/12 -> sorted 7, 8, 8, 9, 10 (/12)
    # 2.5%: h = 4 * 0.025 = 0.1 -> 7/12 + 0.1 * (8/12 - 7/12) = 7.1/12
    # 97.5%: h = 4 * 0.975 = 3.9 -> 9/12 + 0.9 * (10/12 - 9/12) = 9.9/12
    lo, hi = cluster_bootstrap_ci(clusters, n_boot=5, seed=0)  # type: ignore[misc]
    assert lo == pytest.approx(7.1 / 12)
    assert hi == pytest.approx(9.9 / 12)
    assert ratio(clusters) == pytest.approx(8 / 12)
    assert percentile([0.1, 0.2, 0.3, 0.4], 0.5) == pytest.approx(0.25)
    assert cluster_bootstrap_ci([(2, 9)] * 4, n_boot=50, seed=3) == pytest.approx((2 / 9, 2 / 9))
    assert cluster_bootstrap_ci([], seed=0) is None
    assert cluster_bootstrap_ci([(0, 0)], seed=0) is None
    # the paired difference against an all-zero control uses the same draws: it equals the arm's interval
    assert paired_bootstrap_diff_ci(clusters, [(0, 4)] * 3, n_boot=5, seed=0) == pytest.approx((lo, hi))


# --- compare: arms x replicates from a frozen round 0 ------------------------------------------------------


def test_compare_arms_over_replicates(oracle: KillOracle, mutants: list[ModuleMutant], round0: Round0,
                                      api_key: None) -> None:
    rules = [
        # arm a: replicate 0 kills 2 (days), replicate 1 kills 4 (days, contains), replicate 2 kills none
        rule("critic-a", reply(TEST_DAYS)),
        rule("critic-a", reply(TEST_DAYS, TEST_CONTAINS_END)),
        rule("critic-a", reply(TEST_MERGE_EMPTY)),
        # arm b: replicate 0 is truncated, replicate 1 kills 2 (days), replicate 2 kills 4 (format, days)
        rule("critic-b", "```python\ndef test_", finish_reason="length"),
        rule("critic-b", reply(TEST_DAYS)),
        rule("critic-b", reply(TEST_FORMAT_DAY)),
    ]
    with MockLLMServer(rules) as server:
        arms = [Arm("none"), Arm("a", llm_config(server.base_url, "openai/critic-a")),
                Arm("b", llm_config(server.base_url, "openai/critic-b"))]
        design = CompareDesign(arms, 3, HardeningConfig(max_rounds=1, max_shown=9, seed=7), n_boot=400)
        result = run_compare(HardeningStart(oracle, mutants, round0), design,
                             client_for=lambda arm: LLMClient(arm.llm) if arm.llm else None)
    s = result.summary
    assert (s["round0_killed"], s["round0_survivors"]) == (2, 9)
    none, a, b = s["arms"]["none"], s["arms"]["a"], s["arms"]["b"]

    assert (none["status"], none["kill_rate"], none["kill_rate_ci"]) == ("ok", 0.0, (0.0, 0.0))
    assert none["calls"] == 0
    assert none["cost_per_killed_usd"] is None

    assert a["status"] == "ok"
    assert [r["killed"] for r in a["per_replicate"]] == [2, 4, 0]
    assert [r["stop_reason"] for r in a["per_replicate"]] == ["max_rounds", "max_rounds", "no_new_kills"]
    assert a["kill_rate"] == pytest.approx(6 / 27)
    assert a["kill_rate_ci"] == pytest.approx(cluster_bootstrap_ci([(2, 9), (4, 9), (0, 9)], n_boot=400, seed=7))
    lo, hi = a["kill_rate_ci"]
    assert 0 <= lo <= 6 / 27 <= hi <= 4 / 9
    assert a["cost_usd"] == pytest.approx(3 * CALL_COST)
    assert a["cost_per_killed_usd"] == pytest.approx(3 * CALL_COST / 6)
    assert a["tokens"] == {"prompt": 3000, "completion": 300, "total": 3300}

    # the truncated replicate is reported for arm b and left out of its rate, not scored as zero kills
    assert (b["status"], b["complete_replicates"], b["truncated_replies"]) == ("incomplete", 2, 1)
    assert b["incomplete"][0]["replicate"] == 0
    assert b["incomplete"][0]["kind"] == "truncated"
    assert b["kill_rate"] == pytest.approx(6 / 18)
    assert b["kill_rate_ci"] == pytest.approx(cluster_bootstrap_ci([(2, 9), (4, 9)], n_boot=400, seed=7))
    assert b["cost_per_killed_usd"] == pytest.approx(3 * CALL_COST / 6)  # the truncated call was paid for
    assert s["complete"] is False

    diff_a = s["differences_to_control"]["a - none"]
    assert diff_a["difference"] == pytest.approx(6 / 27)
    assert diff_a["ci"] == pytest.approx(a["kill_rate_ci"])
    diff_b = s["differences_to_control"]["b - none"]
    assert diff_b["replicates"] == 2
    assert diff_b["difference"] == pytest.approx(6 / 18)
    # every arm started from the same frozen round 0
    assert {r.round0_sha256 for runs in result.runs.values() for r in runs} == {round0.sha256}


# --- pre-registration ----------------------------------------------------------------------------------------


def test_preregistration_is_hashed_stored_and_checked(tmp_path: Path, store: Store) -> None:
    config = {"arms": ["none", "a"], "replicates": 3, "seed": 0}
    hyps = default_hypotheses(["none", "a", "b"])
    assert len(hyps) == 3
    assert "'a'" in hyps[0]
    path = tmp_path / "prereg.json"
    record = preregister(path, config, hyps, store=store)
    assert record["sha256"] == digest(config, hyps)
    assert store.get_record("suite-prereg", record["sha256"])["config"] == config
    assert preregister(path, config, hyps)["sha256"] == record["sha256"]  # same plan: resumes
    with pytest.raises(CoHardenError, match="different pre-registration"):
        preregister(path, {**config, "replicates": 4}, hyps)
    tampered = json.loads(path.read_text())
    tampered["hypotheses"][0] = "H1: something else"
    path.write_text(json.dumps(tampered))
    with pytest.raises(CoHardenError, match="modified"):
        verify(path)
    text = tmp_path / "h.txt"
    text.write_text("# comment\nH1: a beats none\n\nH2: b beats none\n")
    assert load_hypotheses(text) == ["H1: a beats none", "H2: b beats none"]


# --- CLI -----------------------------------------------------------------------------------------------------


def test_cli_mutants_run_and_compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-test")
    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", KEY_VAR)
    runner = CliRunner()
    store = tmp_path / "store.sqlite"
    common = ["--max-mutants", "5", "-c", "mpe.seed=1", "-c", f"store={store}"]

    mutants_out = runner.invoke(app, ["suite", "mutants", str(MODULE), "--tests", str(EXAMPLE / "test_intervals.py"),
                                      *common, "--json"])
    assert mutants_out.exit_code == 0, mutants_out.output
    data = json.loads(mutants_out.stdout)
    assert data["total"] == 5
    assert sum(data["counts"].values()) == 5
    survivors = [m for m in data["mutants"] if m["status"] == "survived"]
    assert survivors
    assert all(m["diff"].startswith("--- a/intervals.py") for m in survivors)

    rules = [{"match": {"model": "critic-a"}, "reply": reply(TEST_DAYS, TEST_FORMAT_DAY), "usage": USAGE}]
    with MockLLMServer(rules) as server:
        out = tmp_path / "run"
        ran = runner.invoke(app, ["suite", "run", str(MODULE), "--tests", str(EXAMPLE / "test_intervals.py"),
                                  "--critic-model", "openai/critic-a", "-c", f"llm.api_base={server.base_url}",
                                  "--max-rounds", "2", "--output", str(out), *common])
        assert ran.exit_code == 0, ran.output
        assert (out / "round0.py").read_text() == SEED_TESTS
        result = json.loads((out / "run.json").read_text())
        assert result["run"]["complete"] is True
        assert "test_days" in (out / "final_suite.py").read_text()

        arms = tmp_path / "arms.yaml"
        arms.write_text(f"- name: none\n- name: a\n  model: openai/critic-a\n  api_base: {server.base_url}\n"
                        f"  api_key_env: {KEY_VAR}\n  cost_overrides:\n    openai/critic-a:\n"
                        "      input_per_token: 0.000001\n      output_per_token: 0.000002\n  max_tokens: 3000\n")
        cmp_out = tmp_path / "compare"
        compared = runner.invoke(app, ["suite", "compare", str(MODULE), "--round0", str(out / "round0.py"),
                                       "--arm", str(arms), "--replicates", "2", "--n-boot", "200", "--max-rounds", "1",
                                       "--output", str(cmp_out), *common])
        assert compared.exit_code == 0, compared.output
    summary = json.loads((cmp_out / "compare.json").read_text())
    prereg = json.loads((cmp_out / "prereg.json").read_text())
    assert summary["prereg_sha256"] == prereg["sha256"]
    assert prereg["config"]["round0_sha256"] == result["round0"]["sha256"]
    assert summary["arms"]["a"]["complete_replicates"] == 2
    assert summary["arms"]["a"]["status"] == "ok"
    assert summary["arms"]["a"]["cost_usd"] == pytest.approx(2 * CALL_COST)
    assert (cmp_out / "runs" / "a" / "rep1.json").is_file()

    # a changed plan in the same directory is refused before anything runs
    refused = runner.invoke(app, ["suite", "compare", str(MODULE), "--round0", str(out / "round0.py"),
                                  "--arms", str(arms), "--replicates", "3", "--max-rounds", "1", "--output",
                                  str(cmp_out), *common])
    assert refused.exit_code == 2
    assert "different pre-registration" in refused.output


@pytest.mark.skipif(__import__("shutil").which("bwrap") is None, reason="bwrap is not installed")
def test_suite_tests_run_in_the_sandbox(oracle: KillOracle, tmp_path: Path) -> None:
    """The suite's tests (an LLM writes some) get the executor's sandbox: nothing outside their worker copy."""
    outside = tmp_path / "outside.txt"
    suite = textwrap.dedent(f"""\
        def test_writes_outside():
            try:
                open({str(outside)!r}, "w").write("escaped")
            except OSError:
                pass
    """)
    result = oracle.run(MODULE.read_text(), suite, use_cache=False)
    assert result.passed == ["test_writes_outside"], result.reason
    assert not outside.exists()
