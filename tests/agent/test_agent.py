"""Agents with the critic at the finish, on the bundled boundary_check example.

The default agent runs mini-swe-agent's real loop and LocalEnvironment; its model goes through coharden's
LLMClient -> litellm -> HTTP to the in-process mock server, whose scripted replies play the model. What the
model saw is asserted on the mock server's received requests.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coharden.agent import (
    AgentResult,
    AgentTask,
    ExternalCommandAgent,
    read_trajectory,
    workspace_diff,
)
from coharden.agent.openhands import events_from_openhands
from coharden.config import Settings
from coharden.critic import (
    CriticBase,
    CriticContext,
    CriticResult,
    EmptyPatchCritic,
    IterativeRefinementConfig,
    PassCritic,
    SkillCritic,
    default_critic,
)
from coharden.execution.workspace import Workspace
from coharden.instances import LocalInstance, load_local
from coharden.llm import Budget, CacheMode, CallStore, CostOverride, LLMClient, LLMConfig, MockLLMServer
from coharden.patches import touched_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "boundary_check"
USER_SKILL = Path(__file__).parents[1] / "fixtures" / "critic_skill"
KEY_VAR = "COHARDEN_TEST_AGENT_KEY"
MODEL = "openai/gpt-4o-mini"
PRICE = CostOverride(input_per_token=1e-6, output_per_token=2e-6)

REPRO = textwrap.dedent("""\
    from throttle import is_allowed


    def test_limit_is_enforced():
        assert not is_allowed([0, 1, 2], now=5, limit=3, window=60)
    """)


def mini_agent(model: Any, **kwargs: Any) -> Any:
    """The default agent; its tests skip when mini-swe-agent is not installed (it is in the dev extra)."""
    module = pytest.importorskip("coharden.agent.mini",
                                 reason="the default agent needs mini-swe-agent: pip install 'coharden[agent]'")
    return module.MiniSweAgent(model, **kwargs)


def bash(command: str, thought: str = "Next step.") -> str:
    return f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```"


def write(path: str, content: str) -> str:
    return bash(f"mkdir -p {Path(path).parent} && cat <<'EOF' > {path}\n{content.rstrip()}\nEOF")


SUBMIT = bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "Done.")
EDIT_SOURCE = bash("sed -i 's/<= limit/< limit/' throttle/limiter.py", "Fix the comparison.")
RUN_TEST = bash("python -m pytest tests/test_repro.py -q", "Run my test.")


def step(reply: str, *, after: str | None = None, **kw: Any) -> dict[str, Any]:
    """One scripted model reply, used once; ``after``: only when the last user message contains this text."""
    rule: dict[str, Any] = {"reply": reply, "times": 1,
                            "usage": {"prompt_tokens": 100, "completion_tokens": 20}, **kw}
    if after is not None:
        rule["match"] = {"contains": after, "last_user": True}
    return rule


@pytest.fixture(scope="module", autouse=True)
def _litellm_imported() -> None:
    """Import litellm once up front (it takes seconds), so test durations show the tests' own time."""
    from coharden.llm.client import _litellm

    _litellm()


@pytest.fixture(scope="module")
def boundary(tmp_path_factory: pytest.TempPathFactory) -> LocalInstance:
    return load_local(EXAMPLE, tmp_path_factory.mktemp("cache"))


@pytest.fixture
def workspace(boundary: LocalInstance) -> Iterator[Workspace]:
    with Workspace(Path(boundary.instance.repo), boundary.instance.base_commit) as ws:
        yield ws


@pytest.fixture
def task(boundary: LocalInstance) -> AgentTask:
    return AgentTask.from_instance(boundary.instance)


@pytest.fixture
def context_for(boundary: LocalInstance, settings: Settings) -> Iterator:  # type: ignore[type-arg]
    opened: list[CriticContext] = []

    def make(mode: str) -> CriticContext:
        ctx = CriticContext.for_instance(mode, boundary.instance, Path(boundary.instance.repo), settings)
        opened.append(ctx)
        return ctx

    yield make
    for ctx in opened:
        ctx.close()


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, mock_llm):  # type: ignore[no-untyped-def]
    monkeypatch.setenv(KEY_VAR, "sk-test")
    return mock_llm


