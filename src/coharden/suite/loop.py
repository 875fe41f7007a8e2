"""The hardening loop: round 0 (seed tests, a saved suite, or the Tester), then Critic rounds until a round
kills no new mutant, no mutant survives, or the round budget is spent.

Every verdict is mechanical (pytest runs through :class:`~coharden.suite.runner.KillOracle`). A round's new
tests are run only against the mutants that survived the previous suite: the old tests already passed on
them and the suite is add-only, so a survivor is killed exactly when a new test fails on it. A mutant that
times out under the new tests leaves the survivor pool as ``timeout`` (never a kill).

Stop reasons: ``no_survivors``, ``no_new_kills``, ``rejected_round`` (every addition was rejected),
``max_rounds``, ``no_critic`` (the control arm), ``llm_failure`` (truncated / withheld reply, provider error,
budget, replay miss: the run is marked incomplete and must not be scored).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coharden.errors import CoHardenError
from coharden.llm import LLMClient
from coharden.suite.critic import add_tests, shown_mutants
from coharden.suite.guard import GuardResult, apply_reply
from coharden.suite.operators import ModuleMutant
from coharden.suite.roles import RoleCall, RoleContext
from coharden.suite.runner import KillOracle, MutantStatus, RunResult
from coharden.suite.tester import write_suite


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class SuiteRound:
    """One round of suite hardening: which role ran, what it was shown, what its suite killed (not the
    CoHarden loop's :class:`~coharden.schema.round_record.RoundRecord`)."""

    round: int
    role: str
    status: str = "ok"
    call: RoleCall | None = None
    guard: GuardResult | None = None
    shown: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    kills_by_test: dict[str, list[str]] = field(default_factory=dict)
    timeouts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "role": self.role, "status": self.status,
                "call": self.call.to_json() if self.call else None,
                "guard": self.guard.to_json() if self.guard else None, "shown": self.shown,
                "killed": self.killed, "kills_by_test": self.kills_by_test, "timeouts": self.timeouts,
                "errors": self.errors}


@dataclass
class Round0:
    """The frozen starting point shared by every arm: the suite and its verdict on every mutant."""

    suite: str
    results: dict[str, RunResult]
    record: SuiteRound | None = None

    @property
    def sha256(self) -> str:
        return sha256(self.suite)

    def ids(self, status: MutantStatus) -> list[str]:
        return [k for k, r in self.results.items() if r.status is status]

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, **{s.value: self.ids(s) for s in MutantStatus},
                "record": self.record.to_json() if self.record else None}


@dataclass(frozen=True)
class HardeningStart:
    """What every arm and replicate starts from: the kill oracle (the module and its sandboxes), the mutants
    and the frozen round 0 (its suite and its verdict on each mutant)."""

    oracle: KillOracle
    mutants: Sequence[ModuleMutant]
    round0: Round0


@dataclass(frozen=True)
class Replicate:
    """One replicate of one arm: its critic (None: the control arm, round 0 only), the arm's name (the
    instance id its LLM calls are made under) and the replicate's index (their sample index: replicates differ
    even at temperature 0, and replicate ``r`` of every arm sees the same first prompt)."""

    critic: LLMClient | None
    arm: str = "critic"
    index: int = 0


@dataclass
class HardeningConfig:
    """Rounds of suite hardening (not the CoHarden loop's :class:`~coharden.loop.config.LoopConfig`)."""

    max_rounds: int = 3
    max_shown: int = 10
    seed: int = 0


