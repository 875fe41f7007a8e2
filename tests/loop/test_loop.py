"""The CoHarden loop end to end: the default agent (mini-swe-agent) driven by scripted model replies through
the real HTTP client and the local mock server, real git workspaces, real pytest verdicts and real mutants,
on the bundled boundary_check example."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.execution.verify import fail_to_pass
from coharden.instances import load_local
from coharden.llm import Budget, CostOverride, LLMClient, LLMConfig, MockLLMServer
from coharden.loop.config import LoopConfig, Method
from coharden.loop.engine import InstanceLoop, LoopResult, instance_folder
from coharden.loop.progress import LoopProgress
from coharden.loop.run import LoopRun
from coharden.loop.runner import run_all
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Operator
from coharden.schema.round_record import load_run_file

pytest.importorskip("minisweagent", reason="the default agent needs mini-swe-agent (in the dev extra)")
from coharden.agent.mini import MiniSweAgent  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "boundary_check"
KEY_VAR = "COHARDEN_TEST_LOOP_KEY"
MODEL = "openai/loop-model"

LAX = """\
    from throttle import is_allowed


    def test_repro_limit():
        assert not is_allowed([0, 1, 2], now=5, limit=3, window=60)
    """
WEAK = """\
    from throttle import recent_hits


    def test_repro_limit():
        assert recent_hits([0, 10, 50], now=60, window=60) == [10, 50]
    """
RIGOROUS = """\
    from throttle import RateLimiter, is_allowed, recent_hits, retry_after


    def test_repro_limit():
        assert not is_allowed([0, 1, 2], now=5, limit=3, window=60)
        assert is_allowed([0, 1], now=5, limit=3, window=60)
        assert retry_after([0, 1, 2], now=5, limit=3, window=60) == 55
        assert retry_after([0, 1, 5], now=30, limit=3, window=60) == 30
        assert retry_after([0, 1], now=5, limit=3, window=60) == 0
        assert recent_hits([0, 10, 50], now=60, window=60) == [10, 50]
        assert is_allowed([0, 1, 2], now=60, limit=3, window=60)
        limiter = RateLimiter(limit=3, window=60)
        assert [limiter.allow(now=t) for t in (0, 1, 2, 5)] == [True, True, True, False]
    """


def bash(command: str) -> str:
    return f"THOUGHT: next step.\n\n```mswea_bash_command\n{command}\n```"


def write_test(content: str) -> str:
    return bash(f"cat <<'EOF' > tests/test_repro.py\n{textwrap.dedent(content).rstrip()}\nEOF")


RUN = bash("python -m pytest tests/test_repro.py -q")
SUBMIT = bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")


def apply_fix(patch: str) -> str:
    return bash(f"mkdir -p .coharden && cat <<'EOF' > .coharden/fix.patch\n{patch.rstrip()}\nEOF\n"
                "git apply .coharden/fix.patch")


def script(*runs: list[str]) -> list[dict[str, Any]]:
    """The model's replies, one agent run after another (the loop is sequential, so order is exact)."""
    return [{"reply": reply, "times": 1, "usage": {"prompt_tokens": 50, "completion_tokens": 10}}
            for run in runs for reply in run]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return load_local(EXAMPLE, tmp_path_factory.mktemp("cache"))


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, mock_llm):  # type: ignore[no-untyped-def]
    monkeypatch.setenv(KEY_VAR, "sk-test")
    return mock_llm


def make_loop(example, server: MockLLMServer, tmp_path: Path, config: LoopConfig, *,  # type: ignore[no-untyped-def]
              budget: Budget | None = None, agent_wrapper=None, output: Path | None = None,
              progress=None) -> InstanceLoop:
    client = LLMClient(LLMConfig(model=MODEL, api_base=server.base_url, api_key_env=KEY_VAR, max_tokens=2048,
                                 max_retries=0, timeout=20,
                                 cost_overrides={MODEL: CostOverride(input_per_token=1e-5, output_per_token=1e-5)}),
                       budget=budget)
    settings = Settings(timeout=60, store=tmp_path / "store.sqlite", cache_dir=tmp_path / "cache", workers=1)
    agent = MiniSweAgent(client, step_limit=10)
    if agent_wrapper is not None:
        agent = agent_wrapper(agent)
    inst = example.instance
    return InstanceLoop(inst, Path(inst.repo), agent, LoopRun(settings, config, output or tmp_path / "out",
                                                             store=Store(settings.store), ledger=client.ledger,
                                                             progress=progress))


