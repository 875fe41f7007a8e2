"""Hostile agent commands: what the agent's shell sees (no secret, no $HOME, nothing to write outside), its git
configuration and disk use, a link that would make coharden write its prompt elsewhere, the default agent's
sandbox.

Each attack is a real test patch for ``examples/printer_brackets`` run in the real sandbox; the assertions look at
the host (the store, the user's checkout, ``$HOME``, ``/tmp``, the process table).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.attacks.hostile import SECRETS, needs_bwrap

from coharden.execution.bwrap import interpreter_dirs
from coharden.instances import LocalInstance, resolve_repo

pytestmark = needs_bwrap


def test_agent_commands_see_no_secret_no_home_and_cannot_write_outside(example: LocalInstance, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An external agent's command (the default: sandboxed, with the network) dumps its environment, reads a
    private file outside its workspace and lists the home directory, and writes beside its workspace: it sees
    no key, no private file, and its writes land nowhere but in the workspace."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    private = tmp_path / "private"
    private.mkdir()
    (private / "id_rsa").write_text("attack-private-key-material")
    outside = tmp_path / "planted.txt"
    command = (f"env; cat {private / 'id_rsa'}; ls -a {Path.home()}; echo planted > {outside}; "
               "echo in-workspace > inside.txt; true")
    agent = ExternalCommandAgent(command, timeout=60)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = agent.run(AgentTask(problem_statement="dump"), ws, "test-only", PassCritic())
        inside = (ws.root / "inside.txt").read_text()
    (observed,) = [e for e in result.events if e["kind"] == "observation"]
    output = observed["output"]
    assert "PATH=" in output  # the command ran and printed its environment
    for value in SECRETS.values():
        assert value not in output
    assert "attack-private-key-material" not in output
    assert not outside.exists()
    assert inside == "in-workspace\n"
    # of $HOME, only the directories holding the interpreter the command is shown (coharden's) are there
    home_entries = {p.relative_to(Path.home()).parts[0] for p in interpreter_dirs(sys.executable)
                    if p.is_relative_to(Path.home()) and p != Path.home()}
    for entry in (p.name for p in Path.home().iterdir()):
        if entry not in home_entries:
            assert f"\n{entry}\n" not in f"\n{output}\n"


def test_the_default_agent_s_commands_run_in_the_tests_sandbox(example: LocalInstance, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, mock_llm) -> None:
    """The default agent (mini-swe-agent over coharden's client): the trajectory the model sees holds no key of
    coharden's (the model's own included) and nothing of the user's files."""
    mini = pytest.importorskip("coharden.agent.mini", reason="the default agent needs mini-swe-agent")
    from coharden.agent import AgentTask
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace
    from coharden.llm import LLMClient, LLMConfig

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COHARDEN_TEST_ATTACK_KEY", "attack-model-key")
    private = tmp_path / "private.env"
    private.write_text("attack-dotenv-secret")
    run = f"env; cat {private}; echo planted > {tmp_path / 'planted.txt'}; true"
    server = mock_llm([{"reply": f"THOUGHT: look.\n\n```mswea_bash_command\n{run}\n```", "times": 1},
                       {"reply": "THOUGHT: done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
                                 "\n```", "times": 1}])
    client = LLMClient(LLMConfig(model="openai/gpt-4o-mini", api_base=server.base_url,
                                 api_key_env="COHARDEN_TEST_ATTACK_KEY", max_tokens=256, timeout=10, max_retries=0))
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = mini.MiniSweAgent(client).run(AgentTask(problem_statement="dump"), ws, "test-only", PassCritic())
    output = next(e for e in result.events if e["kind"] == "observation")["output"]
    assert "PATH=" in output
    seen_by_model = repr(server.requests[-1].messages)
    for value in [*SECRETS.values(), "attack-model-key", "attack-dotenv-secret"]:
        assert value not in output
        assert value not in seen_by_model
    assert not (tmp_path / "planted.txt").exists()


