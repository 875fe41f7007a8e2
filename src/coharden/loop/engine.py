"""The CoHarden loop (the paper's Algorithm 1, made exact) and its baselines, for one instance.

Round 0 (lax-init): the test-only agent writes t0, aimed at the most observable witness of the bug; the
clean-patch gate keeps it off source files and t0 must fail on the buggy code. Rounds k = 1..K: the joint
agent, given the issue, t_ref, c_{k-1} and the feedback, emits (t_k, c_k); the F->P gate requires t_k to fail
on the buggy code and pass on c_k. Then c_k is mutated (N per targeted operator) and every admissible
mutant runs against t_k and t_ref (the temporal matrix), l_k = beta / admissible:

* l_k > tau: regression -- the test reverts to t0 (t_ref <- t0), the fix is kept, the next round's feedback
  names the regressed mutants;
* l_k <= tau and t_k differs from t_ref (normalized AST): clean round, return (t_k, c_k);
* t_k unchanged: t_ref <- t_k, continue with retry feedback;
* no admissible mutant (or a reference that is not F->P on c_k, or an incomplete LLM pool): inconclusive,
  the check is skipped and counted; t_ref <- t_k;
* K rounds used: return (t_K, c_K) (decision ``rounds_exhausted``).

A model error that a next round cannot cure (no or a wrong API key, a parameter the model rejects, a prompt
over the context window, a provider down through every retry) ends the instance at once with decision
``model_error`` and its kind; a reached cost cap ends it with ``cost_cap``. Both keep the finished rounds.

The loop never sees the golden fix or test: the agent, its critic and the mechanical checks work on a copy
of the instance with them removed. State is saved after every round, so a killed run resumes at the last
finished round; each round writes a :class:`~coharden.schema.round_record.RoundRecord`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from coharden.critic.builtin import default_critic
from coharden.critic.context import CriticContext, Mode
from coharden.errors import CoHardenError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.verify import fail_to_pass
from coharden.execution.workspace import Workspace
from coharden.llm import ErrorKind, LLMError
from coharden.loop import feedback
from coharden.loop.config import Method
from coharden.loop.decision import Decision, decide, same_test
from coharden.loop.progress import LoopProgress, Phase
from coharden.loop.run import LoopRun
from coharden.loop.state import LoopState, RoundOutcome
from coharden.mpe.evaluate import MPEError, MPERequest, MPEResult, evaluate
from coharden.mpe.logs import folder_name
from coharden.mpe.sequential import Stop
from coharden.patches import split_patch
from coharden.schema.instance import Instance
from coharden.schema.matrix import TestClass
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.round_record import MatrixCounts, RoundRecord
from coharden.schema.testpatch import TestPatch

if TYPE_CHECKING:  # agents load on use: the loop module imports on a core install (no agent extras)
    from coharden.agent.base import Agent, AgentResult

#: Model error kinds after which the loop goes on (a next round may get a usable reply); every other kind ends
#: the instance, since the same call fails again.
CONTINUABLE_KINDS = frozenset({ErrorKind.TRUNCATED.value, ErrorKind.UNUSABLE_REPLY.value})
EXTENSIONS = 2
"""How often a Borderline round doubles the cap of sequential MPE before it decides."""

LAX_INIT_NOTES = ("Aim the test at the most observable witness of the bug: the simplest call that shows the "
                  "behaviour the issue reports.")


class LoopResult(BaseModel):
    instance_id: str
    method: str
    fix: str
    test: str
    decision: str
    rounds: list[RoundOutcome]
    cost_usd: float
    inconclusive_rounds: int
    error_kind: str = ""
    """The model error that ended the instance (``coharden.llm.ErrorKind``: auth, bad_parameter, cost_cap, ...)."""
    note: str = ""
    """Why the instance ended early, in the error's own words."""


