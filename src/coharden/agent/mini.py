"""The default agent: mini-swe-agent's ``DefaultAgent`` + ``LocalEnvironment`` in a coharden workspace, with
the model routed through coharden's :class:`~coharden.llm.LLMClient`.

How it fits together (mini-swe-agent is a dependency, used through its public classes):

* :class:`LLMClientModel` implements mini-swe-agent's ``Model`` protocol around ``LLMClient.complete`` with
  text-based actions (one ```` ```mswea_bash_command ```` block per reply, parsed by mini-swe-agent's own
  ``parse_regex_actions``). So coharden's cost accounting, budgets, record / replay and fail-closed truncation
  check apply. Any LLM error ends the run (``exit_status`` = the error's class name); a truncated reply is
  never parsed, so nothing in it is executed or submitted.
* :class:`SandboxedEnvironment` (mini-swe-agent's ``LocalEnvironment`` running commands through coharden's
  sandbox: process-group kill on timeout, memory limit, no network by default) runs each command in a fresh
  subshell in the workspace (a throwaway clone) and raises ``Submitted`` when a command prints
  ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` first.
* :class:`_CriticLoopAgent` (a ``DefaultAgent``) catches that ``Submitted``: the harness computes the diff and
  runs the critic; on rejection the follow-up becomes the next user message and the same conversation goes
  on (one linear message list, as in mini-swe-agent), else the run exits.

Importing this module imports mini-swe-agent (``pip install 'coharden[agent]'``); its start-up banner is
silenced.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

try:
    import minisweagent
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.exceptions import InterruptAgentFlow, Submitted
    from minisweagent.models.utils.actions_text import format_observation_messages, parse_regex_actions
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the default agent needs mini-swe-agent: pip install 'coharden[agent]'") from exc

from pydantic import BaseModel, ConfigDict

from coharden.agent.base import Agent, AgentTask, builtin_config
from coharden.agent.harness import Session, agent_confinement, agent_environment
from coharden.critic.events import action, message, observation
from coharden.execution.sandbox import Confinement, run_limited
from coharden.llm import LLMClient, LLMError, TruncatedReply

MINI_VERSION: str = minisweagent.__version__


class ModelStopped(InterruptAgentFlow):
    """The model call failed (truncated reply, budget, provider error): the run exits, nothing is executed."""


class LLMClientModelConfig(BaseModel):
    """Text-based action format (mini-swe-agent's ``LitellmTextbasedModel``), calls through ``LLMClient``."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = ""
    action_regex: str = r"```mswea_bash_command\s*\n(.*?)\n```"
    format_error_template: str = "{{ error }}"
    observation_template: str = (
        "{% if output.exception_info %}<exception>{{output.exception_info}}</exception>\n{% endif %}"
        "<returncode>{{output.returncode}}</returncode>\n<output>\n{{output.output}}</output>"
    )
    instance_id: str | None = None
    """Accounted per instance in the client's ledger (and capped by a per-instance budget)."""


class LLMClientModel:
    """mini-swe-agent ``Model`` protocol over coharden's :class:`LLMClient`."""

    def __init__(self, client: LLMClient, *, config_class: type = LLMClientModelConfig, **kwargs: Any) -> None:
        self.client = client
        self.config = config_class(**{"model_name": client.config.model, **kwargs})
        self.cost = 0.0
        self.n_calls = 0

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:  # noqa: ARG002
        api_messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        self.n_calls += 1
        try:
            completion = self.client.complete(api_messages, instance_id=self.config.instance_id)
        except TruncatedReply as exc:
            self.cost += exc.completion.cost_usd
            raise ModelStopped(_exit("TruncatedReply", str(exc), partial=exc.partial)) from exc
        except LLMError as exc:
            failed = getattr(exc, "completion", None)
            if failed is not None:
                self.cost += failed.cost_usd
            raise ModelStopped(_exit(type(exc).__name__, str(exc))) from exc
        self.cost += completion.cost_usd
        info = {"cost": completion.cost_usd, "request_hash": completion.request_hash, "cached": completion.cached,
                "finish_reason": completion.finish_reason, "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens}
        try:
            actions = parse_regex_actions(completion.content, action_regex=self.config.action_regex,
                                          format_error_template=self.config.format_error_template,
                                          template_kwargs={"finish_reason": completion.finish_reason})
        except InterruptAgentFlow as exc:  # FormatError: billed, so the cost rides on the message
            exc.messages[0]["extra"].update(info)
            raise
        return {"role": "assistant", "content": completion.content,
                "extra": {"actions": actions, "timestamp": time.time(), **info}}

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        return dict(kwargs)

    def format_observation_messages(self, message: dict[str, Any], outputs: list[dict[str, Any]],  # noqa: ARG002
                                    template_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return format_observation_messages(outputs, observation_template=self.config.observation_template,
                                           template_vars=template_vars)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:  # noqa: ARG002
        return self.config.model_dump()

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"model": self.config.model_dump(mode="json"),
                                    "model_type": f"{type(self).__module__}.{type(self).__name__}"}}}


