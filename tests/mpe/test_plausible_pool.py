"""Issue 50: plausibility measured by the PASS_TO_PASS tests, distinct behaviours, and an honest estimate, on a
small real git repository (real pytest runs in the sandbox, a real SQLite store)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.conftest import make_patch, make_repo

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.mpe import behaviours
from coharden.mpe.evaluate import MPERequest, evaluate
from coharden.mpe.mutant_runs import MutantRunPlan, run_mutants, sampling_frame
from coharden.mpe.plausibility import pass_to_pass
from coharden.mpe.result import IMPLAUSIBLE
from coharden.mpe.workers import Workers
from coharden.schema.instance import Instance
from coharden.schema.matrix import Cell, TestClass
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Mutant, Operator
from coharden.schema.verdict import Outcome

BUGGY = {
    "calc/__init__.py": """\
        def clamp(x, lo, hi):
            if x > hi:
                return hi
            return x


        def double(x):
            return 2 * x
        """,
    "tests/__init__.py": "",
    "tests/test_calc.py": """\
        from calc import clamp, double


        def test_hi():
            assert clamp(5, 0, 3) == 3


        def test_double():
            assert double(4) == 8
        """,
}
FIXED_CLAMP = textwrap.dedent("""\
    def clamp(x, lo, hi):
        if x > hi:
            return hi
        if x < lo:
            return lo
        return x
    """)
DOUBLE = """


    def double(x):
        return 2 * x
    """
GOLDEN = textwrap.dedent(BUGGY["tests/test_calc.py"]) + textwrap.dedent("""\


    def test_lo():
        assert clamp(-5, 0, 3) == 0
        assert clamp(2, 0, 3) == 2
    """)
LAX = textwrap.dedent(BUGGY["tests/test_calc.py"]) + textwrap.dedent("""\


    def test_repro():
        assert clamp(-5, 0, 3) >= 0
    """)


def _module(clamp: str) -> dict[str, str]:
    return {"calc/__init__.py": textwrap.dedent(clamp) + textwrap.dedent(DOUBLE)}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    repo, commit = make_repo(tmp_path_factory.mktemp("p2p") / "calc", BUGGY)
    out = {"repo": str(repo), "commit": commit, "fix": make_patch(repo, _module(FIXED_CLAMP)),
           "golden": make_patch(repo, {"tests/test_calc.py": GOLDEN}),
           "lax": make_patch(repo, {"tests/test_calc.py": LAX})}
    mutants = {
        # plausible: keeps test_hi and test_double; returns hi below lo (wrong, accepted by the lax test)
        "to_hi": FIXED_CLAMP.replace("return lo", "return hi"),
        # the same wrong result written differently: one behaviour with to_hi
        "to_hi_again": FIXED_CLAMP.replace("return lo", "return max(lo, hi)"),
        # plausible, a different wrong result: rejected by both tests with another message
        "to_minus": FIXED_CLAMP.replace("return lo", "return lo - 1"),
        # implausible: breaks the existing test_hi
        "breaks_hi": FIXED_CLAMP.replace("return hi\n    if", "return lo\n    if"),
        # implausible by hanging only under the PASS_TO_PASS tests (clamp(5, 0, 3) loops; the F->P inputs do not)
        "hangs_hi": FIXED_CLAMP.replace("return hi\n    if", "while True:\n            pass\n    if"),
    }
    for name, clamp in mutants.items():
        out[name] = make_patch(repo, _module(clamp))
    return out


def _instance(project: dict[str, str], p2p: list[str]) -> Instance:
    return Instance(instance_id="calc__clamp", repo=project["repo"], base_commit=project["commit"],
                    patch=project["fix"], test_patch=project["golden"], FAIL_TO_PASS=["tests/test_calc.py::test_lo"],
                    PASS_TO_PASS=p2p)


P2P = ["tests/test_calc.py::test_hi", "tests/test_calc.py::test_double"]


def _executor(project: dict[str, str], tmp_path: Path, p2p: list[str]) -> InstanceExecutor:
    settings = Settings(timeout=60, store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache", workers=1)
    return InstanceExecutor(_instance(project, p2p), Path(project["repo"]), settings, Store(settings.store))


def _mutant(project: dict[str, str], name: str) -> Mutant:
    return Mutant(id=name, operator=Operator.BEHAVIOR_SUBSTITUTION, description=name, location="calc/__init__.py:4",
                  patch=project[name])


def test_pass_to_pass_tests_are_those_of_the_golden_files_that_pass_on_the_fixed_code(
        project: dict[str, str], tmp_path: Path) -> None:
    listed = [*P2P, "tests/test_calc.py::test_gone", "tests/test_other.py::test_x", "test_no_such_name",
              "tests/test_calc.py::test_lo"]  # a FAIL_TO_PASS id in the list is not a PASS_TO_PASS test
    with _executor(project, tmp_path, listed) as ex:
        found = pass_to_pass(ex, project["fix"])
    assert found.test is not None
    assert found.test.ids == P2P
    # each name left out is said, by reason: a test that does not exist, another file, a name found nowhere
    assert found.left_out == {"other_file": 1, "not_found": 2}
    assert found.to_json()["measured"]
    assert found.to_json()["tests"] == 2


@pytest.mark.parametrize(("listed", "why"), [([], "lists no PASS_TO_PASS"),
                                             (["tests/test_other.py::test_x"], "golden test's files (1 other_file)"),
                                             (["tests/test_calc.py::test_gone"], "none of the PASS_TO_PASS")])
# a test that exists but fails on the fixed code here is left out too (``not_passing_fixed``): checked in
# test_a_pass_to_pass_test_failing_on_the_fixed_code_is_left_out
def test_no_measurable_pass_to_pass_test_is_a_reason_not_a_silent_zero(
        project: dict[str, str], tmp_path: Path, listed: list[str], why: str) -> None:
    with _executor(project, tmp_path, listed) as ex:
        found = pass_to_pass(ex, project["fix"])
    assert found.test is None
    assert found.reason is not None
    assert why in found.reason


def test_a_pass_to_pass_test_failing_on_the_fixed_code_is_left_out(project: dict[str, str], tmp_path: Path) -> None:
    # test_lo fails on the buggy code: named as PASS_TO_PASS of an instance whose fix is the empty change, it
    # fails "on the fixed code" and is left out with its reason, the others measured
    with _executor(project, tmp_path, [*P2P, "tests/test_calc.py::test_lo"]) as ex:
        ex.instance.FAIL_TO_PASS = []
        found = pass_to_pass(ex, make_patch(Path(project["repo"]), {"README": "x\n"}))
    assert found.test is not None
    assert found.test.ids == P2P
    assert found.left_out == {"not_passing_fixed": 1}


def test_mutants_breaking_or_hanging_pass_to_pass_tests_are_implausible_and_not_counted(
        project: dict[str, str], tmp_path: Path) -> None:
    with _executor(project, tmp_path, P2P) as ex:
        p2p = pass_to_pass(ex, project["fix"]).test
        golden, lax = ex.golden_test(), ex.test_patch(project["lax"], name="lax")
        names = ["to_hi", "to_hi_again", "to_minus", "breaks_hi", "hangs_hi"]
        mutants = [_mutant(project, n) for n in names]
        with Workers(ex) as team:
            results = run_mutants(team, mutants, MutantRunPlan(lax, golden, limits=(5.0, 5.0, 3.0),
                                                               skip_unneeded=True, plausibility=p2p))
    by = {r.mutant.id: r for r in results}
    assert [by[n].plausible for n in names] == [True, True, True, False, False]
    assert by["breaks_hi"].cell is None
    assert by["breaks_hi"].inadmissible_reason == IMPLAUSIBLE
    assert by["hangs_hi"].plausibility is not None
    assert by["hangs_hi"].plausibility.outcome is Outcome.TIMEOUT
    assert by["hangs_hi"].inadmissible_reason == IMPLAUSIBLE  # not a candidate timeout: the mutant hangs a P2P test
    assert (by["to_hi"].cell, by["to_hi_again"].cell, by["to_minus"].cell) == (Cell.BETA, Cell.BETA, Cell.DELTA)
    frame = sampling_frame(results, mutants)
    assert frame["behavior_substitution"] == {"pool": 5, "drawn": 5, "admissible": 3, "implausible": 2}
    # distinct behaviours: the two edits that return hi are one wrong behaviour, counted once
    behaviours.assign(results)
    assert by["to_hi"].behaviour == by["to_hi_again"].behaviour != by["to_minus"].behaviour
    assert by["breaks_hi"].behaviour is None
    matrix = behaviours.behaviour_matrix(results)
    assert matrix.counts() == {"alpha": 0, "beta": 1, "gamma": 0, "delta": 1}
    assert matrix.beta == ["to_hi"]


def test_evaluate_measures_plausibility_and_paper_classes_keep_the_old_admission(
        project: dict[str, str], tmp_path: Path) -> None:
    with _executor(project, tmp_path, P2P) as ex:
        golden, lax = ex.golden_test(), ex.test_patch(project["lax"], name="lax")
        result = evaluate(ex, MPERequest(project["fix"], lax, golden, MPEConfig(max_mutants=None)))
        paper = evaluate(ex, MPERequest(project["fix"], lax, golden, MPEConfig(paper_classes=True, per_operator=50)))
    assert result.plausibility == {"measured": True, "tests": 2, "reason": None, "left_out": {}}
    assert result.counted == "behaviours"
    implausible = [r for r in result.mutants if r.inadmissible_reason == IMPLAUSIBLE]
    assert all(r.plausible is False and r.cell is None for r in implausible)
    assert sum(row["implausible"] for row in result.frame.values()) == len(implausible)
    assert result.behaviour_matrix.admissible <= result.matrix.admissible
    assert result.row().behaviours == result.behaviour_matrix.admissible
    assert result.row().implausible == len(implausible)
    # a small pool: every mutant ran and the interval is the binomial one, never the point
    assert result.stop == "pool"
    assert result.census
    if result.test_class is TestClass.BORDERLINE:
        assert result.undecided == "pool_too_small"
    # --paper-classes: no PASS_TO_PASS runs, every admissible mutant counts, one by one
    assert paper.plausibility == {}
    assert paper.counted == "mutants"
    assert all(r.plausibility is None for r in paper.mutants)
    assert paper.laxity == paper.matrix.laxity


def test_an_empty_pool_is_inconclusive_with_its_reason(project: dict[str, str], tmp_path: Path) -> None:
    with _executor(project, tmp_path, P2P) as ex:
        golden = ex.golden_test()
        # symptom_suppression needs an exception on the buggy code; none is raised here: no mutant at all
        config = MPEConfig(operators=[Operator.SYMPTOM_SUPPRESSION])
        result = evaluate(ex, MPERequest(project["fix"], golden, golden, config))
    assert result.test_class is TestClass.INCONCLUSIVE
    assert result.undecided == "empty_pool"