def decisions(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.decision for r in result.rounds]


def golden_f2p(example, tmp_path: Path, test: str, fix: str) -> bool:  # type: ignore[no-untyped-def]
    inst = example.instance
    with InstanceExecutor(inst, Path(inst.repo), Settings(timeout=60, cache_dir=tmp_path / "c2")) as ex:
        return fail_to_pass(ex, ex.test_patch(test, name="final"), fix).fail_to_pass


FULL_RUN = (
    [write_test(LAX), RUN, SUBMIT],  # round 0: lax-init
    None,  # round 1: fix, test unchanged (filled in with the fix)
    [write_test(WEAK), RUN, SUBMIT],  # round 2: a weaker test -> regression, back to t0
    [write_test(RIGOROUS), RUN, SUBMIT],  # round 3: a rigorous test -> clean
)


# every mutant (no sampling), and a cutoff under the weak round's laxity (2 of 10 mutants)
# Algorithm 1's point rule: the scripted rounds' small pools decide under it (the interval over distinct
# behaviours leaves them Borderline, issue 50; that branch is test_a_borderline_round_...)
FULL_CONFIG = LoopConfig(rounds=5, mpe=MPEConfig.for_loop().model_copy(update={"per_operator": 50, "tau": 0.1,
                                                                              "paper_classes": True}))


def full_script(example) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    runs = list(FULL_RUN)
    runs[1] = [apply_fix(example.instance.patch), RUN, SUBMIT]
    return script(*runs)