def client_for(server: MockLLMServer | None, **kw: Any) -> LLMClient:
    config = LLMConfig(model=MODEL, api_base=server.base_url if server else "http://127.0.0.1:9/v1",
                       api_key_env=KEY_VAR, max_tokens=512, timeout=10, max_retries=0,
                       cost_overrides={MODEL: PRICE})
    return LLMClient(config, **kw)


def kinds(result: AgentResult, kind: str) -> list[dict[str, Any]]:
    return [e for e in result.events if e["kind"] == kind]


# --- the default agent (mini-swe-agent) -----------------------------------------------------------------------
def test_source_edit_in_test_only_mode_is_rejected_and_the_followup_reaches_the_model(
        serve, workspace, task, context_for, tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = serve([
        step(EDIT_SOURCE),
        step(SUBMIT),
        step(bash("git checkout -- throttle/limiter.py", "Undo the source change."), after="test-only task"),
        step(write("tests/test_repro.py", REPRO)),
        step(RUN_TEST),
        step(SUBMIT),
    ])
    client = client_for(server)
    critic = default_critic(context_for("test-only"))
    trajectory = tmp_path / "run.traj.jsonl"

    result = mini_agent(client).run(task, workspace, "test-only", critic, trajectory_path=trajectory)

    assert (result.exit_status, result.accepted, result.iterations) == ("Submitted", True, 1), result.error
    first, second = result.critic_results
    assert first.metadata is not None
    assert first.metadata["hard_gate"] == "clean_patch"
    assert second.score == 1.0
    followup = critic.get_followup_prompt(first, 1)
    assert "throttle/limiter.py" in followup
    # the follow-up is the next user turn the model sees, verbatim
    requests = server.requests
    assert len(requests) == 6
    assert requests[2].messages[-1] == {"role": "user", "content": followup}
    assert requests[2].rule_index == 2
    assert "<issue>\nRateLimiter lets limit + 1 requests through" in requests[0].messages[1]["content"]
    # the accepted submission: only the new test; the source edit was undone
    assert result.submission == result.patch
    assert touched_files(result.patch) == ["tests/test_repro.py"]
    assert workspace_diff(workspace.root, workspace.commit) == result.patch
    # cost is coharden's accounting of the six calls
    assert result.cost == pytest.approx(6 * (100 * 1e-6 + 20 * 2e-6))
    assert client.ledger.run_usage().calls == 6
    # the trajectory is JSONL, written as it happened
    events = read_trajectory(trajectory)
    assert events == json.loads(json.dumps(result.events, default=str))
    assert [e["kind"] for e in events][:3] == ["start", "message", "message"]
    assert events[0]["mini_version"]
    assert [e["accepted"] for e in events if e["kind"] == "critic"] == [False, True]
    assert events[-1]["kind"] == "end"
    assert "python -m pytest tests/test_repro.py -q" in [e["command"] for e in kinds(result, "action")]
    assert any(e["kind"] == "observation" and "1 failed" in e["output"] for e in events)


def test_unparseable_python_is_rejected_then_a_good_submission_is_accepted(
        serve, workspace, task, context_for) -> None:  # type: ignore[no-untyped-def]
    server = serve([
        step(write("tests/test_repro.py", "def test_limit(:\n    assert False\n")),
        step(SUBMIT),
        step(write("tests/test_repro.py", REPRO), after="do not parse"),
        step(RUN_TEST),
        step(SUBMIT),
    ])
    critic = default_critic(context_for("test-only"))

    result = mini_agent(client_for(server)).run(task, workspace, "test-only", critic)

    assert (result.exit_status, result.accepted, result.iterations) == ("Submitted", True, 1)
    rejected = result.critic_results[0].metadata
    assert rejected is not None
    assert rejected["hard_gate"] == "structural_validity"
    assert "tests/test_repro.py:1: invalid syntax" in server.requests[2].messages[-1]["content"]


def test_max_iterations_is_honoured(serve, workspace, task, context_for) -> None:  # type: ignore[no-untyped-def]
    server = serve([step(EDIT_SOURCE), {"reply": SUBMIT}])  # then submits the same source edit forever
    critic = default_critic(context_for("test-only"), builtins=["clean_patch"], max_iterations=2)

    result = mini_agent(client_for(server)).run(task, workspace, "test-only", critic)

    assert (result.exit_status, result.accepted, result.iterations) == ("CriticRejected", False, 2)
    assert result.submission is None
    assert len(result.critic_results) == 3  # the first finish + one per follow-up
    assert len(server.requests) == 4
    followups = [e for e in kinds(result, "message") if e.get("followup")]
    assert len(followups) == 2
    assert [e["iteration"] for e in kinds(result, "critic")] == [1, 2, 2]
    assert touched_files(result.patch) == ["throttle/limiter.py"]  # kept for the record, not submitted


def test_a_truncated_reply_fails_closed(serve, workspace, task) -> None:  # type: ignore[no-untyped-def]
    server = serve([
        step(write("tests/test_repro.py", REPRO)),
        step(write("tests/test_truncated.py", REPRO) + "\n" + SUBMIT, finish_reason="length"),
        {"reply": SUBMIT},
    ])
    client = client_for(server)

    result = mini_agent(client).run(task, workspace, "test-only", PassCritic())

    assert (result.exit_status, result.accepted, result.submission) == ("TruncatedReply", False, None)
    assert "reply truncated" in (result.error or "")
    assert result.critic_results == []  # never evaluated: nothing was submitted
    assert not (workspace.root / "tests" / "test_truncated.py").exists()  # its action never ran
    assert len(server.requests) == 2  # and the run stopped there
    assert client.ledger.run_usage().truncations == 1
    assert result.cost == pytest.approx(2 * (100 * 1e-6 + 20 * 2e-6))  # the truncated call is paid for
    (error,) = kinds(result, "error")
    assert error["exit_status"] == "TruncatedReply"
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in error["partial"]


def test_user_skill_directory_works_without_code_changes(
        serve, workspace, task, context_for) -> None:  # type: ignore[no-untyped-def]
    skipped = REPRO.replace("def test_limit", "@pytest.mark.skip\ndef test_limit").replace(
        "from throttle", "import pytest\nfrom throttle")
    printing = REPRO.replace("    assert", "    print('checking')\n    assert")
    server = serve([
        step(write("tests/test_repro.py", skipped)),
        step(RUN_TEST),
        step(SUBMIT),
        step(write("tests/test_repro.py", printing), after="Do not skip or xfail"),
        step(RUN_TEST),
        step(SUBMIT),
        step(write("tests/test_repro.py", REPRO), after="Remove the print() calls"),
        step(RUN_TEST),
        step(SUBMIT),
    ])
    critic = default_critic(context_for("test-only"), skills=[USER_SKILL])

    result = mini_agent(client_for(server)).run(task, workspace, "test-only", critic)

    assert (result.exit_status, result.accepted, result.iterations) == ("Submitted", True, 2)
    hard, soft, final = (r.metadata or {} for r in result.critic_results)
    assert hard["hard_gate"] == "no_skip"
    assert "fail_to_pass" not in [s["name"] for s in hard["signals"]]  # short-circuited before the test runs
    assert (soft["hard_gate"], soft["triggered"]) == (None, ["no_print"])
    assert result.critic_results[1].score == pytest.approx(0.5)
    assert final["triggered"] == []


def test_a_budget_stops_the_run(serve, workspace, task) -> None:  # type: ignore[no-untyped-def]
    server = serve([step(write("tests/test_repro.py", REPRO)), {"reply": SUBMIT}])
    client = client_for(server, budget=Budget(per_instance_usd=1e-4))  # one call costs 1.4e-4

    result = mini_agent(client).run(task, workspace, "test-only", PassCritic())

    assert (result.exit_status, result.accepted) == ("BudgetExceeded", False)
    assert len(server.requests) == 1
    assert client.ledger.instance_usage(task.instance_id).budget_refusals == 1


def test_record_then_replay_offline(serve, workspace, boundary, task, tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = serve([step(write("tests/test_repro.py", REPRO)), step(SUBMIT)])
    store = CallStore(tmp_path / "calls.sqlite")
    recorded = mini_agent(client_for(server, store=store)).run(task, workspace, "test-only", PassCritic())
    server.stop()

    with Workspace(Path(boundary.instance.repo), boundary.instance.base_commit) as fresh:
        replayed = mini_agent(client_for(None, store=store, mode=CacheMode.REPLAY)).run(
            task, fresh, "test-only", PassCritic())

    assert (replayed.exit_status, replayed.patch, replayed.cost) == ("Submitted", recorded.patch, recorded.cost)
    assert [e["cached"] for e in kinds(replayed, "message") if e["role"] == "assistant"] == [True, True]


def test_a_reply_without_an_action_gets_mini_swe_agents_format_error(serve, workspace, task) -> None:  # type: ignore[no-untyped-def]
    server = serve([step("I would look at the code first."), step(SUBMIT, after="Format error")])

    result = mini_agent(client_for(server)).run(task, workspace, "test-only", EmptyPatchCritic())

    assert result.exit_status == "CriticRejected"  # nothing changed: EmptyPatchCritic (no follow-ups) rejects
    (error,) = [e for e in kinds(result, "message") if e.get("interrupt_type")]
    assert error["interrupt_type"] == "FormatError"
    assert result.cost == pytest.approx(2 * (100 * 1e-6 + 20 * 2e-6))  # the malformed reply is paid for too


def test_agent_commands_are_sandboxed(serve, workspace, task) -> None:  # type: ignore[no-untyped-def]
    server = serve([
        step(bash("sleep 10")),
        step(bash("python -c \"import socket; socket.create_connection(('203.0.113.1', 80), timeout=2)\"")),
        step(SUBMIT),
    ])

    result = mini_agent(client_for(server), command_timeout=1).run(task, workspace, "test-only", PassCritic())

    assert result.exit_status == "Submitted"
    slept, connected = kinds(result, "observation")
    assert (slept["returncode"], slept["exception_info"]) == (-1, "The command timed out after 1 s and was killed.")
    assert connected["returncode"] == 1
    assert "OSError" in connected["output"]  # no network for the agent's commands by default
    assert "timed out" in server.requests[1].messages[-1]["content"]


def test_a_failing_critic_rejects(serve, workspace, task) -> None:  # type: ignore[no-untyped-def]
    class Broken(CriticBase):
        def evaluate(self, events, git_patch=None):  # type: ignore[no-untyped-def]
            raise RuntimeError("detector crashed")

    server = serve([step(write("tests/test_repro.py", REPRO)), step(SUBMIT)])
    critic = Broken(iterative_refinement=IterativeRefinementConfig())

    result = mini_agent(client_for(server)).run(task, workspace, "test-only", critic)

    assert (result.exit_status, result.accepted) == ("CriticError", False)
    assert result.error == "RuntimeError: detector crashed"
    assert touched_files(result.patch) == ["tests/test_repro.py"]


def test_the_agent_only_runs_in_a_workspace(task, tmp_path, context_for) -> None:  # type: ignore[no-untyped-def]
    agent = mini_agent(client_for(None))
    with pytest.raises(TypeError, match="throwaway clone"):
        agent.run(task, tmp_path, "test-only", PassCritic())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="built for mode 'fix-only'"):
        agent.run(task, Workspace(ROOT, "HEAD"), "test-only", default_critic(context_for("fix-only")))


# --- external command-line agents --------------------------------------------------------------------------------
FAKE_AGENT = textwrap.dedent('''\
    """A stand-in for a command-line coding agent: reads the prompt file, edits the repository."""
    import os
    import pathlib
    import subprocess

    prompt = pathlib.Path(os.environ["COHARDEN_PROMPT_FILE"]).read_text()
    print(f"iteration {os.environ['COHARDEN_ITERATION']}, mode {os.environ['COHARDEN_MODE']}")
    if "Feedback on your previous attempt" in prompt:
        assert "test-only task" in prompt
        subprocess.run(["git", "checkout", "--", "throttle/limiter.py"], check=True)
        print("reverted the source change")
    else:
        assert "RateLimiter lets limit + 1 requests through" in prompt
        path = pathlib.Path("throttle/limiter.py")
        path.write_text(path.read_text().replace("<= limit", "< limit"))
        pathlib.Path("tests/test_repro.py").write_text(REPRO)
        print("fixed the bug and wrote a test")
    ''')


def test_external_command_agent_loops_until_the_critic_accepts(
        workspace, task, context_for, tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "fake_agent.py"
    script.write_text(f"REPRO = {REPRO!r}\n" + FAKE_AGENT)
    critic = default_critic(context_for("test-only"), builtins=["clean_patch", "structural_validity", "fail_to_pass"])
    agent = ExternalCommandAgent([sys.executable, str(script)], timeout=60, readable=[tmp_path])  # shown read-only

    result = agent.run(task, workspace, "test-only", critic, trajectory_path=tmp_path / "ext.jsonl")

    assert (result.exit_status, result.accepted, result.iterations, result.cost) == ("Submitted", True, 1, None)
    assert touched_files(result.patch) == ["tests/test_repro.py"]  # the prompt file is not part of the diff
    actions = kinds(result, "action")
    assert len(actions) == 2
    assert "Feedback on your previous attempt (iteration 1)" in actions[1]["prompt"]
    assert "throttle/limiter.py" in actions[1]["prompt"]
    outputs = [e["output"] for e in kinds(result, "observation")]
    assert outputs == ["iteration 0, mode test-only\nfixed the bug and wrote a test\n",
                       "iteration 1, mode test-only\nreverted the source change\n"]
    assert [e["kind"] for e in read_trajectory(tmp_path / "ext.jsonl")][-1] == "end"


@pytest.mark.parametrize("mode", ["fix-only", "joint"])
def test_fix_only_and_joint_modes(mode, workspace, task, boundary, context_for, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "fix.patch").write_text(boundary.instance.patch)
    (tmp_path / "test_repro.py").write_text(REPRO)
    command = f"git apply {tmp_path / 'fix.patch'}"
    if mode == "joint":
        command += f" && cp {tmp_path / 'test_repro.py'} tests/ && {sys.executable} -m pytest tests/test_repro.py -q"

    result = ExternalCommandAgent(command, readable=[tmp_path]).run(task, workspace, mode,
                                                                    default_critic(context_for(mode)))

    assert (result.exit_status, result.accepted) == ("Submitted", True), result.error
    final = result.critic_results[-1].metadata or {}
    assert [s["name"] for s in final["signals"]] == ["clean_patch", "structural_validity", "ran_the_test",
                                                     "fail_to_pass"]
    fail_to_pass = final["signals"][-1]["metadata"]
    assert fail_to_pass["fixed"]["outcome"] == "PASS"
    expected = ["throttle/limiter.py"] + (["tests/test_repro.py"] if mode == "joint" else [])
    assert sorted(touched_files(result.patch)) == sorted(expected)


def test_external_command_agent_shell_string_and_timeout(workspace, task) -> None:  # type: ignore[no-untyped-def]
    agent = ExternalCommandAgent("test -s {prompt_file} && sleep 5", timeout=0.5)

    result = agent.run(task, workspace, "test-only", PassCritic())

    assert (result.exit_status, result.accepted) == ("TimeExceeded", False)
    assert kinds(result, "observation")[0]["timed_out"] is True


def test_external_command_agent_gives_up_after_max_iterations(workspace, task, tmp_path) -> None:  # type: ignore[no-untyped-def]
    critic = SkillCritic.combine([default_critic(CriticContext("test-only"), builtins=["clean_patch"])],
                                 max_iterations=1)
    agent = ExternalCommandAgent("echo x >> throttle/limiter.py")

    result = agent.run(task, workspace, "test-only", critic)

    assert (result.exit_status, result.accepted, result.iterations) == ("CriticRejected", False, 1)
    assert len(kinds(result, "action")) == 2


# --- OpenHands SDK adapter ---------------------------------------------------------------------------------------
def test_openhands_events_convert_by_class_name() -> None:
    """The conversion is duck-typed, so it is tested here with stand-ins named like the SDK's event classes."""

    class Text:
        def __init__(self, text: str) -> None:
            self.text = text

    class TerminalAction:
        command = "pytest -q"

    class FinishAction:
        message = "done"

    class ActionEvent:
        def __init__(self, act: object) -> None:
            self.action, self.tool_name = act, "terminal"

    class TerminalObservation:
        text = "1 passed"
        exit_code = 0

    class ObservationEvent:
        observation, tool_name = TerminalObservation(), "terminal"

    class Message:
        role, content = "user", [Text("fix it")]

    class MessageEvent:
        llm_message = Message()

    class Other:
        source = "environment"

    events = events_from_openhands([MessageEvent(), ActionEvent(TerminalAction()), ObservationEvent(),
                                    ActionEvent(FinishAction()), Other()])

    assert [(e["kind"], e.get("command"), e.get("output"), e.get("content")) for e in events] == [
        ("message", None, None, "fix it"), ("action", "pytest -q", None, None), ("observation", None, "1 passed", None),
        ("finish", None, None, None), ("other", None, None, None)]
    assert events[2]["returncode"] == 0


def test_openhands_critic_adapter(workspace) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("openhands.sdk", reason="openhands-sdk is an optional extra (Python >= 3.12)")
    from coharden.agent.openhands import to_openhands_critic

    critic = default_critic(CriticContext("test-only"), builtins=["clean_patch"])
    adapter = to_openhands_critic(critic, workspace.root, workspace.commit)
    (workspace.root / "throttle" / "limiter.py").write_text("x = 1\n")
    result = adapter.evaluate([], None)  # the SDK passes no patch: the adapter computes it
    assert result.score == 0.0
    assert adapter.should_refine(result)
    assert "throttle/limiter.py" in adapter.get_followup_prompt(result, 1)
    assert isinstance(adapter._log[0]["result"], CriticResult)


# --- the CLI -----------------------------------------------------------------------------------------------------
def test_cli_agent_with_the_default_agent_and_a_user_skill(serve, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("coharden.agent.mini", reason="the default agent needs mini-swe-agent")
    from typer.testing import CliRunner

    from coharden.cli import app

    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COHARDEN_LLM_API_KEY_ENV", KEY_VAR)
    server = serve([step(write("tests/test_repro.py", REPRO)), step(RUN_TEST), step(SUBMIT)])
    out = tmp_path / "out"

    result = CliRunner().invoke(app, [
        "agent", str(EXAMPLE), "--mode", "test-only", "--model", MODEL, "--api-base", server.base_url,
        "--critic-skill", str(USER_SKILL), "--output", str(out), "--store", str(tmp_path / "s.sqlite"),
        "--llm-store", str(tmp_path / "calls.sqlite"), "--json"])

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["exit_status"], summary["accepted"], summary["agent"]) == ("Submitted", True, "mini-swe-agent")
    assert summary["critic_scores"] == [1.0]
    preds = json.loads((out / "preds.json").read_text())
    assert touched_files(preds["example__boundary_check"]["model_patch"]) == ["tests/test_repro.py"]
    signals = [e for e in read_trajectory(out / "example__boundary_check.traj.jsonl") if e["kind"] == "critic"]
    assert [s["name"] for s in signals[0]["metadata"]["signals"]] == [
        "clean_patch", "structural_validity", "ran_the_test", "no_skip", "no_print", "fail_to_pass"]


def test_cli_agent_with_an_external_command(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from coharden.cli import app

    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    script = tmp_path / "fake_agent.py"
    script.write_text(f"REPRO = {REPRO!r}\n" + FAKE_AGENT)
    args = ["agent", str(EXAMPLE), "--output", str(tmp_path / "out"), "--store", str(tmp_path / "s.sqlite"), "--json"]

    accepted = CliRunner().invoke(app, [*args, "--command", f"{sys.executable} {script}", "--agent-readable",
                                        str(tmp_path), "--builtins", "clean_patch,fail_to_pass"])
    rejected = CliRunner().invoke(app, [*args, "--command", "echo x >> throttle/limiter.py",
                                        "--builtins", "clean_patch", "--max-iterations", "1"])
    bad_mode = CliRunner().invoke(app, [*args, "--command", "true", "--mode", "tests"])
    bad_iterations = CliRunner().invoke(app, [*args, "--command", "true", "--max-iterations", "0"])

    assert rejected.exit_code == 1, rejected.output
    assert json.loads(rejected.stdout)["exit_status"] == "CriticRejected"
    assert accepted.exit_code == 0, accepted.output
    assert json.loads(accepted.stdout)["cost_usd"] is None
    assert bad_mode.exit_code == 2
    assert "--mode: 'tests' (known: test-only, fix-only, joint)" in bad_mode.output
    assert bad_iterations.exit_code == 2
    assert "'--max-iterations': 0 is out of range (allowed: >= 1)" in bad_iterations.output
    preds = json.loads((tmp_path / "out" / "preds.json").read_text())
    assert preds["example__boundary_check"]["model_patch"] == ""  # the last run was rejected: no submission