class InstanceStopped(Exception):
    """The agent stopped on a model error no next round can cure; the instance ends with its kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def instance_folder(output: Path, instance_id: str) -> Path:
    """Where one instance's state, trajectories and round files live: its id as one plain path component (as the
    MPE log folders name it), so that an id holding ``/``, ``..`` or a control character names a folder under
    ``output/instances`` and never a path outside it."""
    return output / "instances" / folder_name(instance_id)


def blind(instance: Instance) -> Instance:
    """The instance as the loop may see it: no golden fix, no golden test, no test ids."""
    return instance.model_copy(update={"patch": "", "test_patch": "", "FAIL_TO_PASS": [], "PASS_TO_PASS": []})


class InstanceLoop:
    """Runs one method on one instance; ``output`` holds its state, trajectories and round records."""

    def __init__(self, instance: Instance, repo: Path, agent: Agent, run: LoopRun, *,
                 llm_mutator: Any = None) -> None:
        config, injected_test = run.config, run.injected.get(instance.instance_id)
        if config.method is Method.FIX_WITH_TEST and not (injected_test or "").strip():
            raise CoHardenError(f"{instance.instance_id}: fix-with-test needs a test to inject")
        if config.mpe.llm is not None and llm_mutator is None:
            raise CoHardenError("--mutator llm needs a model for the LLM mutator")
        self.instance = blind(instance)
        self.repo = repo
        self.settings = run.settings
        self.agent = agent
        self.config = config
        self.output = run.output
        self.store = run.store
        self.ledger = run.ledger
        self.llm_mutator = llm_mutator
        self.injected_test = injected_test or ""
        self.run_name = run.run_name
        self.dir = instance_folder(run.output, instance.instance_id)
        self.state_path = self.dir / "state.json"
        self.records_path = run.output / "rounds" / f"{folder_name(self.run_name, model=True)}.jsonl"
        self.progress = run.progress
        self._round = 0

    def _phase(self, phase: Phase, decision: str = "") -> None:
        """Tell the listener (if any) where the run is; see :class:`LoopProgress`."""
        if self.progress is not None:
            one_shot = self.config.method in (Method.FIX_ONLY, Method.FIX_WITH_TEST, Method.TEST_ONLY, Method.COGEN)
            rounds = 1 if one_shot else self.config.rounds + 1
            self.progress(LoopProgress(self.instance.instance_id, self._round, rounds, phase, decision))

    # --- helpers --------------------------------------------------------------------------------------------
    def _spent(self) -> tuple[int, float]:
        if self.ledger is None:
            return 0, 0.0
        usage = self.ledger.run_usage()
        return usage.prompt_tokens + usage.completion_tokens, usage.cost_usd

    def _agent(self, executor: InstanceExecutor, mode: Mode, round_no: int, *, fix: str = "", test: str = "",
               notes: str = "") -> AgentResult:
        """One agent run in a fresh workspace that starts from base + ``fix`` + ``test``."""
        from coharden.agent.base import AgentTask

        self._round = round_no
        self._phase("agent")
        reference_test: TestPatch | str | None = self.injected_test or None
        context = CriticContext(mode, instance=self.instance, repo=self.repo, settings=self.settings,
                                executor=executor, reference_fix="", reference_test=reference_test)
        critic = default_critic(context, max_iterations=self.config.max_iterations)
        task = AgentTask.from_instance(self.instance, fix=fix, test=test if mode is not Mode.FIX_ONLY else
                                       (self.injected_test or test), notes=notes)
        with Workspace(self.repo, self.instance.base_commit) as workspace:
            workspace.apply(fix)
            workspace.apply(test)
            return self.agent.run(task, workspace, mode, critic,
                                  trajectory_path=self.dir / f"round{round_no}.traj.jsonl")

    def _record(self, state: LoopState, outcome: RoundOutcome, tokens: int) -> None:
        matrix = MatrixCounts.model_validate({k: len(v) for k, v in outcome.matrix.items()}) if outcome.matrix \
            else None
        record = RoundRecord(
            run=self.run_name, instance=state.instance_id, round=outcome.round, decision=outcome.decision,
            laxity=outcome.laxity if matrix else None, matrix=matrix, admissible=outcome.admissible if matrix else None,
            tokens=tokens, usd=outcome.cost_usd, mutant_usd=outcome.mutant_cost_usd,
            fix_patch=outcome.fix or None, test_patch=outcome.test or None,
            meta={"method": self.config.method.value, "agent_status": outcome.agent_status, "note": outcome.note,
                  **({"error_kind": outcome.error_kind} if outcome.error_kind else {})},
        )
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        with self.records_path.open("a") as handle:
            handle.write(record.model_dump_json(exclude_none=True) + "\n")

    def _finish_round(self, state: LoopState, outcome: RoundOutcome, before: tuple[int, float]) -> None:
        """Write the round's record, then the state: a kill in between only makes the round run again, and
        the resumed run drops the records past the saved state (see :meth:`run`)."""
        tokens, usd = self._spent()
        # the round's whole cost: the shared ledger's difference (agent and LLM mutants), else the agent's own
        # cost plus the mutants'
        outcome.cost_usd = round(usd - before[1], 10) if self.ledger is not None \
            else outcome.cost_usd + outcome.mutant_cost_usd
        self._record(state, outcome, tokens - before[0])
        state.rounds.append(outcome)
        state.round = outcome.round
        state.save(self.state_path)
        self._phase("round", outcome.decision)
        if outcome.error_kind and outcome.error_kind not in CONTINUABLE_KINDS:
            raise InstanceStopped(outcome.error_kind, outcome.note or f"the agent stopped: {outcome.agent_status}")

    def _result(self, state: LoopState) -> LoopResult:
        return LoopResult(instance_id=state.instance_id, method=state.method, fix=state.fix, test=state.test,
                          decision=state.final_decision, rounds=state.rounds,
                          cost_usd=sum(r.cost_usd for r in state.rounds),
                          inconclusive_rounds=sum(r.decision == Decision.INCONCLUSIVE for r in state.rounds),
                          error_kind=state.error_kind, note=state.final_note)

    def _finish(self, state: LoopState, decision: Decision) -> LoopResult:
        state.finished = True
        state.final_decision = decision.value
        state.save(self.state_path)
        self._phase("done", decision.value)
        return self._result(state)

    # --- the run --------------------------------------------------------------------------------------------
    def run(self) -> LoopResult:
        state = LoopState.load_or_new(self.state_path, instance_id=self.instance.instance_id,
                                      method=self.config.method.value, config_hash=self.config.digest())
        if state.finished:
            return self._result(state)
        if self.records_path.exists():
            self._drop_records_after(state.round)
        with InstanceExecutor(self.instance, self.repo, self.settings, self.store) as executor:
            try:
                return self._run(state, executor)
            except (InstanceStopped, LLMError) as exc:  # LLMError: a call outside an agent run (the LLM mutator)
                state.error_kind, state.final_note = exc.kind, str(exc)
                return self._finish(state, Decision.COST_CAP if exc.kind == ErrorKind.COST_CAP else
                                    Decision.MODEL_ERROR)

    def _drop_records_after(self, last_round: int) -> None:
        """A resumed run rewrites the rounds it redoes: drop this instance's records past the saved state."""
        keep = []
        for line in self.records_path.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if record and not (record.get("instance") == self.instance.instance_id
                               and record.get("round", -1) > last_round):
                keep.append(line)
        self.records_path.write_text("".join(line + "\n" for line in keep))

    def _run(self, state: LoopState, executor: InstanceExecutor) -> LoopResult:
        method = self.config.method
        if method in (Method.FIX_ONLY, Method.FIX_WITH_TEST, Method.TEST_ONLY, Method.COGEN):
            return self._one_shot(state, executor)
        if state.round < 0:
            if method is Method.NO_LAX_INIT:
                state.round = 0
                state.save(self.state_path)
            else:
                self._lax_init(state, executor)
        for k in range(state.round + 1, self.config.rounds + 1):
            decision = self._joint_round(state, executor, k)
            if decision in (Decision.CLEAN, Decision.DONE):
                return self._finish(state, decision)
        return self._finish(state, Decision.ROUNDS_EXHAUSTED)

    def _one_shot(self, state: LoopState, executor: InstanceExecutor) -> LoopResult:
        mode = {Method.FIX_ONLY: Mode.FIX_ONLY, Method.FIX_WITH_TEST: Mode.FIX_ONLY, Method.TEST_ONLY: Mode.TEST_ONLY,
                Method.COGEN: Mode.JOINT}[self.config.method]
        before = self._spent()
        result = self._agent(executor, mode, 1)
        source, tests = split_patch(result.submission or "", self.settings.tests.test_patterns)
        outcome = RoundOutcome(round=1, decision=Decision.DONE if result.accepted else Decision.GATE_FAILED,
                               fix=source if mode is not Mode.TEST_ONLY else "",
                               test=tests if mode is not Mode.FIX_ONLY else "",
                               agent_status=result.exit_status, cost_usd=result.cost or 0.0,
                               error_kind=result.error_kind or "", note=result.error or "")
        state.fix, state.test = outcome.fix, outcome.test
        self._finish_round(state, outcome, before)
        return self._finish(state, Decision(outcome.decision))

    def _lax_init(self, state: LoopState, executor: InstanceExecutor) -> None:
        before = self._spent()
        result = self._agent(executor, Mode.TEST_ONLY, 0, notes=LAX_INIT_NOTES)
        _, t0 = split_patch(result.submission or "", self.settings.tests.test_patterns)
        outcome = RoundOutcome(round=0, decision=Decision.LAX_INIT, test=t0, agent_status=result.exit_status,
                               error_kind=result.error_kind or "", cost_usd=result.cost or 0.0)
        problem = (result.error or "not accepted") if not result.accepted else self._fails_on_buggy(executor, t0)
        if problem or not t0.strip():
            outcome.decision, outcome.test = Decision.GATE_FAILED, ""
            outcome.note = problem or "no test written"
        state.t0 = state.t_ref = state.test = outcome.test
        self._finish_round(state, outcome, before)

    def _fails_on_buggy(self, executor: InstanceExecutor, test_patch: str) -> str:
        """'' when the test fails on the buggy code, else why not (mechanical verdict)."""
        self._phase("gate")
        try:
            test = executor.test_patch(test_patch, name="t0")
        except CoHardenError as exc:
            return str(exc)
        verdict = executor.verdict("", test)
        return "" if verdict.failed else f"the test does not fail on the buggy code ({verdict.short()})"

    def _joint_round(self, state: LoopState, executor: InstanceExecutor, k: int) -> Decision:
        before = self._spent()
        previous = state.rounds[-1] if state.rounds else None
        notes = previous.feedback if previous else ""
        if self.config.method is Method.SELF_REFINE and k > 1:
            notes = feedback.GENERIC_REFINE
        result = self._agent(executor, Mode.JOINT, k, fix=state.fix, test=state.t_ref or state.test, notes=notes)
        outcome = RoundOutcome(round=k, decision=Decision.GATE_FAILED, agent_status=result.exit_status,
                               error_kind=result.error_kind or "", cost_usd=result.cost or 0.0)
        c_k, t_k = split_patch(result.submission or "", self.settings.tests.test_patterns)
        problem = (result.error or "the critic did not accept the submission") if not result.accepted else \
            self._gate(executor, c_k, t_k)
        if problem:
            outcome.note = problem
            outcome.feedback = feedback.rejected(problem)
            self._finish_round(state, outcome, before)
            return Decision.GATE_FAILED
        outcome.fix, outcome.test = c_k, t_k
        if self.config.method in (Method.NO_HARDENING, Method.SELF_REFINE):
            state.fix, state.test = c_k, t_k
            outcome.decision = Decision.DONE if self.config.method is Method.NO_HARDENING else Decision.UNCHANGED
            outcome.feedback = feedback.GENERIC_REFINE
            self._finish_round(state, outcome, before)
            return Decision(outcome.decision)
        decision = self._harden(state, executor, outcome, k)
        self._finish_round(state, outcome, before)
        return decision

    def _gate(self, executor: InstanceExecutor, fix: str, test_patch: str) -> str:
        """The F->P gate, mechanically: '' when the test fails on the buggy code and passes on the fix."""
        if not fix.strip() or not test_patch.strip():
            return "the submission needs both a test and a source fix"
        self._phase("gate")
        try:
            test = executor.test_patch(test_patch, name="t_k")
        except CoHardenError as exc:
            return str(exc)
        return fail_to_pass(executor, test, fix).problem()

    def _estimate(self, executor: InstanceExecutor, fix: str, t_k: TestPatch, reference: TestPatch,
                  config: MPEConfig) -> MPEResult:
        """The round's MPE. A Borderline result stopped by the cap asks for more mutants: the cap doubles (at
        most ``EXTENSIONS`` times, until the pool is spent); the mutants already run come from the store."""
        llm = self.llm_mutator if config.llm is not None else None
        mpe = evaluate(executor, MPERequest(fix, t_k, reference, config), llm_mutator=llm)
        for _ in range(EXTENSIONS):
            if mpe.test_class is not TestClass.BORDERLINE or mpe.stop != Stop.CAP or config.max_mutants is None:
                break
            config = config.model_copy(update={"max_mutants": 2 * config.max_mutants})
            mpe = evaluate(executor, MPERequest(fix, t_k, reference, config), llm_mutator=llm)
        return mpe

    def _harden(self, state: LoopState, executor: InstanceExecutor, outcome: RoundOutcome, k: int) -> Decision:
        """The temporal matrix of (t_k vs t_ref) over mutants of c_k, and the decision it gives."""
        t_k = executor.test_patch(outcome.test, name=f"t{k}")
        seed = self.config.seed + k
        decision, mpe = Decision.INCONCLUSIVE, None
        if not state.t_ref.strip():
            outcome.note = "no reference test (no lax-init test): check skipped"
        else:
            reference = executor.test_patch(state.t_ref, name="t_ref")
            self._phase("mutants")
            try:
                config = self.config.mpe.model_copy(update={"seed": seed})
                mpe = self._estimate(executor, outcome.fix, t_k, reference, config)
            except MPEError as exc:
                outcome.note = f"check skipped: {exc}"
            if mpe is not None:
                counted = mpe.counted_matrix  # the matrix the laxity is over (behaviours by default)
                outcome.matrix = counted.model_dump()
                outcome.admissible = counted.admissible
                outcome.laxity = mpe.laxity
                outcome.mutant_cost_usd = float((mpe.llm_usage.get("per_source", {}).get("llm") or {})
                                                .get("cost_usd", 0.0))
                if not mpe.pool_complete:
                    outcome.note = f"mutant pool incomplete: {mpe.pool_incomplete_reason}"
                else:
                    changed = not same_test(t_k.files, reference.files)
                    bounds = None if config.point_classes or mpe.interval is None else \
                        (mpe.interval[0], mpe.interval[1])
                    decision = decide(admissible=counted.admissible, laxity=mpe.laxity, tau=self.config.tau,
                                      changed=changed, interval=bounds)
        outcome.decision = decision
        state.fix = outcome.fix
        if decision is Decision.REGRESSION:
            assert mpe is not None
            state.t_ref = state.test = state.t0
            outcome.feedback = feedback.regression(mpe, seed)
        elif decision in (Decision.UNCHANGED, Decision.BORDERLINE):
            assert mpe is not None
            state.t_ref = state.test = outcome.test
            outcome.feedback = feedback.surviving(mpe, seed)
        else:  # CLEAN (the loop ends) or INCONCLUSIVE (t_ref <- t_k)
            state.t_ref = state.test = outcome.test
            state.inconclusive_streak = state.inconclusive_streak + 1 if decision is Decision.INCONCLUSIVE else 0
        return decision
