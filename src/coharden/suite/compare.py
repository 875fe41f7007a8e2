"""Arms x replicates from one frozen round 0, and the metrics that compare them.

Metrics (per arm, over its *complete* replicates; ``S0`` = mutants that survive the round-0 suite, the same set
for every arm and replicate because round 0 is frozen):

* **kill rate** = sum of round-0 survivors killed / sum of ``S0`` (a ratio estimator; with a frozen round 0
  it equals the mean of the per-replicate rates);
* **95% interval**: cluster bootstrap over replicates (:func:`cluster_bootstrap_ci`, seeded): a replicate's
  mutants share its suite, so they are resampled together, never one by one;
* **difference to the control arm** (the first arm): paired cluster bootstrap over the replicate indices both
  arms completed (:func:`paired_bootstrap_diff_ci`); replicate ``r`` of every arm sees the same first prompt;
* **cost per killed mutant** = the arm's LLM cost in USD / mutants killed (``None`` when nothing was killed);
  **tokens** = prompt + completion tokens of every call of the arm, failed calls included.

Fail closed: a replicate that ended in an LLM failure (truncated or withheld reply, provider error, budget,
replay miss) is *incomplete*: it is listed with its reason and excluded from the rate and the interval, never
counted as zero kills. An arm with no complete replicate has no rate. Rejected rounds (every addition rejected)
are a legitimate outcome, counted and reported per arm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coharden.analysis.stats import bootstrap_interval
from coharden.analysis.stats import percentile as percentile  # re-exported: its home was here
from coharden.llm import LLMClient, LLMConfig
from coharden.suite.loop import HardeningConfig, HardeningStart, Replicate, Round0, SuiteRun, harden
from coharden.suite.operators import ModuleMutant
from coharden.suite.runner import MutantStatus

# --- statistics (pure) ---------------------------------------------------------------------------------


def ratio(clusters: Sequence[tuple[int, int]]) -> float | None:
    """sum(killed) / sum(total) over (killed, total) clusters; None when the total is 0."""
    den = sum(t for _, t in clusters)
    return sum(k for k, _ in clusters) / den if den else None


def cluster_bootstrap_ci(clusters: Sequence[tuple[int, int]], *, n_boot: int = 2000, seed: int = 0,
                         level: float = 0.95) -> tuple[float, float] | None:
    """Percentile interval of the pooled ratio, resampling whole clusters (replicates) with replacement.

    Draw ``b`` (for b in range(n_boot)) picks ``n`` indices with ``random.Random(seed).randrange(n)``, in
    order, from one generator shared by all draws; a draw whose total is 0 is skipped. The bounds are the
    ``(1 - level) / 2`` and ``(1 + level) / 2`` :func:`percentile` s of the draws' ratios. None with no
    clusters (or no draw with a non-zero total).
    """
    return bootstrap_interval(len(clusters), lambda idx: ratio([clusters[i] for i in idx]), n_boot=n_boot,
                              seed=seed, level=level)


def paired_bootstrap_diff_ci(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]], *, n_boot: int = 2000,
                             seed: int = 0, level: float = 0.95) -> tuple[float, float] | None:
    """Interval of ratio(a) - ratio(b), resampling the same replicate indices for both (paired clusters)."""
    if len(a) != len(b):
        raise ValueError("paired bootstrap needs the same replicates in both arms")

    def diff(idx: list[int]) -> float | None:
        ra, rb = ratio([a[i] for i in idx]), ratio([b[i] for i in idx])
        return ra - rb if ra is not None and rb is not None else None

    return bootstrap_interval(len(a), diff, n_boot=n_boot, seed=seed, level=level)


# --- arms ----------------------------------------------------------------------------------------------


@dataclass
class Arm:
    """One condition: a critic model, or none (the control arm)."""

    name: str
    llm: LLMConfig | None = None

    def describe(self) -> dict[str, Any]:
        if self.llm is None:
            return {"name": self.name, "critic": None}
        cfg = self.llm
        return {"name": self.name, "critic": {"model": cfg.model, "api_base": cfg.api_base,
                                              "temperature": cfg.temperature, "max_tokens": cfg.max_tokens,
                                              "extra_params": cfg.extra_params}}


def arm_summary(arm: Arm, runs: Sequence[SuiteRun], *, n_boot: int, seed: int, level: float) -> dict[str, Any]:
    complete = [r for r in runs if r.complete]
    clusters = [(len(r.killed), len(r.survivors0)) for r in complete]
    killed = sum(len(r.killed) for r in complete)
    usage = [r.usage() for r in runs]
    cost = math.fsum(u["cost_usd"] for u in usage)
    calls = [rd.call for r in runs for rd in r.rounds if rd.call is not None]
    failures: dict[str, int] = {}
    for call in calls:
        if call.failure:
            failures[call.failure] = failures.get(call.failure, 0) + 1
    rejected: dict[str, int] = {}
    for r in runs:
        for reason, n in r.rejected_additions().items():
            rejected[reason] = rejected.get(reason, 0) + n
    status = "ok" if len(complete) == len(runs) else ("incomplete" if complete else "failed")
    return {
        **arm.describe(),
        "status": status,
        "replicates": len(runs),
        "complete_replicates": len(complete),
        "incomplete": [{"replicate": r.replicate, **(r.failure or {})} for r in runs if not r.complete],
        "survivors0": clusters[0][1] if clusters else (len(runs[0].survivors0) if runs else 0),
        "killed": killed,
        "kill_rate": ratio(clusters),
        "kill_rate_ci": cluster_bootstrap_ci(clusters, n_boot=n_boot, seed=seed, level=level),
        "per_replicate": [{"replicate": r.replicate, "complete": r.complete, "killed": len(r.killed),
                           "survivors0": len(r.survivors0), "kill_rate": r.kill_rate, "stop_reason": r.stop_reason,
                           "rounds": len(r.rounds)} for r in runs],
        "cost_usd": cost,
        "cost_per_killed_usd": cost / killed if killed else None,
        "tokens": {"prompt": sum(int(u["prompt_tokens"]) for u in usage),
                   "completion": sum(int(u["completion_tokens"]) for u in usage),
                   "total": sum(int(u["prompt_tokens"] + u["completion_tokens"]) for u in usage)},
        "calls": len(calls),
        "truncated_replies": failures.get("truncated", 0),
        "llm_failures": dict(sorted(failures.items())),
        "rejected_rounds": sum(r.rejected_rounds() for r in runs),
        "rejected_additions": dict(sorted(rejected.items())),
    }


@dataclass(frozen=True)
class CompareDesign:
    """A comparison's design, fixed before any test runs (what the pre-registration states): the arms in
    order (the first is the control), the replicates per arm, the rounds (whose seed also seeds the bootstrap)
    and the bootstrap's resamples and level."""

    arms: Sequence[Arm]
    replicates: int
    hardening: HardeningConfig = field(default_factory=HardeningConfig)
    n_boot: int = 2000
    level: float = 0.95