@pytest.mark.slow
def test_every_branch_unchanged_regression_clean_with_outputs(example, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = serve(full_script(example))
    loop = make_loop(example, server, tmp_path, FULL_CONFIG)
    result = loop.run()

    assert decisions(result) == ["lax_init", "unchanged", "regression", "clean"], [r.note for r in result.rounds]
    assert result.decision == "clean"
    r0, r1, r2, r3 = result.rounds
    assert r1.laxity == 0.0  # the unchanged test against itself
    assert r2.laxity is not None
    assert r2.laxity > FULL_CONFIG.tau
    assert "weaker than the previous one" in r2.feedback
    assert r3.laxity is not None
    assert r3.laxity <= FULL_CONFIG.tau
    # after the regression the next agent run starts from t0 and is told about the regressed mutants
    round3_prompt = server.requests[9].messages[1]["content"]
    assert "weaker than the previous one" in round3_prompt
    assert "is_allowed([0, 1, 2], now=5" in round3_prompt  # t0 is the test it is shown
    # persisted state
    state = json.loads((tmp_path / "out/instances/example__boundary_check/state.json").read_text())
    assert state["finished"] is True
    assert state["round"] == 3
    assert state["t0"] == r0.test
    assert state["final_decision"] == "clean"
    # the final pair applies and is fail-to-pass, also by the golden fix's standard
    assert result.test == r3.test
    assert result.fix == r3.fix
    assert golden_f2p(example, tmp_path, result.test, example.instance.patch)
    # one record per round, readable by coharden eval
    records = load_run_file(tmp_path / "out/rounds/coharden.jsonl")
    assert [(r.round, r.decision) for r in records] == [(0, "lax_init"), (1, "unchanged"), (2, "regression"),
                                                         (3, "clean")]
    assert records[2].laxity == r2.laxity
    assert records[0].usd == pytest.approx(3 * 60 * 1e-5)
    # the golden patches are never shown to the agent
    golden_line = next(line for line in example.instance.test_patch.splitlines() if line.startswith("+def "))
    assert all(golden_line[1:] not in json.dumps(r.messages) for r in server.requests)
    # the same run killed after round 2 resumes at round 3 with this result (one full run for both checks)
    _killed_after_round_2_resumes_at_round_3(example, serve, tmp_path, result)


class Interrupt(BaseException):
    pass


def _killed_after_round_2_resumes_at_round_3(example, serve, tmp_path: Path, reference: LoopResult) -> None:  # type: ignore[no-untyped-def]
    class KillAtRound3:
        def __init__(self, agent):  # type: ignore[no-untyped-def]
            self.agent = agent

        def run(self, task, workspace, mode, critic, *, trajectory_path=None):  # type: ignore[no-untyped-def]
            if trajectory_path is not None and trajectory_path.name.startswith("round3"):
                raise Interrupt
            return self.agent.run(task, workspace, mode, critic, trajectory_path=trajectory_path)

    out = tmp_path / "run"
    first = serve(full_script(example)[:9])
    with pytest.raises(Interrupt):
        make_loop(example, first, tmp_path / "a", FULL_CONFIG, agent_wrapper=KillAtRound3, output=out).run()
    state = json.loads((out / "instances/example__boundary_check/state.json").read_text())
    assert (state["round"], state["finished"]) == (2, False)

    second = serve(full_script(example)[9:])
    resumed = make_loop(example, second, tmp_path / "b", FULL_CONFIG, output=out).run()
    assert len(second.requests) == 3  # only round 3 ran
    assert decisions(resumed) == decisions(reference)
    assert (resumed.test, resumed.fix) == (reference.test, reference.fix)
    rounds = [r.round for r in load_run_file(out / "rounds/coharden.jsonl")]
    assert rounds == [0, 1, 2, 3]


def test_a_borderline_round_asks_for_more_mutants_before_it_decides(example, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Round 1 keeps the lax test and adds the golden fix: the test against itself lets nothing through, but
    with tau = 0.05 the first 11 mutants (one per operator) cannot show it (Clopper-Pearson's upper bound for 0
    of 11 is 0.28): the round is Borderline at the cap, so the cap doubles, twice (EXTENSIONS); 0 of n is below
    0.05 only from n = 72 behaviours on, more than this example's pool shows, so the round stays Borderline
    and says so, with the extra mutants run. (decide()'s borderline branch: tests/test_laxity_estimate.py.)"""
    server = serve(script([write_test(LAX), RUN, SUBMIT], [apply_fix(example.instance.patch), RUN, SUBMIT]))
    config = LoopConfig(rounds=1, mpe={"tau": 0.05, "max_mutants": 11})
    result = make_loop(example, server, tmp_path, config).run()
    assert decisions(result) == ["lax_init", "borderline"], [(r.note, r.admissible) for r in result.rounds]
    r1 = result.rounds[1]
    assert r1.laxity == 0.0
    # more mutants than the first cap: the Borderline round asked for them (admissible counts behaviours)
    from coharden.mpe.evaluate import MPERequest, evaluate
    from coharden.schema.matrix import TestClass

    inst = example.instance
    with InstanceExecutor(inst, Path(inst.repo), Settings(timeout=60, cache_dir=tmp_path / "c3")) as ex:
        lax = ex.test_patch(r1.test, name="t1")
        first = evaluate(ex, MPERequest(r1.fix, lax, lax, config.mpe.model_copy(update={"seed": config.seed + 1})))
        wider = config.mpe.model_copy(update={"seed": config.seed + 1, "max_mutants": 44})
        extended = evaluate(ex, MPERequest(r1.fix, lax, lax, wider))
    assert first.test_class is TestClass.BORDERLINE
    assert first.stop == "cap"
    # doubling the cap draws more mutants than the first cap did (the round's own counts are behaviours of t1
    # against t_ref, the lax-init test)
    assert len(extended.mutants) > len(first.mutants)
    assert r1.admissible > 0


def test_inconclusive_round_and_rounds_exhausted(example, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # round 1 fixes only is_allowed (one function that never raises, on the buggy code too), so symptom
    # suppression has nothing to wrap: no admissible mutant, the check is skipped
    fix_is_allowed = bash("sed -i 's/) <= limit$/) < limit/' throttle/limiter.py")
    server = serve(script([write_test(LAX), RUN, SUBMIT], [fix_is_allowed, RUN, SUBMIT]))
    config = LoopConfig(rounds=1, operators=[Operator.SYMPTOM_SUPPRESSION])
    events: list[LoopProgress] = []
    result = make_loop(example, server, tmp_path, config, progress=events.append).run()
    assert decisions(result) == ["lax_init", "inconclusive"]
    # progress: rounds and phases, in order, as the CLI shows them
    assert [(e.round, e.phase, e.decision) for e in events] == [
        (0, "agent", ""), (0, "gate", ""), (0, "round", "lax_init"),
        (1, "agent", ""), (1, "gate", ""), (1, "mutants", ""), (1, "round", "inconclusive"),
        (1, "done", "rounds_exhausted")]
    assert [e.completed for e in events] == [0, 0, 1, 1, 1, 1, 2, 2]
    assert {e.rounds for e in events} == {2}
    assert events[5].describe() == "round 1/1 mutants"
    assert events[-1].describe() == "done: rounds_exhausted"
    assert result.decision == "rounds_exhausted"  # K rounds used, no cost cap involved
    assert result.error_kind == ""
    assert result.inconclusive_rounds == 1
    assert result.rounds[1].admissible == 0
    assert "is_allowed" in result.fix
    assert result.test == result.rounds[0].test  # (t_K, c_K): the lax test, unchanged


def test_cost_cap_stops_the_loop_and_keeps_finished_rounds(example, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = serve(full_script(example))
    # round 0 costs 3 x 60 tokens x 1e-5 = 0.0018 USD; the cap is reached during round 1
    result = make_loop(example, server, tmp_path, FULL_CONFIG, budget=Budget(per_run_usd=0.002)).run()
    assert result.decision == "cost_cap"
    assert result.error_kind == "cost_cap"
    assert "of 0.002000" in result.note  # the cap that was set, not a made-up 0.0
    assert decisions(result)[0] == "lax_init"
    assert result.rounds[0].test.strip()
    assert len(server.requests) < 6


def test_baselines_run_in_the_same_framework(example, serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = serve(script([apply_fix(example.instance.patch), bash("python -m pytest tests -q"), SUBMIT]))
    client_cfg = LoopConfig(method=Method.FIX_ONLY)
    settings = Settings(timeout=60, store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache", workers=1)
    client = LLMClient(LLMConfig(model=MODEL, api_base=server.base_url, api_key_env=KEY_VAR, max_retries=0,
                                 timeout=20))
    run = LoopRun(settings, client_cfg, tmp_path / "out", "fixonly", Store(settings.store), client.ledger)
    summary = run_all([example.instance], run, lambda: MiniSweAgent(client, step_limit=10))
    assert summary["decisions"] == {"done": 1}, summary
    fixes = [json.loads(line) for line in (tmp_path / "out/fixes.jsonl").read_text().splitlines()]
    assert fixes[0]["instance_id"] == "example__boundary_check"
    assert fixes[0]["model_name_or_path"] == "fixonly"
    assert "throttle/limiter.py" in fixes[0]["model_patch"]
    assert not (tmp_path / "out/tests.jsonl").read_text().strip()


def test_cli_run_writes_predictions_and_records(example, serve, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from coharden.cli import app

    server = serve(script([write_test(LAX), RUN, SUBMIT]))
    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", KEY_VAR)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(EXAMPLE), "--method", "test-only", "--model", MODEL,
                                      "--api-base", server.base_url, "-o", str(out), "--run-name", "t-only",
                                      "--store", str(tmp_path / "s.sqlite"), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "round 1/1" not in result.output  # no progress display when stderr is not a terminal
    tests = [json.loads(line) for line in (out / "tests.jsonl").read_text().splitlines()]
    assert [(t["instance_id"], t["model_name_or_path"]) for t in tests] == [("example__boundary_check", "t-only")]
    assert "is_allowed([0, 1, 2], now=5" in tests[0]["model_patch"]
    assert json.loads((out / "summary.json").read_text())["decisions"] == {"done": 1}
    assert [r.decision for r in load_run_file(out / "rounds/t-only.jsonl")] == ["done"]


# --- model errors are errors (issue 21) ---------------------------------------------------------------------


def cli_run(server: MockLLMServer, tmp_path: Path, *extra: str, method: str = "coharden"):  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from coharden.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(EXAMPLE), "--method", method, "--model", MODEL,
                                      "--api-base", server.base_url, "-o", str(out), "--rounds", "2",
                                      "--store", str(tmp_path / "s.sqlite"), "--workers", "1", *extra])
    return result, json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else None


def test_run_with_a_rejected_key_fails_fast_with_kind_auth(example, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The provider answers 401 (wrong key): one request, no retries, no further rounds; exit 1 and the cause."""
    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", KEY_VAR)
    monkeypatch.setenv(KEY_VAR, "sk-wrong")
    with MockLLMServer([{"reply": SUBMIT}], api_key="sk-right") as server:
        result, summary = cli_run(server, tmp_path)
        assert [r.status for r in server.requests] == [401]
    assert result.exit_code == 1, result.output
    assert summary["decisions"] == {"model_error": 1}
    assert summary["per_instance"]["example__boundary_check"]["error_kind"] == "auth"
    assert summary["model_failure"] is True
    assert summary["model_errors"]["example__boundary_check"].startswith("auth: ")
    assert "example__boundary_check: auth: " in " ".join(result.output.split())
    assert "no instance produced a fix or a test" in result.output
    state = json.loads((tmp_path / "out/instances/example__boundary_check/state.json").read_text())
    assert (state["final_decision"], state["error_kind"], len(state["rounds"])) == ("model_error", "auth", 1)


def test_run_without_any_key_is_auth_not_a_retried_server_error(example, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """No key at all: litellm raises an HTTP 500 before sending anything; it is an auth error, not retried."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("COHARDEN_LLM_API_KEY_ENV", raising=False)
    with MockLLMServer([{"reply": SUBMIT}]) as server:
        result, summary = cli_run(server, tmp_path, method="test-only")
        assert server.requests == []
    assert result.exit_code == 1, result.output
    assert summary["per_instance"]["example__boundary_check"]["error_kind"] == "auth"
    assert "OPENAI_API_KEY" in summary["model_errors"]["example__boundary_check"]
    assert summary["llm"]["retries"] == 0


def test_run_with_an_unsupported_parameter_is_kind_bad_parameter(example, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", KEY_VAR)
    monkeypatch.setenv(KEY_VAR, "sk-test")
    rule = {"status": 400, "error_code": "unsupported_parameter", "error_param": "temperature",
            "error_message": "Unsupported parameter: 'temperature' is not supported with this model."}
    with MockLLMServer([rule]) as server:
        result, summary = cli_run(server, tmp_path)
        assert len(server.requests) == 1  # never retried
    assert result.exit_code == 1, result.output
    assert summary["decisions"] == {"model_error": 1}
    assert summary["model_errors"]["example__boundary_check"].startswith("bad_parameter: ")
    assert "temperature" in summary["model_errors"]["example__boundary_check"]
    records = load_run_file(tmp_path / "out/rounds/coharden-openai__loop-model.jsonl")
    assert [(r.round, r.meta["error_kind"]) for r in records] == [(0, "bad_parameter")]


def test_a_model_that_rejects_temperature_gets_it_dropped(tmp_path: Path, monkeypatch) -> None:
    """gpt-5-mini rejects temperature=0: litellm drops the parameter (drop_params), the call goes through."""
    monkeypatch.setenv(KEY_VAR, "sk-test")
    with MockLLMServer([{"reply": "ok"}]) as server:
        client = LLMClient(LLMConfig(model="openai/gpt-5-mini", api_base=server.base_url, api_key_env=KEY_VAR,
                                     temperature=0.0, max_retries=0))
        assert client.complete([{"role": "user", "content": "hi"}]).content == "ok"
        assert "temperature" not in server.requests[0].body


def test_agent_command_reports_the_error_kind(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from coharden.cli import app

    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", KEY_VAR)
    monkeypatch.setenv(KEY_VAR, "sk-wrong")
    with MockLLMServer([{"reply": SUBMIT}], api_key="sk-right") as server:
        result = CliRunner().invoke(app, ["agent", str(EXAMPLE), "--model", MODEL, "--api-base", server.base_url,
                                          "-o", str(tmp_path / "out"), "--store", str(tmp_path / "s.sqlite"),
                                          "--json"])
        assert [r.status for r in server.requests] == [401]
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    assert (summary["accepted"], summary["exit_status"], summary["error_kind"]) == (False, "LLMAuthError", "auth")


@pytest.mark.parametrize("hostile", ["../../escape", "/etc/cron.d/x", "a/../../b", "..", "line\nbreak", "x" * 300])
def test_an_instance_id_names_one_folder_under_the_run_s_instances(example, serve, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   hostile: str) -> None:
    """An instance id is data from a records file: the loop's state, trajectories and round files of any id
    stay in one folder of ``output/instances``, never a path the id points at."""
    inst = example.instance.model_copy(update={"instance_id": hostile})
    loop = make_loop(SimpleNamespace(instance=inst), serve([]), tmp_path, LoopConfig(rounds=1))
    instances = (tmp_path / "out" / "instances").resolve()
    assert loop.dir.resolve().parent == instances
    assert loop.state_path.resolve().is_relative_to(instances)
    assert instance_folder(tmp_path / "out", hostile) == loop.dir