def _exit(status: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"role": "exit", "content": content, "extra": {"exit_status": status, "submission": "", **extra}}


def _events(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Neutral events (:mod:`coharden.critic.events`) for one mini-swe-agent message."""
    role = msg.get("role", "")
    content = msg.get("content", "")
    if not isinstance(content, str):
        content = str(content)
    extra = msg.get("extra") or {}
    if role == "exit":
        return []  # the session records how the run ended
    if "raw_output" in extra:
        return [observation(extra.get("raw_output", ""), extra.get("returncode"),
                            exception_info=extra.get("exception_info") or "")]
    if role == "assistant":
        fields = {k: extra[k] for k in ("cost", "request_hash", "cached", "finish_reason") if k in extra}
        return [message("assistant", content, **fields),
                *(action(a.get("command", "")) for a in extra.get("actions", []))]
    fields = {}
    if extra.get("interrupt_type"):
        fields["interrupt_type"] = extra["interrupt_type"]
    if extra.get("critic_followup"):
        fields["followup"] = True
    return [message(role, content, **fields)]


class SandboxedEnvironment(LocalEnvironment):
    """mini-swe-agent's ``LocalEnvironment`` with each command run through coharden's sandbox
    (:func:`~coharden.execution.sandbox.run_limited`) in the tests' confinement (``confine``, see
    :func:`~coharden.agent.harness.agent_confinement`): the workspace writable and nothing of the user's files,
    its own process group killed on timeout, an address-space limit, and no network unless allowed. The
    environment is ``config.env`` only (the caller's allow-listed one), never coharden's own: its keys would
    reach the model through the commands' output."""

    def __init__(self, *, network: bool = False, memory_mb: int | None = None, confine: Confinement | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.network = network
        self.memory_mb = memory_mb
        self.confine = confine

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        limit = timeout or self.config.timeout
        result = run_limited(["bash", "-c", action.get("command", "")], Path(cwd or self.config.cwd),
                             timeout=limit, env=dict(self.config.env), memory_mb=self.memory_mb,
                             network=self.network, confine=self.confine)
        output: dict[str, Any] = {"output": result.output, "returncode": result.returncode,
                                  "exception_info": result.disk}  # killed for writing too much: the model is told
        if result.timed_out:
            output.update(returncode=-1, exception_info=f"The command timed out after {limit} s and was killed.",
                          extra={"exception_type": "TimeoutExpired", "exception": f"timeout {limit} s"})
        self._check_finished(output)  # mini-swe-agent's submission check (raises Submitted)
        return output


class _CriticLoopAgent(DefaultAgent):
    """mini-swe-agent's loop, with the critic at each ``Submitted`` and every message mirrored as events."""

    def __init__(self, model: Any, env: Any, *, session: Session, **kwargs: Any) -> None:
        super().__init__(model, env, **kwargs)
        self.session = session

    def add_messages(self, *messages: dict) -> list[dict]:
        for msg in messages:
            for event in _events(msg):
                self.session.emit(event)
            extra = msg.get("extra") or {}
            if msg.get("role") == "exit" and not self.session.done:
                status = extra.get("exit_status", "Stopped")
                fields = {"partial": extra["partial"]} if "partial" in extra else {}
                self.session.stop(status, error=msg.get("content") or status, **fields)
        return super().add_messages(*messages)

    def execute_actions(self, message: dict) -> list[dict]:
        try:
            return super().execute_actions(message)
        except Submitted as exc:
            submission = (exc.messages[0].get("extra") or {}).get("submission", "") if exc.messages else ""
            followup = self.session.finish(submission)
            if followup is None:
                if self.session.accepted:
                    raise
                raise InterruptAgentFlow(_exit(self.session.exit_status, self.session.error or "rejected")) from exc
            return self.add_messages(self.model.format_message(
                role="user", content=followup, extra={"critic_followup": True, "iteration": self.session.iteration}))


class MiniSweAgentConfig(BaseModel):
    """Limits and prompts of the default agent. Template fields left None use ``agent/config/default.yaml``."""

    model_config = ConfigDict(extra="forbid")

    step_limit: int = 50
    """Model calls per run (0: no limit)."""
    cost_limit: float = 3.0
    """USD per run (0: no limit); also see the client's :class:`~coharden.llm.Budget`."""
    wall_time_limit_seconds: int = 0
    max_consecutive_format_errors: int = 3
    command_timeout: int = 120
    """Seconds per shell command."""
    network: bool = False
    """Let the agent's commands reach the network (off: a network namespace where the OS allows it)."""
    memory_mb: int | None = 4096
    """Address-space limit per command (None: off)."""
    python: str | None = None
    """Interpreter whose directory goes first on the agent's PATH (so ``python`` / ``pytest`` are the project's);
    default: the one running coharden."""
    env: dict[str, str] = {}
    """Variables the commands get (besides the host's allow-listed ones: PATH, locale, time zone, user names)."""
    pass_env: list[str] = []
    """Host variables passed to the commands by name (none by default: the commands' output reaches the model)."""
    cache_dir: Path | None = None
    """Where the base commit's objects are packed for the sandbox (default: the settings' cache directory)."""
    allow_weak_sandbox: bool = False
    """Run the commands where the full sandbox cannot be made (off: refused with the reason)."""
    system_template: str | None = None
    instance_template: str | None = None
    task_template: str | None = None
    mini_trajectory: Path | None = None
    """Also save mini-swe-agent's own ``.traj.json`` here (its format, rewritten after every step)."""


class MiniSweAgent(Agent):
    """The default agent. ``model`` is a coharden :class:`LLMClient` (recommended: cost, budgets, replay,
    truncation check) or any mini-swe-agent ``Model`` (e.g. ``DeterministicModel`` or ``LitellmModel``)."""

    name = "mini-swe-agent"

    def __init__(self, model: LLMClient | Any, config: MiniSweAgentConfig | None = None, **kwargs: Any) -> None:
        self.model = model
        self.config = config if config is not None else MiniSweAgentConfig(**kwargs)

    def describe(self) -> dict[str, Any]:
        model = self.model.config.model if isinstance(self.model, LLMClient) else type(self.model).__name__
        return {"mini_version": MINI_VERSION, "model": model, "agent_config": self.config.model_dump(mode="json")}

    def _mini_model(self, task: AgentTask) -> Any:
        if not isinstance(self.model, LLMClient):
            return self.model
        cfg = builtin_config()["mini"]["model"]
        return LLMClientModel(self.model, instance_id=task.instance_id or None, action_regex=cfg["action_regex"],
                              observation_template=cfg["observation_template"],
                              format_error_template=cfg["format_error_template"])

    def _environment(self, session: Session) -> SandboxedEnvironment:
        cfg = self.config
        python = cfg.python or sys.executable
        env = agent_environment(cfg.pass_env, **builtin_config()["mini"]["environment"]["env"], **cfg.env)
        env["PATH"] = os.pathsep.join(p for p in (str(Path(python).parent), env.get("PATH", "")) if p)
        confine = agent_confinement(session.workspace, [python], network=cfg.network, cache_dir=cfg.cache_dir,
                                    allow_weak=cfg.allow_weak_sandbox)
        return SandboxedEnvironment(cwd=str(session.root), env=env, timeout=cfg.command_timeout,
                                    network=cfg.network, memory_mb=cfg.memory_mb, confine=confine)

    def _run(self, task: AgentTask, session: Session) -> float | None:
        cfg = self.config
        defaults = builtin_config()["mini"]["agent"]
        model = self._mini_model(task)
        agent = _CriticLoopAgent(
            model, self._environment(session), session=session,
            system_template=cfg.system_template or defaults["system_template"],
            instance_template=cfg.instance_template or defaults["instance_template"],
            step_limit=cfg.step_limit, cost_limit=cfg.cost_limit,
            wall_time_limit_seconds=cfg.wall_time_limit_seconds,
            max_consecutive_format_errors=cfg.max_consecutive_format_errors,
            output_path=cfg.mini_trajectory,
        )
        agent.run(task.render(session.mode, cfg.task_template))
        return model.cost if isinstance(model, LLMClientModel) else agent.cost