@dataclass
class CompareResult:
    round0: Round0
    mutants: list[ModuleMutant]
    runs: dict[str, list[SuiteRun]]
    summary: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**self.summary, "round0": self.round0.to_json(),
                "mutants": [m.to_json() for m in self.mutants]}


def run_compare(start: HardeningStart, design: CompareDesign, *, client_for: Callable[[Arm], LLMClient | None],
                on_run: Callable[[SuiteRun], None] | None = None) -> CompareResult:
    """Every arm for replicates ``0..replicates-1`` from the same round 0; one LLM client per arm."""
    arms, config, n_boot, level = design.arms, design.hardening, design.n_boot, design.level
    round0 = start.round0
    runs: dict[str, list[SuiteRun]] = {}
    for arm in arms:
        client = client_for(arm)
        runs[arm.name] = []
        for rep in range(design.replicates):
            run = harden(start, Replicate(client, arm.name, rep), config)
            runs[arm.name].append(run)
            if on_run is not None:
                on_run(run)
    summaries = {arm.name: arm_summary(arm, runs[arm.name], n_boot=n_boot, seed=config.seed, level=level)
                 for arm in arms}
    control = arms[0].name
    differences: dict[str, Any] = {}
    for arm in arms[1:]:
        both = [(a, b) for a, b in zip(runs[arm.name], runs[control], strict=True) if a.complete and b.complete]
        a = [(len(x.killed), len(x.survivors0)) for x, _ in both]
        b = [(len(y.killed), len(y.survivors0)) for _, y in both]
        ratio_a, ratio_b = ratio(a), ratio(b)
        differences[f"{arm.name} - {control}"] = {
            "replicates": len(both), "difference": (ratio_a - ratio_b) if both and ratio_a is not None
            and ratio_b is not None else None,
            "ci": paired_bootstrap_diff_ci(a, b, n_boot=n_boot, seed=config.seed, level=level)}
    summary = {"schema": "coharden-suite-compare-1", "round0_sha256": round0.sha256,
               "mutants_total": len(start.mutants), "round0_killed": len(round0.ids(MutantStatus.KILLED)),
               "round0_survivors": len(round0.ids(MutantStatus.SURVIVED)),
               "round0_timeouts": len(round0.ids(MutantStatus.TIMEOUT)),
               "round0_errors": len(round0.ids(MutantStatus.ERROR)),
               "replicates": design.replicates, "level": level, "n_boot": n_boot, "seed": config.seed,
               "arms": summaries, "differences_to_control": differences,
               "complete": all(s["status"] == "ok" for s in summaries.values())}
    return CompareResult(round0, list(start.mutants), runs, summary)
