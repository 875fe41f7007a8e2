"""Any command-line coding agent, re-invoked with a prompt file until the critic accepts (a Ralph-style loop).

Each iteration writes the prompt to ``PROMPT.md`` in a directory of coharden's outside the workspace (shown
read-only in the sandbox, so the command cannot make coharden's next write follow a link) and runs
the command in the workspace, in its own process group with a wall-clock limit. The command is a shell string or an
argument list; ``{prompt_file}`` in it is replaced by the prompt file's absolute path, and the environment
carries ``COHARDEN_PROMPT_FILE``, ``COHARDEN_ITERATION`` and ``COHARDEN_MODE``. For example::

    ExternalCommandAgent("cat {prompt_file} | claude -p --dangerously-skip-permissions",
                         pass_env=["ANTHROPIC_API_KEY"], readable=[Path.home() / ".local"])
    ExternalCommandAgent(["aider", "--yes", "--message-file", "{prompt_file}"], pass_env=["OPENAI_API_KEY"])

By default the command runs in the tests' sandbox with the network on (it calls its model): the workspace is
writable, the system directories are shown read-only, and nothing of the user's home, checkout or stores is
there (``readable`` shows more, ``sandbox=False`` turns it off); it gets the host's allow-listed variables
only, so its model key must be named in ``pass_env``.

After each invocation the working-tree diff goes to the critic; on rejection the next invocation gets the
same task with the critic's follow-up appended. State carries over between invocations through the files
(the agent sees its own earlier changes), not through a conversation. The agent's cost is unknown to coharden
(``cost`` is None). Its events are the command lines and their output, so trajectory-based detectors (the
ran-the-test gate) see only what the agent printed.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined, Template
from pydantic import BaseModel, ConfigDict

from coharden.agent.base import Agent, AgentTask, builtin_config
from coharden.agent.harness import Session, agent_confinement, agent_environment
from coharden.critic.events import action, observation
from coharden.execution.sandbox import run_limited

PROMPT_FILE = "PROMPT.md"


class ExternalCommandAgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str | list[str]
    """Shell command (run with ``bash -c``) or argument list; ``{prompt_file}`` is substituted."""
    timeout: float = 1800.0
    """Seconds per invocation; a timed-out invocation ends the run (``TimeExceeded``, not accepted)."""
    env: dict[str, str] = {}
    prompt_template: str | None = None
    task_template: str | None = None
    max_output_chars: int = 20000
    """Output kept per invocation in the events (head and tail)."""
    sandbox: bool = True
    """Run the command in the tests' sandbox (the workspace writable, nothing of the user's home, checkout or
    stores; see :func:`~coharden.agent.harness.agent_confinement`). Off: a plain process with the host's files."""
    network: bool = True
    """Let the command reach the network (it calls its model); inside the sandbox otherwise."""
    pass_env: list[str] = []
    """Host variables passed by name (the agent's own key, e.g. ``ANTHROPIC_API_KEY``): none by default."""
    readable: list[Path] = []
    """Host paths the sandboxed command may read (the agent's installation or its settings directory)."""
    cache_dir: Path | None = None
    """Where the base commit's objects are packed for the sandbox (default: the settings' cache directory)."""
    allow_weak_sandbox: bool = False
    """Run the command where the full sandbox cannot be made (off: refused with the reason)."""


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters elided] ...\n{text[-half:]}"


class ExternalCommandAgent(Agent):
    name = "external-command"

    def __init__(self, command: str | list[str] | None = None, config: ExternalCommandAgentConfig | None = None,
                 **kwargs: Any) -> None:
        if config is None:
            config = ExternalCommandAgentConfig(command=command, **kwargs)  # type: ignore[arg-type]
        self.config = config

    def describe(self) -> dict[str, Any]:
        return {"command": self.config.command}

    def _argv(self, prompt_file: Path) -> list[str]:
        command = self.config.command
        if isinstance(command, str):
            return ["bash", "-c", command.replace("{prompt_file}", shlex.quote(str(prompt_file)))]
        return [arg.replace("{prompt_file}", str(prompt_file)) for arg in command]

    def _run(self, task: AgentTask, session: Session) -> float | None:
        task_text = task.render(session.mode, self.config.task_template)
        # the prompt lies outside the workspace, in a directory of coharden's that the sandbox shows read-only:
        # coharden writes it outside any sandbox before every invocation, and a file in the workspace could be
        # swapped by the command for a link to a host file, which that write would then overwrite
        with tempfile.TemporaryDirectory(prefix="coharden-prompt-") as prompts:
            return self._loop(task_text, session, Path(prompts) / PROMPT_FILE)

    def _loop(self, task_text: str, session: Session, prompt_file: Path) -> float | None:
        cfg = self.config
        template = cfg.prompt_template or builtin_config()["external"]["prompt_template"]
        feedback = ""
        while True:
            prompt = Template(template, undefined=StrictUndefined, keep_trailing_newline=True).render(
                task=task_text, feedback=feedback, iteration=session.iteration, mode=session.mode.value)
            prompt_file.write_text(prompt, encoding="utf-8")
            argv = self._argv(prompt_file)
            session.emit(action(shlex.join(argv), iteration=session.iteration, prompt=prompt))
            env = agent_environment(cfg.pass_env, **cfg.env, COHARDEN_PROMPT_FILE=str(prompt_file),
                                    COHARDEN_ITERATION=str(session.iteration), COHARDEN_MODE=session.mode.value)
            # the interpreter running coharden is shown too: a command may call ``python`` from its PATH
            confine = agent_confinement(session.workspace, [sys.executable], network=cfg.network,
                                        readable=[*cfg.readable, prompt_file.parent], cache_dir=cfg.cache_dir,
                                        allow_weak=cfg.allow_weak_sandbox) if cfg.sandbox else None
            result = run_limited(argv, session.root, timeout=cfg.timeout, env=env, network=cfg.network,
                                 confine=confine)
            session.emit(observation(_clip(result.output, cfg.max_output_chars), result.returncode,
                                     duration_s=round(result.duration, 3), timed_out=result.timed_out,
                                     **({"exception_info": result.disk} if result.disk else {})))
            if result.timed_out:
                session.stop("TimeExceeded", error=f"the agent command ran longer than {cfg.timeout:g} s")
                return None
            followup = session.finish()
            if followup is None:
                return None
            feedback = followup
