"""The laxity's interval, the class it decides, the sequential draw and the study split (issue 33): pure parts."""

from __future__ import annotations

import math

import pytest

from coharden.loop.decision import Decision, decide
from coharden.mpe.sequential import Stop, capped, operator_order, rounds, stop_reason
from coharden.schema.estimate import Estimate, clopper_pearson
from coharden.schema.matrix import FAIL_TO_PASS, TestClass, classify
from coharden.schema.mutant import Mutant, Operator
from coharden.study.split import in_split, select, split_of


def test_clopper_pearson_matches_the_closed_forms() -> None:
    # k = 0: upper = 1 - (alpha/2)^(1/n); k = n: lower = (alpha/2)^(1/n)
    for n in (1, 3, 17, 45):
        low, high = clopper_pearson(0, n)
        assert low == 0.0
        assert math.isclose(high, 1 - 0.025 ** (1 / n), abs_tol=1e-9)
        low, high = clopper_pearson(n, n)
        assert high == 1.0
        assert math.isclose(low, 0.025 ** (1 / n), abs_tol=1e-9)
    # a tabulated value: 5 of 10 at 95 % is [0.1871, 0.8129]
    low, high = clopper_pearson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.1871, 0.8129)
    narrow, wide = clopper_pearson(2, 20, 0.8), clopper_pearson(2, 20, 0.99)
    assert wide[0] < narrow[0] < 0.1 < narrow[1] < wide[1]


@pytest.mark.parametrize(("k", "n", "confidence"), [(1, 0, 0.95), (3, 2, 0.95), (1, 5, 0.5), (1, 5, 1.0)])
def test_clopper_pearson_refuses_bad_input(k: int, n: int, confidence: float) -> None:
    with pytest.raises(ValueError, match="clopper_pearson|confidence"):
        clopper_pearson(k, n, confidence)


def test_the_interval_decides_the_class_and_borderline_straddles_tau() -> None:
    tau = 0.202
    assert classify(FAIL_TO_PASS, laxity=0.0, tau=tau, interval=(0.0, 0.15)) is TestClass.RIGOROUS
    assert classify(FAIL_TO_PASS, laxity=0.5, tau=tau, interval=(0.202, 0.8)) is TestClass.LAX  # at tau: Lax
    assert classify(FAIL_TO_PASS, laxity=0.1, tau=tau, interval=(0.01, 0.3)) is TestClass.BORDERLINE
    # the paper's point rule without an interval; no laxity: Inconclusive either way
    assert classify(FAIL_TO_PASS, laxity=0.1, tau=tau) is TestClass.RIGOROUS
    assert classify(FAIL_TO_PASS, laxity=None, tau=tau, interval=None) is TestClass.INCONCLUSIVE


def test_estimate_sides_and_a_spent_pool_is_still_a_sample() -> None:
    assert Estimate(beta=0, admissible=16).side(0.202) == "borderline"  # 0 of 16: upper 0.206
    assert Estimate(beta=0, admissible=17).side(0.202) == "rigorous"  # 0 of 17: upper 0.195
    assert Estimate(beta=3, admissible=3).side(0.202) == "lax"  # 3 of 3: lower 0.292
    assert Estimate(beta=0, admissible=0).side(0.202) is None
    # the whole pool ran: the pool is itself a sample of the plausible wrong fixes, so 1 of 8 is no more certain
    # than any 8 draws (issue 50: 1/5 was "Rigorous" with a zero-width interval)
    census = Estimate(beta=1, admissible=8, census=True)
    assert census.interval == Estimate(beta=1, admissible=8).interval
    assert census.side(0.202) == "borderline"
    assert census.text().startswith("0.125 [0.003, 0.5")
    assert census.text().endswith(", whole pool]")
    assert Estimate(beta=1, admissible=5, census=True).side(0.202) == "borderline"


def _mutant(op: Operator, n: int) -> Mutant:
    return Mutant(id=f"{op}-{n}", operator=op, description="", location="", patch="")


def test_rounds_take_one_mutant_of_each_operator_in_a_seeded_order() -> None:
    pool = [_mutant(Operator.INCOMPLETE_FIX, i) for i in range(3)] + \
           [_mutant(Operator.WIDENED_SCOPE, i) for i in range(1)] + \
           [_mutant(Operator.CALLER_PATCH, i) for i in range(2)]
    planned = rounds(pool, seed=5)
    assert [len(r) for r in planned] == [3, 2, 1]
    order = operator_order(["incomplete_fix", "widened_scope", "caller_patch"], 5)
    assert [m.operator for m in planned[0]] == order
    assert [m.id for m in planned[2]] == ["incomplete_fix-2"]  # each operator's own draw order is kept
    assert rounds(pool, seed=5) == planned  # the same seed, the same rounds
    orders = {tuple(operator_order(["a", "b", "c", "d"], seed)) for seed in range(20)}
    assert len(orders) > 1  # the seed does choose the order
    assert [len(r) for r in capped(planned, 4)] == [3, 1]
    assert capped(planned, None) == planned
    assert sum(len(r) for r in capped(planned, 100)) == 6


def test_stop_reasons() -> None:
    assert stop_reason(drawn=6, pool=6, decided=True) is Stop.POOL
    assert stop_reason(drawn=3, pool=6, decided=True) is Stop.DECIDED
    assert stop_reason(drawn=4, pool=6, decided=False) is Stop.CAP


def test_the_loop_reads_the_interval_and_keeps_the_point_rule_without_it() -> None:
    common = {"admissible": 20, "tau": 0.2, "changed": True}
    assert decide(**common, laxity=0.0, interval=(0.0, 0.17)) is Decision.CLEAN
    assert decide(**common, laxity=0.05, interval=(0.001, 0.25)) is Decision.BORDERLINE
    assert decide(**common, laxity=0.5, interval=(0.27, 0.73)) is Decision.REGRESSION
    assert decide(**{**common, "changed": False}, laxity=0.0, interval=(0.0, 0.17)) is Decision.UNCHANGED
    assert decide(**common, laxity=0.05) is Decision.CLEAN  # Algorithm 1's rule (--paper-classes)
    assert decide(**common, laxity=0.25) is Decision.REGRESSION


def test_the_split_is_a_fixed_function_of_the_instance_id() -> None:
    ids = [f"{repo}-{n}" for repo in ("sympy__sympy", "django__django", "astropy__astropy") for n in range(200)]
    dev, held = select(ids, "dev"), select(ids, "heldout")
    assert sorted(dev + held) == sorted(ids)
    assert not set(dev) & set(held)
    assert select(ids, "all") == ids
    for repo in ("sympy__sympy", "django__django", "astropy__astropy"):  # every repository is split
        share = sum(i.startswith(repo) for i in dev) / 200
        assert 0.35 < share < 0.65
    assert split_of("sympy__sympy-20438") == split_of("sympy__sympy-20438")
    with pytest.raises(ValueError, match="known"):
        in_split("x", "test")
