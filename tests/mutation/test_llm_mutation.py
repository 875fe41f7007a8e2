"""LLM mutant operators end to end: real client (litellm -> HTTP) against the in-process mock server, real git
repository, real pytest verdicts.

The project is a tiny ``clamp`` with a two-part fix (a range check and the upper bound); the golden test checks
both, the lax candidate only the upper bound. Each operator gets a scripted SEARCH/REPLACE reply.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import make_patch, make_repo
from typer.testing import CliRunner

from coharden.cli import app
from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.llm import Budget, CacheMode, CallStore, CostOverride, LLMClient, LLMConfig, MockLLMServer
from coharden.mpe.evaluate import MPERequest, MPEResult, evaluate
from coharden.mutation.context import FileChange, FixContext
from coharden.mutation.llm_edits import EditFormatError, apply_edit_blocks, parse_edit_blocks, reply_to_raw_mutant
from coharden.mutation.llm_operators import LLMMutator, LLMMutatorSettings, is_repetition
from coharden.mutation.llm_prompts import LLM_OPERATORS, build_messages, swap_tests
from coharden.mutation.pool import Pool, admit_llm
from coharden.schema.instance import Instance
from coharden.schema.matrix import TestClass
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Operator
from coharden.schema.testpatch import TestPatch

KEY_VAR = "COHARDEN_TEST_LLM_KEY"
MODEL = "openai/gpt-4o-mini"
#: 1 µUSD per prompt token, 2 µUSD per completion token; with the usage below every reply costs 1200 µUSD.
PRICE = CostOverride(input_per_token=1e-6, output_per_token=2e-6)
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
REPLY_COST = 1000 * 1e-6 + 100 * 2e-6

# --- the project ---------------------------------------------------------------------------------------------

BUGGY = '''\
"""Clamping numbers into a closed range."""


def clamp(x, lo, hi):
    """``x`` limited to the range [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return lo
    return x


def clamp_all(values, lo, hi):
    return [clamp(v, lo, hi) for v in values]
'''

FIXED = BUGGY.replace('''    """``x`` limited to the range [lo, hi]."""
    if x < lo:''', '''    """``x`` limited to the range [lo, hi]."""
    if lo > hi:
        raise ValueError(f"empty range: lo={lo} > hi={hi}")
    if x < lo:''').replace('''    if x > hi:
        return lo''', '''    if x > hi:
        return hi''')

TESTS = '''\
from rangekit.clamp import clamp, clamp_all


def test_inside():
    assert clamp(2, 0, 3) == 2


def test_below():
    assert clamp(-1, 0, 3) == 0
'''

GOLDEN_TESTS = "import pytest\n\n" + TESTS + '''

def test_above_and_empty_range():
    assert clamp(5, 0, 3) == 3
    assert clamp(10, 1, 7) == 7
    assert clamp_all([9, -2, 4], 0, 5) == [5, 0, 4]
    with pytest.raises(ValueError):
        clamp(1, 3, 0)
'''

LAX_TESTS = TESTS + '''

def test_above():
    assert clamp(5, 0, 3) == 3
'''

ISSUE = "clamp(5, 0, 3) returns 0 instead of 3, and clamp(1, 3, 0) with an empty range should raise ValueError."
CANDIDATE_NAME = "lax-candidate-7f3a"  # must never reach a prompt


def block(search: str, replace: str, path: str = "rangekit/clamp.py") -> str:
    return f"{path}\n```python\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"


CHECK = '''    if lo > hi:
        raise ValueError(f"empty range: lo={lo} > hi={hi}")'''

#: One scripted mutant per operator, with the cell it lands in for the lax candidate vs the golden test.
REPLIES: dict[Operator, tuple[str, str]] = {
    Operator.VANILLA: (block("    if x > hi:\n        return hi", "    if x > hi + 1:\n        return hi")
                       + "Summary: the upper bound is off by one", "alpha"),
    Operator.SYMPTOM_SUPPRESSION: (block(CHECK, "    if lo > hi:\n        lo, hi = hi, lo")
                                   + "Summary: swaps an empty range instead of rejecting it", "beta"),
    Operator.INCOMPLETE_FIX: (block(CHECK, "") + "Summary: fixes the upper bound only", "beta"),
    Operator.INPUT_SPECIFIC_SHORTCUT: (block("        return hi", "        return 3 if (lo, hi) == (0, 3) else lo")
                                       + "Summary: only the issue's example is fixed", "beta"),
    Operator.BEHAVIOR_SUBSTITUTION: (block(CHECK, CHECK.replace("ValueError", "TypeError"))
                                     + "Summary: raises TypeError", "beta"),
}


def rule(operator: Operator, reply: str, **extra: Any) -> dict[str, Any]:
    return {"match": f"Mutation operator: {operator}", "reply": reply, "usage": USAGE, **extra}


def all_rules(**overrides: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One rule per operator with its scripted reply; ``overrides[op]`` rules go first for that operator."""
    rules: list[dict[str, Any]] = []
    for op in LLM_OPERATORS:
        rules += overrides.get(op, [])
        rules.append(rule(op, REPLIES[op][0]))
    return rules


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-test-123")


@pytest.fixture
def serve(api_key: None, mock_llm):  # type: ignore[no-untyped-def]
    return mock_llm


def llm_config(base_url: str, **overrides: Any) -> LLMConfig:
    values: dict[str, Any] = {"model": MODEL, "api_base": base_url, "api_key_env": KEY_VAR, "max_tokens": 512,
                              "timeout": 5.0, "max_retries": 1, "retry_wait_s": 0.001, "retry_max_wait_s": 0.01,
                              "cost_overrides": {MODEL: PRICE}}
    values.update(overrides)
    return LLMConfig.model_validate(values)


class Project:
    """The clamp repository as an instance, with its golden and lax test patches."""

    def __init__(self, root: Path, settings: Settings) -> None:
        files = {"rangekit/__init__.py": "", "rangekit/clamp.py": BUGGY, "tests/__init__.py": "",
                 "tests/test_clamp.py": TESTS, "setup.cfg": "[tool:pytest]\n"}
        # contents are flush left, so conftest's dedent leaves them unchanged
        self.repo, self.base = make_repo(root, files)
        self.fix = make_patch(self.repo, {"rangekit/clamp.py": FIXED})
        self.golden = make_patch(self.repo, {"tests/test_clamp.py": GOLDEN_TESTS})
        self.lax = make_patch(self.repo, {"tests/test_clamp.py": LAX_TESTS})
        self.settings = settings
        self.instance = Instance(instance_id="rangekit-1", repo=str(self.repo), base_commit=self.base,
                                 problem_statement=ISSUE, patch=self.fix, test_patch=self.golden)

    def evaluate(self, mutator: LLMMutator | None, *, mechanical: bool = False, candidate: str = "lax",
                 **kw: Any) -> MPEResult:
        with InstanceExecutor(self.instance, self.repo, self.settings, Store(self.settings.store)) as ex:
            reference = ex.golden_test()
            cand = reference if candidate == "golden" else ex.test_patch(self.lax, name=CANDIDATE_NAME)
            # every mutant counts alone: these tests check the LLM pool's mutants one by one (behaviours are
            # checked in tests/test_plausible_pool.py)
            kw.setdefault("behaviours", False)
            config = MPEConfig(mechanical=mechanical, llm=mutator.client.config.model if mutator else None, **kw)
            return evaluate(ex, MPERequest(self.fix, cand, reference, config), llm_mutator=mutator)


@pytest.fixture
def project(tmp_path: Path, settings: Settings) -> Project:
    return Project(tmp_path / "rangekit", settings)


def mutator(base_url: str, *, store: CallStore | None = None, mode: CacheMode = CacheMode.AUTO,
            budget: Budget | None = None, config: dict[str, Any] | None = None, **settings: Any) -> LLMMutator:
    client = LLMClient(llm_config(base_url, **(config or {})), store=store, mode=mode, budget=budget)
    return LLMMutator(client, LLMMutatorSettings(**{"samples": 1, **settings}))


def llm_requests(server: MockLLMServer, operator: Operator) -> list[Any]:
    return [r for r in server.requests if f"Mutation operator: {operator}" in r.messages[-1]["content"]]


# --- end to end ------------------------------------------------------------------------------------------------


def test_each_operator_mutant_is_admitted_and_evaluated(serve: Any, project: Project) -> None:
    server = serve(all_rules())
    result = project.evaluate(mutator(server.base_url))

    assert result.fail_to_pass
    assert result.pool_complete
    assert result.pool_incomplete_reason is None
    assert result.mutators == ["llm"]
    by_op = {r.mutant.operator: r for r in result.mutants}
    assert set(by_op) == set(LLM_OPERATORS)
    for op, (_, expected_cell) in REPLIES.items():
        mr = by_op[op]
        assert mr.mutant.source == "llm"
        assert mr.mutant.id == f"llm-{op}-1"
        assert mr.cell is not None, (op, mr.candidate.short(), mr.reference.short())
        assert mr.cell.value == expected_cell, (op, mr.candidate.short(), mr.reference.short())
        assert mr.mutant.location.startswith("rangekit/clamp.py:")
        # the mutant is a patch against the BUGGY base, like a mechanical one
        assert mr.mutant.patch.startswith("diff --git a/rangekit/clamp.py b/rangekit/clamp.py")
        meta = mr.mutant.meta
        assert len(meta["prompt_hash"]) == 64
        assert len(meta["request_hash"]) == 64
        assert (meta["prompt_tokens"], meta["completion_tokens"]) == (1000, 100)
        assert meta["cost_usd"] == pytest.approx(REPLY_COST)
        assert (meta["sample_index"], meta["attempts"], meta["model"]) == (0, 1, MODEL)
    assert by_op[Operator.SYMPTOM_SUPPRESSION].mutant.description == "swaps an empty range instead of rejecting it"
    assert result.matrix.counts() == {"alpha": 1, "beta": 4, "gamma": 0, "delta": 0}
    assert result.laxity == pytest.approx(0.8)
    assert result.test_class is TestClass.LAX

    data = result.to_json(timings=False)
    assert data["per_source"]["llm"]["total"] == 5
    assert data["llm_usage"]["per_source"]["llm"]["calls"] == 5
    assert data["llm_usage"]["per_source"]["llm"]["cost_usd"] == pytest.approx(5 * REPLY_COST)
    assert data["llm_usage"]["per_source"]["mechanical"]["calls"] == 0
    assert data["llm_usage"]["per_operator"]["vanilla"]["prompt_tokens"] == 1000
    assert data["llm_pool"]["per_operator"]["incomplete_fix"] == {
        "wanted": 1, "attempts": 1, "admitted": 1, "rejected": {}, "failed": {}, "skipped": 0, "shortfall": 0}
    assert "cache" not in data["llm_pool"]  # run-specific, dropped from reproducible output
    # existing fields keep their meaning
    assert data["per_operator"]["behavior_substitution"]["beta"] == 1
    assert data["matrix_counts"] == result.matrix.counts()


def test_the_golden_test_is_rigorous_against_the_llm_pool(serve: Any, project: Project) -> None:
    server = serve(all_rules())
    result = project.evaluate(mutator(server.base_url), candidate="golden")
    assert result.matrix.counts()["beta"] == 0
    # 0 of 5: the pool (every LLM mutant ran) is a sample of the wrong fixes, too small to decide
    assert result.test_class is TestClass.BORDERLINE
    assert result.undecided == "pool_too_small"


def test_prompt_shows_an_anonymous_pair_and_samples_differ(serve: Any, project: Project) -> None:
    server = serve(all_rules())
    result = project.evaluate(mutator(server.base_url, samples=2, seed=3))
    admitted = {r.mutant.id: r.mutant for r in result.mutants}
    requests = server.requests
    # every operator's second sample repeats the first reply: a duplicate, resampled up to 2 * (1 + 1) attempts
    assert len(requests) == 5 * 4
    assert {row["shortfall"] for row in result.llm_pool["per_operator"].values()} == {1}  # type: ignore[index]
    for request in requests:
        system, user = request.messages
        text = system["content"] + user["content"]
        assert CANDIDATE_NAME not in text
        assert "golden" not in text.lower()
        assert "candidate" not in text.lower()
        assert "reference" not in text.lower()
        assert "## Test 1" in text
        assert "## Test 2" in text
        assert project.lax in text
        assert project.golden in text
        assert ISSUE in text
        assert request.body["temperature"] == 1.0
    # the order is drawn per sample from the seed; meta records which test was shown first
    for mutant in admitted.values():
        meta = mutant.meta
        first = "reference" if swap_tests(3, mutant.operator, meta["sample_index"]) else "candidate"
        assert meta["test_order"][0] == first
    orders = {swap_tests(3, op, i) for op in LLM_OPERATORS for i in range(2)}
    assert orders == {True, False}
    # N samples of one operator are distinct requests (sample_index is part of the request hash)
    hashes = [s["request_hash"] for s in result.llm_pool["samples"] if s["request_hash"]]
    assert len(hashes) == len(set(hashes))


def test_reply_touching_a_test_file_is_rejected_and_resampled(serve: Any, project: Project) -> None:
    sneaky = block("def test_above():\n    assert clamp(5, 0, 3) == 3", "def test_above():\n    pass",
                   path="tests/test_clamp.py") + block("        return hi", "        return hi - 0")
    server = serve(all_rules(behavior_substitution=[rule(Operator.BEHAVIOR_SUBSTITUTION, sneaky, times=1)]))
    result = project.evaluate(mutator(server.base_url, parallel=2))

    assert result.pool_complete
    assert len(llm_requests(server, Operator.BEHAVIOR_SUBSTITUTION)) == 2
    samples = [s for s in result.llm_pool["samples"] if s["operator"] == "behavior_substitution"]
    assert [(s["sample_index"], s["status"], s["reason"]) for s in samples] == [
        (0, "rejected", "touches_test_file"), (1, "admitted", None)]
    assert "tests/test_clamp.py" in samples[0]["detail"]
    mutant = next(r.mutant for r in result.mutants if r.mutant.operator == Operator.BEHAVIOR_SUBSTITUTION)
    assert (mutant.meta["sample_index"], mutant.meta["attempts"]) == (1, 2)
    assert "tests/" not in mutant.patch
    row = result.llm_pool["per_operator"]["behavior_substitution"]
    assert (row["attempts"], row["admitted"], row["rejected"]) == (2, 1, {"touches_test_file": 1})
    # both attempts are paid for and accounted to the operator
    assert result.llm_usage["per_operator"]["behavior_substitution"]["calls"] == 2
    assert len(result.mutants) == 5


def test_inadmissible_samples_are_resampled_up_to_the_attempt_bound(serve: Any, project: Project) -> None:
    equals_fix = block("        return hi", "        return hi  # the fix, reformatted")
    not_found = block("        return hj", "        return lo")
    bad_python = block("        return hi", "        return hi +")
    server = serve(all_rules(
        vanilla=[rule(Operator.VANILLA, equals_fix, times=1), rule(Operator.VANILLA, not_found, times=1)],
        input_specific_shortcut=[rule(Operator.INPUT_SPECIFIC_SHORTCUT, bad_python)],  # never admissible
    ))
    result = project.evaluate(mutator(server.base_url, samples=1, max_resample_factor=2.0))  # at most 3 attempts

    pool = result.llm_pool["per_operator"]
    assert pool["vanilla"]["rejected"] == {"equals_fix": 1, "search_not_found": 1}
    assert (pool["vanilla"]["attempts"], pool["vanilla"]["admitted"]) == (3, 1)
    assert pool["input_specific_shortcut"] == {"wanted": 1, "attempts": 3, "admitted": 0,
                                               "rejected": {"does_not_parse": 3}, "failed": {}, "skipped": 0,
                                               "shortfall": 1}
    assert len(llm_requests(server, Operator.INPUT_SPECIFIC_SHORTCUT)) == 3
    # a shortfall is not a broken pool: the model produced fewer valid mutants, the run did not fail
    assert result.pool_complete
    # a class from the mutants it has (4 LLM mutants, every one run: still a sample, never a census)
    assert result.test_class in (TestClass.LAX, TestClass.BORDERLINE)
    assert result.laxity is not None
    assert len(result.mutants) == 4


def test_cut_off_and_repeating_replies_are_counted_rejections_and_resampled(serve: Any, project: Project) -> None:
    # a small model's reply cut off at max_tokens, and one looping on the same line until max_tokens: never
    # used, rejected by reason, counted as truncations, resampled within the operator's attempts
    cut = rule(Operator.SYMPTOM_SUPPRESSION, "rangekit/clamp.py\n<<<<<<< SEARCH\n    if lo", finish_reason="length",
               times=1)
    looping = rule(Operator.INCOMPLETE_FIX, "rangekit/clamp.py\n" + "    if x < lo:\n" * 40, finish_reason="length",
                   times=1)
    server = serve(all_rules(symptom_suppression=[cut], incomplete_fix=[looping]))
    client_mutator = mutator(server.base_url, parallel=1)
    result = project.evaluate(client_mutator)

    assert client_mutator.client.ledger.run_usage().truncations == 2
    usage = result.llm_usage["per_operator"]
    assert (usage["symptom_suppression"]["truncations"], usage["incomplete_fix"]["truncations"]) == (1, 1)
    per_op = result.llm_pool["per_operator"]
    assert per_op["symptom_suppression"]["rejected"] == {"truncated": 1}
    assert per_op["incomplete_fix"]["rejected"] == {"repetition": 1}
    assert per_op["symptom_suppression"]["failed"] == {}
    samples = {(s["operator"], s["sample_index"]): s for s in result.llm_pool["samples"]}
    assert "cut off at 100 completion tokens" in samples[("symptom_suppression", 0)]["detail"]
    assert "repeating itself" in samples[("incomplete_fix", 0)]["detail"]
    # resampled: every operator got its mutant, and the pool is complete, so the test is classified
    assert result.pool_complete
    assert len(result.mutants) == 5
    assert len(server.requests) == 7
    assert result.test_class is TestClass.LAX


def test_a_pool_whose_every_reply_was_cut_off_is_incomplete(serve: Any, project: Project) -> None:
    # max_tokens too small for the prompt is no property of one sample: nothing is classified
    server = serve([{"reply": "rangekit/clamp.py\n<<<<<<< SEARCH\n", "usage": USAGE, "finish_reason": "length"}])
    result = project.evaluate(mutator(server.base_url, parallel=1, operators=(Operator.VANILLA,)))
    assert not result.pool_complete
    assert "every reply (2) was cut off at max_tokens (512)" in (result.pool_incomplete_reason or "")
    assert result.test_class is TestClass.INCONCLUSIVE
    assert result.llm_pool["per_operator"]["vanilla"]["rejected"] == {"truncated": 2}


@pytest.mark.parametrize(("text", "looping"), [
    ("as_int_str, " * 30, True),
    ("x" * 200, True),
    ("    if x < lo:\n" * 10, True),
    ("rangekit/clamp.py\n<<<<<<< SEARCH\n    if lo > hi:\n        raise ValueError('empty')\n=======\n", False),
    ("", False),
])
def test_is_repetition(text: str, looping: bool) -> None:
    assert is_repetition(text) is looping


def test_cost_cap_stops_cleanly_and_keeps_finished_results(serve: Any, project: Project) -> None:
    server = serve(all_rules())
    cap = Budget(per_run_usd=2.5 * REPLY_COST)  # reached after the third reply: the fourth call is refused
    m = mutator(server.base_url, budget=cap, parallel=1)
    result = project.evaluate(m)

    assert len(server.requests) == 3
    assert not result.pool_complete
    assert "cost cap" in (result.pool_incomplete_reason or "")
    assert result.test_class is TestClass.INCONCLUSIVE
    assert result.laxity is None
    assert sorted(r.mutant.operator for r in result.mutants) == [
        "behavior_substitution", "incomplete_fix", "vanilla"]
    assert all(r.cell is not None for r in result.mutants)
    assert result.llm_usage["per_source"]["llm"]["cost_usd"] == pytest.approx(3 * REPLY_COST)
    assert result.llm_usage["per_operator"]["symptom_suppression"]["budget_refusals"] == 1
    assert result.llm_pool["per_operator"]["symptom_suppression"]["failed"] == {"cost_cap": 1}  # an ErrorKind
    assert result.llm_pool["per_operator"]["input_specific_shortcut"]["skipped"] == 1
    assert m.client.ledger.run_usage().budget_refusals == 1


def test_replay_gives_identical_output_with_the_server_off(serve: Any, project: Project, tmp_path: Path) -> None:
    touching = block("def test_above():", "def test_above_renamed():", path="tests/test_clamp.py")
    server = serve(all_rules(vanilla=[rule(Operator.VANILLA, touching, times=1)]))
    calls = tmp_path / "calls.sqlite"
    recorded = project.evaluate(mutator(server.base_url, store=CallStore(calls), samples=2, parallel=4))
    assert recorded.llm_pool is not None
    assert recorded.llm_pool["cache"]["cached_calls"] == 0
    seen = len(server.requests)
    server.stop()

    replayer = mutator("http://127.0.0.1:9/v1", store=CallStore(calls), mode=CacheMode.REPLAY, samples=2, parallel=4)
    replayed = project.evaluate(replayer)

    assert replayed.to_json(timings=False) == recorded.to_json(timings=False)
    assert replayed.llm_pool is not None
    assert replayed.llm_pool["cache"]["cached_calls"] == seen
    assert replayer.client.ledger.run_usage().cached_calls == seen
    assert recorded.pool_complete
    assert recorded.llm_pool["per_operator"]["vanilla"]["rejected"]["touches_test_file"] == 1


def test_mixed_pool_dedups_across_sources_and_counts_per_source(serve: Any, project: Project) -> None:
    # the scripted incomplete_fix (drop the range check) equals a mechanical incomplete_fix mutant
    other = block("    if lo > hi:", "    if lo > hi + 1:") + "Summary: the range check misses lo == hi + 1"
    server = serve(all_rules(incomplete_fix=[rule(Operator.INCOMPLETE_FIX, REPLIES[Operator.INCOMPLETE_FIX][0],
                                                  times=1),
                                             rule(Operator.INCOMPLETE_FIX, other, times=1)]))
    # every mutant of the pool runs (no early stop), so the per-source counts are the pool's
    result = project.evaluate(mutator(server.base_url), mechanical=True, sequential=False, per_operator=1000)

    assert result.mutators == ["mechanical", "llm"]
    per_source = result.per_source()
    assert set(per_source) == {"mechanical", "llm"}
    assert per_source["llm"]["total"] == 5
    assert per_source["mechanical"]["total"] == sum(1 for r in result.mutants if r.mutant.source == "mechanical") > 0
    assert per_source["llm"]["operators"]["incomplete_fix"]["total"] == 1  # type: ignore[index]
    samples = [s for s in result.llm_pool["samples"] if s["operator"] == "incomplete_fix"]  # type: ignore[index]
    assert [(s["status"], s["reason"]) for s in samples] == [("rejected", "duplicate"), ("admitted", None)]
    ids = [r.mutant.id for r in result.mutants]
    assert len(ids) == len(set(ids))
    assert result.pool_complete
    assert result.laxity is not None
    data = result.to_json(timings=False)
    assert data["llm_usage"]["per_source"]["mechanical"]["cost_usd"] == 0.0
    assert data["llm_usage"]["per_source"]["llm"]["calls"] == 6


def test_llm_is_not_called_for_a_test_that_is_not_fail_to_pass(serve: Any, project: Project) -> None:
    server = serve(all_rules())
    with InstanceExecutor(project.instance, project.repo, project.settings, Store(project.settings.store)) as ex:
        reference = ex.golden_test()
        passing = ex.test_patch(make_patch(project.repo, {"tests/test_clamp.py": (
            TESTS + "\n\ndef test_mid():\n    assert clamp(1, 0, 3) == 1\n")}), name="np")
        result = evaluate(ex, MPERequest(project.fix, passing, reference, MPEConfig(mechanical=False, llm="mock")),
                          llm_mutator=mutator(server.base_url))
    assert result.test_class is TestClass.NOT_REPRODUCING
    assert server.requests == []


# --- the command line ----------------------------------------------------------------------------------------


@pytest.fixture
def instance_dir(project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "instance"
    directory.mkdir()
    (directory / "fix.diff").write_text(project.fix)
    (directory / "golden.diff").write_text(project.golden)
    (directory / "lax.diff").write_text(project.lax)
    (directory / "instance.yaml").write_text(
        f"instance_id: rangekit-1\nrepo: {project.repo}\nbase_commit: {project.base}\npatch: fix.diff\n"
        f"test_patch: golden.diff\nproblem_statement: {json.dumps(ISSUE)}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", KEY_VAR)
    return directory


def run_cli(instance_dir: Path, *args: str) -> Any:
    store = instance_dir.parent / "cli-store.sqlite"
    # per mutant (mpe.behaviours=false), as Project.evaluate: the LLM pool's mutants are checked one by one
    return CliRunner().invoke(app, ["mpe", str(instance_dir), "--test", str(instance_dir / "lax.diff"), "--json",
                                    "--store", str(store), "--timeout", "30", "-w", "1",
                                    "-c", "mpe.behaviours=false", *args])


def test_cli_mixed_pool_then_offline_replay(serve: Any, instance_dir: Path) -> None:
    server = serve(all_rules())
    calls = instance_dir.parent / "calls.sqlite"
    llm_args = ["--model", MODEL, "--api-base", server.base_url, "--samples", "1", "--llm-store", str(calls)]
    # every mutant of the pool runs (no early stop), so the per-source counts are the pool's
    whole = ["-c", "mpe.sequential=false", "--per-operator", "1000"]
    result = run_cli(instance_dir, "--mutator", "mechanical,llm", *llm_args, *whole)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["mutators"] == ["mechanical", "llm"]
    assert data["per_source"]["llm"]["total"] == 4  # incomplete_fix's reply duplicates a mechanical mutant
    assert data["llm_pool"]["per_operator"]["incomplete_fix"]["rejected"] == {"duplicate": 2}
    assert data["per_source"]["mechanical"]["total"] > 0
    assert data["llm_usage"]["per_source"]["llm"]["calls"] == 6
    assert data["operators"][0] == "incomplete_fix"
    assert "vanilla" in data["operators"]
    assert data["test_class"] == "Lax"
    server.stop()

    replay = run_cli(instance_dir, "--mutator", "mechanical,llm", *llm_args, *whole, "--llm-mode", "replay")
    assert replay.exit_code == 0, replay.output
    again = json.loads(replay.stdout)
    for key in ("matrix", "laxity", "test_class", "per_source", "llm_usage"):
        assert again[key] == data[key]
    assert again["llm_pool"]["cache"]["cached_calls"] == 6


def test_cli_diff_edit_format_asks_for_a_unified_diff(serve: Any, instance_dir: Path) -> None:
    """``-c mpe.llm_edit_format=diff`` (issue 38: the format small local models write best): every prompt asks
    for one unified diff and shows a diff as its example, never a SEARCH/REPLACE block; a diff reply with a wrong
    hunk header is admitted."""
    diff = ("```diff\n--- a/rangekit/clamp.py\n+++ b/rangekit/clamp.py\n@@ -40,2 +40,2 @@\n"
            "-    if x > hi:\n+    if x > hi + 1:\n         return hi\n```\nSummary: the upper bound is off by one\n")
    server = serve(all_rules(vanilla=[rule(Operator.VANILLA, diff)]))
    result = run_cli(instance_dir, "--mutator", "llm", "--model", MODEL, "--api-base", server.base_url,
                     "--samples", "1", "--llm-store", str(instance_dir.parent / "d.sqlite"),
                     "-c", "mpe.llm_edit_format=diff")
    assert result.exit_code == 0, result.output
    assert len(server.requests) == len(LLM_OPERATORS)
    for request in server.requests:
        system, user = (m["content"] for m in request.messages)
        assert "Reply with one unified diff" in system
        assert "One unified diff against the fixed code above" in user
        assert "```diff\n--- a/path/to/file.py" in user
        assert "SEARCH" not in system + user
    samples = json.loads(result.stdout)["llm_pool"]["samples"]
    assert [s["status"] for s in samples if s["operator"] == "vanilla"] == ["admitted"]


def test_cli_cost_cap_reports_no_class(serve: Any, instance_dir: Path) -> None:
    server = serve(all_rules())
    result = run_cli(instance_dir, "--mutator", "llm", "--model", MODEL, "--api-base", server.base_url,
                     "--samples", "1", "--budget-usd", "0", "--llm-store", str(instance_dir.parent / "c.sqlite"))
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["test_class"] == "Inconclusive"
    assert data["laxity"] is None
    assert data["pool_complete"] is False
    assert "cost cap" in data["pool_incomplete_reason"]
    assert "no classification" in result.stderr
    assert server.requests == []


def test_cli_llm_needs_a_model(instance_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COHARDEN_LLM_MODEL", raising=False)
    result = run_cli(instance_dir, "--mutator", "llm")
    assert result.exit_code == 2
    assert "--model" in result.stderr
    bad = run_cli(instance_dir, "--mutator", "mechanical,gpt")
    assert bad.exit_code == 2
    assert "--mutator" in bad.stderr


# --- the edit format -----------------------------------------------------------------------------------------

FIX_FILES = {"pkg/a.py": "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n", "pkg/b.py": "B = 1\n"}


def test_parse_blocks_with_paths_fences_and_summary() -> None:
    reply = ("Here you go.\n\n**pkg/a.py**\n```python\n<<<<<<< SEARCH\ndef f(x):\n    return x + 1\n=======\n"
             "def f(x):\n    return x\n>>>>>>> REPLACE\n<<<<<<< SEARCH\nB\n=======\nC\n>>>>>>> REPLACE\n```\n\n"
             "```python pkg/b.py\n<<<<<<< SEARCH\nB = 1\n=======\nB = 2\n>>>>>>> REPLACE\n```\n"
             "**Summary:** f forgets the increment\n")
    blocks, summary = parse_edit_blocks(reply)
    assert [(b.path, b.search, b.replace) for b in blocks] == [
        ("pkg/a.py", ("def f(x):", "    return x + 1"), ("def f(x):", "    return x")),
        ("pkg/a.py", ("B",), ("C",)),  # a block right after another: same file
        ("pkg/b.py", ("B = 1",), ("B = 2",)),
    ]
    assert summary == "f forgets the increment"


@pytest.mark.parametrize(("reply", "reason"), [
    ("no blocks here", "no_edit_blocks"),
    ("pkg/a.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n", "malformed_block"),
    ("pkg/a.py\n<<<<<<< SEARCH\nx\n=======\ny\n", "malformed_block"),
])
def test_unparseable_replies(reply: str, reason: str) -> None:
    with pytest.raises(EditFormatError) as info:
        parse_edit_blocks(reply)
    assert info.value.reason == reason


def _apply(reply: str, files: dict[str, str] | None = None) -> tuple[dict[str, str], str]:
    blocks, _ = parse_edit_blocks(reply)
    return apply_edit_blocks(blocks, files or FIX_FILES)


@pytest.mark.parametrize(("reply", "reason"), [
    ("pkg/a.py\n<<<<<<< SEARCH\n    return x + 1\n=======\n    return x\n>>>>>>> REPLACE", "search_ambiguous"),
    ("pkg/a.py\n<<<<<<< SEARCH\n    return x + 2\n=======\n    return x\n>>>>>>> REPLACE", "search_not_found"),
    ("pkg/a.py\n<<<<<<< SEARCH\n    return x\n=======\n    return 0\n>>>>>>> REPLACE", "search_not_found"),
    ("pkg/a.py\n<<<<<<< SEARCH\n\n=======\nimport os\n>>>>>>> REPLACE", "search_empty"),
    ("pkg/c.py\n<<<<<<< SEARCH\nB\n=======\nC\n>>>>>>> REPLACE", "unknown_file"),
    ("tests/test_a.py\n<<<<<<< SEARCH\nB\n=======\nC\n>>>>>>> REPLACE", "touches_test_file"),
    ("pkg/conftest.py\n<<<<<<< SEARCH\nB\n=======\nC\n>>>>>>> REPLACE", "touches_test_file"),
    ("<<<<<<< SEARCH\nB = 1\n=======\nB = 2\n>>>>>>> REPLACE", "missing_file_path"),
    # a test file anywhere in the reply rejects it, even after a block that would apply
    ("pkg/b.py\n<<<<<<< SEARCH\nB = 1\n=======\nB = 2\n>>>>>>> REPLACE\ntests/test_b.py\n<<<<<<< SEARCH\nx\n"
     "=======\ny\n>>>>>>> REPLACE", "touches_test_file"),
])
def test_inapplicable_blocks(reply: str, reason: str) -> None:
    with pytest.raises(EditFormatError) as info:
        _apply(reply)
    assert info.value.reason == reason


def test_apply_is_exact_line_based_and_keeps_file_layout() -> None:
    files, location = _apply("pkg/a.py\n<<<<<<< SEARCH\ndef g(x):\n    return x + 1   \n=======\ndef g(x):\n"
                             "    return x - 1\n>>>>>>> REPLACE")
    assert files["pkg/a.py"] == "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x - 1\n"
    assert files["pkg/b.py"] == FIX_FILES["pkg/b.py"]
    assert location == "pkg/a.py:5"
    # CRLF files stay CRLF, form feeds are not line breaks, a missing final newline stays missing
    crlf = {"m.py": "a = 1\r\n\x0c\r\nb = 2"}
    blocks, _ = parse_edit_blocks("m.py\n<<<<<<< SEARCH\nb = 2\n=======\nb = 3\n>>>>>>> REPLACE")
    out, _ = apply_edit_blocks(blocks, crlf)
    assert out["m.py"] == "a = 1\r\n\x0c\r\nb = 3"
    # one file in the fix: a block without a recognizable file name edits it
    single = {"m.py": "x = 1\n"}
    out, _ = apply_edit_blocks(parse_edit_blocks("Change:\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE")[0],
                               single)
    assert out == {"m.py": "x = 2\n"}


MULTIPLICITY = {"pkg/m.py": "def multiplicity(p, n):\n    if p == 2:\n        return trailing(n)\n"
                               "    if n == 0:\n        raise ValueError(n)\n    return count(p, n)\n"}


def test_a_diff_reply_applies_with_wrong_hunk_numbers_and_shifted_indentation() -> None:
    """What a 1.5B local model writes (issue 38): a fenced unified diff whose hunk header names lines the file
    does not have, its context indented by four more spaces; no SEARCH/REPLACE block."""
    ctx = FixContext([FileChange("pkg/m.py", MULTIPLICITY["pkg/m.py"], MULTIPLICITY["pkg/m.py"])])
    reply = ("Here is a plausible fix:\n```diff\n--- a/pkg/m.py\n+++ b/pkg/m.py\n"
             "@@ -64,7 +64,7 @@ def multiplicity(p, n):\n"
             "         if p == 2:\n-            return trailing(n)\n+            return trailing(n) if n else 0\n"
             "         if n == 0:\n```\nSummary: zero handled inline\n")
    raw = reply_to_raw_mutant(reply, ctx, Operator.VANILLA)
    assert raw.files["pkg/m.py"] == MULTIPLICITY["pkg/m.py"].replace("return trailing(n)\n",
                                                                     "return trailing(n) if n else 0\n")
    assert raw.meta["format"] == "diff"
    assert raw.description == "zero handled inline"


PARSE_BUGGY = ("def parse(text):\n    total = 0\n    for number, unit in PART.findall(text):\n"
               "        total += int(number) * UNITS[unit]\n    return total\n")
PARSE_FIXED = ("def parse(text):\n    total = 0\n    pos = 0\n\n    for match in PART.finditer(text):\n"
               "        if match.start() != pos:\n            raise ValueError(text)\n"
               "        number, unit = match.groups()\n        total += int(number) * UNITS[unit]\n"
               "        pos = match.end()\n    return total\n")


def _diff(*body: str) -> str:
    return "```diff\n--- a/p.py\n+++ b/p.py\n@@ -40,6 +40,6 @@\n" + "\n".join(body) + "\n```\nSummary: s\n"


def test_a_diff_with_wrong_context_applies_by_its_changed_lines() -> None:
    """What Qwen2.5-Coder-1.5B writes (issue 38, recorded on warn_or_raise): the removed line is the fixed
    code's, but a blank context line is dropped and the changed line is indented one level too deep."""
    ctx = FixContext([FileChange("p.py", PARSE_BUGGY, PARSE_FIXED)])
    reply = _diff("     pos = 0", "     for match in PART.finditer(text):", "-        if match.start() != pos:",
                  "+            if match.start() >= pos:", "                 raise ValueError(text)")
    raw = reply_to_raw_mutant(reply, ctx, Operator.VANILLA)
    assert raw.files["p.py"] == PARSE_FIXED.replace("if match.start() != pos:", "if match.start() >= pos:")
    assert (raw.meta["base"], raw.meta["match"]) == ("fixed", "anchored")
    # a run that only adds is placed after the context line before it
    added = _diff("     total = 0", "+    if not text:", "+        raise ValueError(text)", "     pos = 1")
    raw = reply_to_raw_mutant(added, ctx, Operator.VANILLA)
    assert raw.files["p.py"] == PARSE_FIXED.replace("    total = 0\n", "    total = 0\n    if not text:\n"
                                                    "        raise ValueError(text)\n")


def test_a_diff_against_the_buggy_lines_it_saw_in_the_fix_applies_to_the_buggy_code() -> None:
    """Shown the fix's diff, a small model writes its wrong fix against the buggy lines: applied to the buggy
    code, the result is a wrong fix of the bug (admission still requires it to differ from fix and bug)."""
    ctx = FixContext([FileChange("p.py", PARSE_BUGGY, PARSE_FIXED)])
    reply = _diff("     total = 0", "-    for number, unit in PART.findall(text):",
                  "+    for number, unit in PART.findall(text.strip()):")
    raw = reply_to_raw_mutant(reply, ctx, Operator.SYMPTOM_SUPPRESSION)
    assert raw.files["p.py"] == PARSE_BUGGY.replace("findall(text)", "findall(text.strip())")
    assert raw.meta["base"] == "buggy"
    # removed lines that are nowhere stay a counted rejection, and asked-for blocks are never fuzzy
    with pytest.raises(EditFormatError) as info:
        reply_to_raw_mutant(_diff("-    return 0", "+    return 1"), ctx, Operator.VANILLA)
    assert info.value.reason == "search_not_found"
    with pytest.raises(EditFormatError) as info:
        reply_to_raw_mutant("p.py\n<<<<<<< SEARCH\n    pos = 0\n    for match in PART.finditer(text):\n"
                            "=======\n    pos = 1\n    for match in PART.finditer(text):\n>>>>>>> REPLACE\n",
                            ctx, Operator.VANILLA)
    assert info.value.reason == "search_not_found"


@pytest.mark.parametrize(("reply", "reason"), [
    # a hunk whose - and + lines are the same: no change at all
    ("```diff\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-    if p == 2:\n+    if p == 2:\n```", "no_change"),
    # a removed line the file does not have (a hallucinated `- return 0`)
    ("```diff\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -3 +3 @@\n-        return 0\n+        return 1\n```",
     "search_not_found"),
    ("```diff\n--- a/tests/test_m.py\n+++ b/tests/test_m.py\n@@ -1 +1 @@\n-x\n+y\n```", "touches_test_file"),
    ("I would change the zero check.", "no_edit_blocks"),
])
def test_diff_replies_that_cannot_be_mutants_are_counted_by_reason(reply: str, reason: str) -> None:
    ctx = FixContext([FileChange("pkg/m.py", MULTIPLICITY["pkg/m.py"], MULTIPLICITY["pkg/m.py"])])
    with pytest.raises(EditFormatError) as info:
        reply_to_raw_mutant(reply, ctx, Operator.VANILLA)
    assert info.value.reason == reason


def test_admission_of_an_llm_mutant_uses_the_mechanical_filter() -> None:
    ctx = FixContext([FileChange("pkg/m.py", "def f(x):\n    return x\n", "def f(x):\n    return x + 1\n")])
    pool = Pool()

    def raw(new: str) -> Any:
        return reply_to_raw_mutant(f"pkg/m.py\n<<<<<<< SEARCH\n    return x + 1\n=======\n{new}\n>>>>>>> REPLACE",
                                   ctx, Operator.VANILLA)

    assert admit_llm(ctx, raw("    return x + 1  # same"), pool, "m1") == "equals_fix"
    assert admit_llm(ctx, raw("    return (x)"), pool, "m1") == "equals_buggy"
    assert admit_llm(ctx, raw("    return x +"), pool, "m1") == "does_not_parse"
    mutant = admit_llm(ctx, raw("    return x + 2"), pool, "m1")
    assert not isinstance(mutant, str)
    assert mutant.source == "llm"
    assert mutant.patch == ("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,2 +1,2 @@\n"
                            " def f(x):\n-    return x\n+    return x + 2\n")
    assert admit_llm(ctx, raw("    return (x + 2)"), pool, "m2") == "duplicate"
    assert [m.id for m in pool.mutants] == ["m1"]


def test_messages_for_long_files_show_excerpts_around_the_fix() -> None:
    old = "".join(f"v{i} = {i}\n" for i in range(1000))
    new = old.replace("v500 = 500\n", "v500 = 501\n")
    ctx = FixContext([FileChange("big.py", old, new)])
    tests = (TestPatch(patch="t1\n", ids=["a"]), TestPatch(patch="t2\n", ids=["b"]))
    layout = LLMMutatorSettings(context_lines=10)
    (_, user) = build_messages(ctx, tests, Operator.VANILLA, layout)
    text = user["content"]
    assert "lines 491-511 of 1000:" in text
    assert "v500 = 501\n" in text
    assert "v100 = 100" not in text
    swapped = build_messages(ctx, (tests[1], tests[0]), Operator.VANILLA, layout)[1]["content"]
    assert text.index("t1\n") < text.index("t2\n")
    assert swapped.index("t2\n") < swapped.index("t1\n")


def test_batch_mpe_with_llm_mutants_and_the_ray_executor_refused(serve: Any, project: Project,
                                                                 instance_dir: Path) -> None:
    server = serve(all_rules())
    records = instance_dir.parent / "instances.jsonl"
    records.write_text(json.dumps(project.instance.model_dump()) + "\n")
    preds = instance_dir.parent / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": "rangekit-1", "model_name_or_path": "lax",
                                 "model_patch": project.lax}) + "\n")
    out = instance_dir.parent / "batch"
    args = ["mpe", "--instances", str(records), "--predictions", str(preds), "--output", str(out), "--json",
            "--store", str(instance_dir.parent / "batch.sqlite"), "--mutator", "llm", "--model", MODEL,
            "--api-base", server.base_url, "--samples", "1", "--timeout", "30", "-w", "1",
            "-c", "mpe.behaviours=false"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    row = json.loads((out / "mpe.jsonl").read_text())
    assert row["mutators"] == ["llm"]
    assert row["per_source"]["llm"]["total"] > 0
    assert row["test_class"] == "Lax"
    refused = CliRunner().invoke(app, [*args, "--executor", "ray"])
    assert refused.exit_code == 2
    assert "local executor" in refused.output
