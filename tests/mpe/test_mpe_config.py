"""MPEConfig: one record of MPE settings, its cache key, and the store keys built from it.

The legacy recipes are written out here by hand: keys of records already stored (verdicts, the real-bugs
study's steps, suite runs) must not change when the code that builds them moves."""

from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ValidationError

from coharden.config import Settings
from coharden.execution.store import content_key, study_key, suite_run_key, verdict_key
from coharden.loop.config import LoopConfig
from coharden.schema.mpe_config import LOOP_TAU, PAPER_TAU, MPEConfig
from coharden.schema.mutant import MECHANICAL_DEFAULT, TARGETED_OPERATORS, Operator


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_two_cutoffs_are_defined_once_and_used_as_defaults() -> None:
    assert (PAPER_TAU, LOOP_TAU) == (0.202, 0.2)
    assert MPEConfig().tau == PAPER_TAU
    assert Settings().mpe.tau == PAPER_TAU  # the settings' MPE section is an MPEConfig: tau has no other home
    assert not {"tau", "seed"} & Settings.model_fields.keys()
    assert LoopConfig().mpe.tau == LOOP_TAU


def test_cache_key_depends_on_what_changes_a_row_and_not_on_workers() -> None:
    base = MPEConfig()
    key = base.cache_key()
    assert MPEConfig(workers=8).cache_key() == key
    assert MPEConfig(operators=list(reversed(MECHANICAL_DEFAULT))).cache_key() == key  # order does not matter
    for change in [{"seed": 1}, {"tau": 0.5}, {"operators": [Operator.INCOMPLETE_FIX]},
                   {"paper_classes": True}, {"mechanical": False}, {"llm": "gpt"}, {"prefer_exercised": True},
                   {"sequential": False}, {"max_mutants": 60}, {"max_mutants": None}, {"confidence": 0.9},
                   {"plausibility": False}, {"behaviours": False}]:
        assert MPEConfig(**change).cache_key() != key, change
    assert MPEConfig(llm="a").cache_key() != MPEConfig(llm="b").cache_key()
    # LLM mutants wanted per operator: another pool with a model, nothing without one
    assert MPEConfig(llm="a", llm_samples=56).cache_key() != MPEConfig(llm="a").cache_key()
    assert MPEConfig(llm_samples=56).cache_key() == key
    # sequential MPE draws from the whole pool: N per operator does not change its rows; a fixed budget's it does
    assert MPEConfig(per_operator=2).cache_key() == key
    fixed = MPEConfig(sequential=False)
    assert MPEConfig(sequential=False, per_operator=2).cache_key() != fixed.cache_key()
    # the paper's protocol is always a fixed budget, with the point rule: the cap and confidence do not matter
    paper = MPEConfig(paper_classes=True)
    assert MPEConfig(paper_classes=True, max_mutants=60, confidence=0.9).cache_key() == paper.cache_key()


def test_confidence_and_cap_are_range_checked() -> None:
    for bad in [{"confidence": 0.5}, {"confidence": 1.0}, {"confidence": 0.2}, {"max_mutants": 0},
                {"max_mutants": len(MECHANICAL_DEFAULT) - 1}]:
        with pytest.raises(ValidationError):
            MPEConfig(**bad)
    assert MPEConfig(max_mutants=len(MECHANICAL_DEFAULT)).max_mutants == len(MECHANICAL_DEFAULT)
    assert MPEConfig(sequential=False, max_mutants=1).max_mutants == 1  # a fixed budget has no cap to check