def test_an_agent_s_git_config_never_runs_in_coharden_s_git(example: LocalInstance, tmp_path: Path) -> None:
    """The agent may write its workspace's ``.git`` (it may use git); coharden then computes the diff outside
    the sandbox. A clean filter (or an fsmonitor, or a hook) the agent configured there must not run in it."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace

    pwned = tmp_path / "pwned"
    command = (f"git config filter.evil.clean 'touch {pwned}-filter; cat' && "
               f"git config core.fsmonitor 'touch {pwned}-fsmonitor' && "
               f"printf '#!/bin/sh\\ntouch {pwned}-hook\\n' > .git/hooks/post-index-change && "
               "chmod +x .git/hooks/post-index-change && "
               "echo '* filter=evil' > .gitattributes && echo 'changed' >> README.md; true")
    agent = ExternalCommandAgent(command, timeout=60)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = agent.run(AgentTask(problem_statement="plant"), ws, "test-only", PassCritic())
        assert "filter" in (ws.root / ".git" / "config").read_text()  # the agent did write its config
    assert "changed" in result.patch
    assert not list(tmp_path.glob("pwned*"))


def test_an_agent_command_that_fills_the_disk_is_killed(example: LocalInstance, monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Agents' commands get the tests' disk limit: many files each under the file-size limit are stopped once
    they pass the total, and the observation says why."""
    from coharden.agent import AgentTask, ExternalCommandAgent, harness
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace

    monkeypatch.setattr(harness, "AGENT_MAX_DISK_BYTES", 8 << 20)
    agent = ExternalCommandAgent("for i in $(seq 1 200); do head -c 1048576 /dev/zero > fill$i.bin; sleep 0.01; "
                                 "done; echo finished", timeout=120)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = agent.run(AgentTask(problem_statement="fill"), ws, "test-only", PassCritic())
        left = sum(p.stat().st_size for p in ws.root.glob("fill*.bin"))
    observed = next(e for e in result.events if e["kind"] == "observation")
    assert "finished" not in observed["output"]
    assert "max_disk_mb" in observed.get("exception_info", ""), observed
    assert left < 64 << 20


def test_an_agent_cannot_make_coharden_write_its_prompt_through_a_link(example: LocalInstance,
                                                                      tmp_path: Path) -> None:
    """coharden writes the external agent's prompt before every invocation, outside the sandbox: a command that
    plants a link where the prompt goes (the workspace's .coharden/PROMPT.md, its own prompt file) must not make
    that write land on a host file."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import CriticContext, SkillCritic, default_critic
    from coharden.execution.workspace import Workspace

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    command = (f"mkdir -p .coharden && ln -sf {victim} .coharden/PROMPT.md; ln -sf {victim} \"$COHARDEN_PROMPT_FILE\""
               "; echo x >> README.md; true")
    critic = SkillCritic.combine([default_critic(CriticContext("test-only"), builtins=["clean_patch"])],
                                 max_iterations=1)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = ExternalCommandAgent(command, timeout=60).run(AgentTask(problem_statement="x"), ws, "test-only",
                                                               critic)
    assert result.iterations == 1  # the follow-up was written and the command ran again
    assert victim.read_text() == "precious\n"


def test_the_default_agent_is_refused_where_its_sandbox_cannot_be_made(example: LocalInstance,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents' commands get the tests' rule: no bwrap here means no run, unless the weaker confinement is
    accepted (``allow_weak_sandbox``)."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.errors import CoHardenError
    from coharden.execution import sandbox
    from coharden.execution.workspace import Workspace

    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        with pytest.raises(CoHardenError, match="--allow-weak-sandbox"):
            ExternalCommandAgent("true", timeout=30).run(AgentTask(problem_statement="x"), ws, "test-only",
                                                         PassCritic())
        accepted = ExternalCommandAgent("echo ran", timeout=30, allow_weak_sandbox=True).run(
            AgentTask(problem_statement="x"), ws, "test-only", PassCritic())
    assert "ran" in next(e for e in accepted.events if e["kind"] == "observation")["output"]


def test_the_agent_diff_ignores_filters_of_the_user_s_git_config(example: LocalInstance, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's global git config may define a filter (git-lfs's); an agent's in-tree .gitattributes that names
    it must not make coharden's diff (outside the sandbox) run it."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace

    pwned = tmp_path / "pwned"
    config = tmp_path / "gitconfig"
    config.write_text(f"[filter \"lfs\"]\n\tclean = sh -c 'touch {pwned}; cat'\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    agent = ExternalCommandAgent("echo '* filter=lfs' > .gitattributes && echo changed >> README.md", timeout=60)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = agent.run(AgentTask(problem_statement="x"), ws, "test-only", PassCritic())
    assert "changed" in result.patch
    assert not pwned.exists()