@dataclass
class SuiteRun:
    """One arm's run from round 0 (one replicate)."""

    arm: str
    replicate: int
    round0_sha256: str
    survivors0: list[str]
    rounds: list[SuiteRound] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    """Round-0 survivors killed by a later round."""
    survivors: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)
    stop_reason: str = ""
    failure: dict[str, str] | None = None
    final_suite: str = ""

    @property
    def complete(self) -> bool:
        return self.failure is None

    @property
    def kill_rate(self) -> float | None:
        return len(self.killed) / len(self.survivors0) if self.survivors0 else None

    def usage(self) -> dict[str, float]:
        calls = [r.call for r in self.rounds if r.call is not None]
        return {"calls": len(calls), "prompt_tokens": sum(c.prompt_tokens for c in calls),
                "completion_tokens": sum(c.completion_tokens for c in calls),
                "cost_usd": sum(c.cost_usd for c in calls)}

    def rejected_rounds(self) -> int:
        return sum(1 for r in self.rounds if r.status == "rejected")

    def rejected_additions(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for r in self.rounds:
            for reason, n in (r.guard.rejected if r.guard else {}).items():
                total[reason] = total.get(reason, 0) + n
        return dict(sorted(total.items()))

    def to_json(self, *, with_suite: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "arm": self.arm, "replicate": self.replicate, "round0_sha256": self.round0_sha256,
            "complete": self.complete, "failure": self.failure, "stop_reason": self.stop_reason,
            "survivors0": len(self.survivors0), "killed": self.killed, "kill_rate": self.kill_rate,
            "survivors": self.survivors, "timeouts": self.timeouts, "usage": self.usage(),
            "rejected_rounds": self.rejected_rounds(), "rejected_additions": self.rejected_additions(),
            "rounds": [r.to_json() for r in self.rounds],
        }
        if with_suite:
            data["final_suite"] = self.final_suite
        return data


def build_round0(oracle: KillOracle, seed_suite: str, tester: LLMClient | None, *,
                 sample_index: int = 0) -> tuple[str, SuiteRound]:
    """The round-0 suite: the seed tests, plus the Tester's guarded additions when a tester is given.
    Fails closed (raises) on a tester LLM failure or when no test at all is left."""
    if tester is None:
        if not seed_suite.strip():
            raise CoHardenError("no round-0 suite: give seed tests (--tests), a saved suite (--round0) or a "
                                "--tester-model")
        return seed_suite, SuiteRound(0, "seed")
    call = write_suite(RoleContext(tester, oracle.module_rel, oracle.original, sample_index, "tester"), seed_suite)
    record = SuiteRound(0, "tester", call=call)
    if not call.ok:
        raise CoHardenError(f"tester ({call.model}) failed: {call.failure}: {call.message[:300]}")
    record.guard = apply_reply(call.content, seed_suite, oracle, header="round 0 (tester)")
    if record.guard.round_rejected:
        record.status = "rejected"
        if not seed_suite.strip():
            raise CoHardenError(f"tester ({call.model}) produced no usable test: {record.guard.round_rejected} "
                                f"({record.guard.rejected})")
    return record.guard.suite, record


def evaluate_round0(oracle: KillOracle, mutants: Sequence[ModuleMutant], suite: str, *,
                    record: SuiteRound | None = None,
                    progress: Callable[[ModuleMutant, RunResult], None] | None = None) -> Round0:
    """Baseline and forced-fail sanity runs, then every mutant against the round-0 suite."""
    oracle.baseline(suite)
    oracle.forced_fail(suite)
    return Round0(suite, oracle.run_mutants(mutants, suite, progress=progress), record)


def harden(start: HardeningStart, replicate: Replicate, config: HardeningConfig, *,
           progress: Callable[[str], None] | None = None) -> SuiteRun:
    oracle, round0, arm = start.oracle, start.round0, replicate.arm
    by_id = {m.id: m for m in start.mutants}
    survivors = [by_id[i] for i in round0.ids(MutantStatus.SURVIVED)]
    run = SuiteRun(arm, replicate.index, round0.sha256, [m.id for m in survivors])
    suite = round0.suite
    critic = None if replicate.critic is None else RoleContext(replicate.critic, oracle.module_rel, oracle.original,
                                                               replicate.index, arm)
    for k in range(1, config.max_rounds + 1):
        if not survivors:
            run.stop_reason = "no_survivors"
            break
        if critic is None:
            run.stop_reason = "no_critic"
            break
        shown = shown_mutants(survivors, config.max_shown, f"{config.seed}:{replicate.index}:{k}")
        call = add_tests(critic, suite, shown, len(survivors))
        record = SuiteRound(k, "critic", call=call, shown=[m.id for m in shown])
        run.rounds.append(record)
        if not call.ok:
            record.status = "llm_failure"
            run.failure = {"kind": call.failure or "", "round": str(k), "message": call.message[:500]}
            run.stop_reason = "llm_failure"
            break
        record.guard = apply_reply(call.content, suite, oracle, header=f"round {k} (critic)")
        if record.guard.round_rejected or not record.guard.accepted:
            record.status = "rejected"
            run.stop_reason = "rejected_round"
            break
        suite = record.guard.suite
        results = oracle.run_mutants(survivors, suite, record.guard.accepted)
        for m in survivors:
            result = results[m.id]
            if result.status is MutantStatus.KILLED:
                record.killed.append(m.id)
                for test in result.failed:
                    top = test.split("::")[0].split("[")[0]
                    record.kills_by_test.setdefault(top, []).append(m.id)
            elif result.status is MutantStatus.TIMEOUT:
                record.timeouts.append(m.id)
            elif result.status is MutantStatus.ERROR:
                record.errors.append(m.id)
        run.killed += record.killed
        run.timeouts += record.timeouts
        gone = set(record.killed) | set(record.timeouts)
        survivors = [m for m in survivors if m.id not in gone]
        if progress is not None:
            progress(f"{arm} rep {replicate.index} round {k}: +{len(record.killed)} killed, {len(survivors)} left")
        if not record.killed:
            record.status = "no_new_kills"
            run.stop_reason = "no_new_kills"
            break
    else:
        run.stop_reason = "no_survivors" if not survivors else "max_rounds"
    run.survivors = [m.id for m in survivors]
    run.final_suite = suite
    return run