def test_study_keys_are_the_ones_stored_before_mpe_config() -> None:
    # the rows stored before issue 33 were a fixed budget classified by the point rule; a fixed budget with the
    # interval's classes extends that key, so no row of the point rule is read as an interval's
    config = MPEConfig(per_operator=3, operators=list(TARGETED_OPERATORS), sequential=False)
    old_mpe_key = [3, 0, 0.202, sorted(TARGETED_OPERATORS)]
    # issue 50's rules (no census collapse, plausibility, behaviours) each add a part: no row stored under the
    # old rules is served under the new ones
    new_rules = ["estimate:sample", "plausible:pass_to_pass", "laxity:behaviours",
                 # and the behaviour rule is named: a log runner's failures count where they raised
                 "behaviour_rule:failures:where:scripts"]
    # issue 53: the interval's method is named beside its confidence
    interval = ["interval:0.95", "interval_method:clopper-pearson"]
    assert config.cache_key() == [*old_mpe_key, *interval, *new_rules]
    exercised = config.model_copy(update={"prefer_exercised": True})
    assert exercised.cache_key() == [*old_mpe_key, *interval, *new_rules, "prefer_exercised"]
    old_rules = config.model_copy(update={"plausibility": False, "behaviours": False})
    assert old_rules.cache_key() == [*old_mpe_key, *interval, "estimate:sample"]
    parts = ["env", "sympy__sympy-1", "abc", ["t1"], config.cache_key()]
    legacy = hashlib.sha256(json.dumps(["study.mpe", 1, *parts], sort_keys=True, default=str).encode()).hexdigest()
    assert study_key("study.mpe", 1, *parts) == legacy


def test_verdict_and_suite_keys_are_unchanged() -> None:
    legacy = _sha(json.dumps(["r", "c", _sha("s"), _sha("t"), ["a", "b"], "env"]))
    assert verdict_key(repo="r", base_commit="c", source_patch="s", test_patch="t", test_ids=["b", "a"],
                       environment="env") == legacy
    legacy_suite = _sha(json.dumps([_sha("m"), _sha("s"), ["x", "y"], "env"]))
    assert suite_run_key(module_source="m", suite="s", test_ids=["y", "x"], environment="env") == legacy_suite
    assert content_key("a", [1]) != content_key("a", [2])


def test_loop_config_maps_its_own_words_into_mpe_and_keeps_its_digest() -> None:
    config = LoopConfig(rounds=2, tau=0.1, samples=5, seed=4, mutator="mechanical,llm",
                        operators=[Operator.SYMPTOM_SUPPRESSION], paper_classes=True)
    assert (config.mpe.per_operator, config.mpe.tau, config.mpe.seed) == (5, 0.1, 4)
    assert config.mpe.mechanical
    assert config.mpe.llm is not None
    assert (config.samples, config.tau, config.mutator) == (5, 0.1, "mechanical,llm")
    legacy = {"method": "coharden", "rounds": 2, "tau": 0.1, "samples": 5, "operators": ["symptom_suppression"],
              "mutator": "mechanical,llm", "seed": 4, "max_iterations": None}
    assert config.digest() == _sha(json.dumps(legacy, sort_keys=True))[:16]  # the point rule: as before
    sequential = LoopConfig(rounds=2, tau=0.1, samples=5, seed=4, mutator="mechanical,llm",
                            operators=[Operator.SYMPTOM_SUPPRESSION])
    assert sequential.mpe.is_sequential
    assert not config.mpe.is_sequential
    assert sequential.digest() != config.digest()  # a state saved under the point rule is not resumed
    with pytest.raises(ValidationError, match="mutator"):
        LoopConfig(mutator="genetic")


# --- one home per setting: the config's mpe section, -c KEY=VALUE, the MPE flags on top (issue 36) -----------------

def test_mpe_settings_come_from_the_config_section_and_flags_fold_over_it(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from coharden.cli.mpe_options import MPEOptions
    from coharden.config import load_settings
    from coharden.errors import CoHardenError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.coharden]\ntimeout = 30\n[tool.coharden.mpe]\ntau = 0.3\n"
                                             "trust_tests = true\n")
    settings = load_settings()
    assert (settings.sandbox.timeout, settings.mpe.tau, settings.mpe.trust_tests) == (30, 0.3, True)
    settings = load_settings(["mpe.timeout_floor=5", "mpe.seed=7", "timeout=60", "mpe.reject_tampering=true"])
    assert (settings.sandbox.timeout, settings.mpe.tau, settings.mpe.timeout_floor, settings.mpe.seed) == (
        60, 0.3, 5, 7)
    config = MPEOptions(tau=0.1, per_operator=2).config(settings, workers=4)
    assert (config.tau, config.seed, config.per_operator, config.sequential, config.workers) == (0.1, 7, 2, False, 4)
    assert (config.trust_tests, config.reject_tampering, config.timeout_floor) == (True, True, 5)
    assert MPEOptions().config(settings).is_sequential  # no flag: the section as it is
    (tmp_path / "old.yaml").write_text("tau: 0.25\nseed: 3\nsandbox: local\ncombine_tests: false\n")
    old = load_settings(["old.yaml"])  # a file replaces pyproject.toml; an older file's keys still read
    assert (old.mpe.tau, old.mpe.seed, old.sandbox.test_host, old.sandbox.timeout) == (0.25, 3, "local", 120)
    for bad, said in [("mpe.tua=1", "no such setting 'tua'"), ("timout=1", "no such setting 'timout'"),
                      ("mpe.tau=2", "mpe.tau"), ("=1", "expected KEY=VALUE")]:
        with pytest.raises(CoHardenError, match=said):
            load_settings([bad])


def test_a_time_limit_is_decided_in_one_place() -> None:
    from coharden.schema.timelimit import TimeLimit

    plain = TimeLimit.of(None, timeout=120)
    assert (plain.limit, plain.scaled, plain.cpu, plain.wall) == (120, False, 241, 120)
    scaled = TimeLimit.of(10, timeout=120)  # a mutant's limit: CPU-bound, the wall clock allows the load margin
    assert (scaled.limit, scaled.scaled, scaled.cpu, scaled.wall) == (10, True, 10, 20)
    assert TimeLimit.of(500, timeout=120).limit == 120  # never above the timeout
    assert not TimeLimit.of(10, timeout=120, cpu_seconds=30).scaled  # a set cpu_seconds keeps wall-clock limits
    assert not TimeLimit.of(10, timeout=120, docker=True).scaled
    assert MPEConfig().mutant_limit(1.0, 120) == 10.0
    assert MPEConfig().mutant_limit(100.0, 120) == 120


def test_the_interval_method_is_named_in_the_key(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every rule that decides a stored row is in its key (issue 53): a row classified by one interval method is
    never served under another."""
    import coharden.schema.mpe_config as mpe_config

    key = MPEConfig().cache_key()
    assert "interval_method:clopper-pearson" in key
    monkeypatch.setattr(mpe_config, "INTERVAL_METHOD", "wilson")
    assert MPEConfig().cache_key() != key
    assert "interval_method:wilson" in MPEConfig().cache_key()


def test_the_class_rule_is_one_function_read_by_every_place_that_classifies() -> None:
    """The interval-to-class rule lives in ``schema/estimate.side_of``: the class, the estimate's side and the
    loop's decision agree on every interval, and no other module compares an interval's bound with tau."""
    import re
    from pathlib import Path

    from coharden.loop.decision import Decision, decide
    from coharden.schema.estimate import side_of
    from coharden.schema.matrix import FAIL_TO_PASS, TestClass, classify

    tau = 0.202
    grid = [i / 20 for i in range(21)] + [tau]
    for low in grid:
        for high in (h for h in grid if h >= low):
            side = side_of((low, high), tau)
            klass = classify(FAIL_TO_PASS, laxity=(low + high) / 2, tau=tau, interval=(low, high))
            assert klass == {"lax": TestClass.LAX, "rigorous": TestClass.RIGOROUS,
                             "borderline": TestClass.BORDERLINE}[side]
            decision = decide(admissible=5, laxity=(low + high) / 2, tau=tau, changed=True, interval=(low, high))
            assert decision == {"lax": Decision.REGRESSION, "rigorous": Decision.CLEAN,
                                "borderline": Decision.BORDERLINE}[side]
    src = Path(__file__).resolve().parents[2] / "src" / "coharden"
    by_hand = re.compile(r"\b(low|high|interval\[[01]\]|bounds\[[01]\])\s*(>=|<=|<|>)\s*tau\b")
    found = [f"{path.relative_to(src)}:{n}" for path in src.rglob("*.py") if path.name != "estimate.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if by_hand.search(line)]
    assert found == []
