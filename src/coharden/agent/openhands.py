"""Adapter for the OpenHands software-agent SDK (optional: ``pip install 'coharden[openhands]'``, Python >= 3.12).

Two pieces:

* :func:`to_openhands_critic` wraps a coharden critic as an SDK ``CriticBase``, for ``Agent(critic=...)``. The
  SDK runs it at the finish action but passes ``git_patch=None``, so the adapter computes the working-tree diff
  from the workspace itself. SDK events are converted to coharden's plain events
  (:func:`events_from_openhands`). The SDK swallows critic exceptions (and would then finish as if accepted),
  so the adapter catches them itself and returns score 0: fail closed.
* :class:`OpenHandsAgent` runs an SDK ``Agent`` + ``Conversation`` in a coharden workspace with that critic
  and reports an :class:`~coharden.agent.base.AgentResult`. The SDK's own iterative refinement sends the
  follow-ups. The model goes through the SDK's ``LLM`` (not coharden's LLMClient), so coharden's budgets and
  record / replay do not apply there; the cost is the SDK's ``llm.metrics.accumulated_cost``.

Nothing here imports the SDK at module import; :func:`events_from_openhands` is duck-typed (by class name) and
works without it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coharden.agent.base import Agent, AgentTask
from coharden.agent.harness import Session, workspace_diff
from coharden.critic.base import CriticBase, CriticResult
from coharden.critic.events import Event, action, make_event, message, observation

_REFINEMENT_KEY = "iterative_refinement_iteration"  # the SDK's agent_state key (agent/critic_mixin.py)
#: SDK action classes whose ``command`` is a shell command (the file editor's ``command`` is "view", "create", ...).
_SHELL_ACTIONS = frozenset({"TerminalAction", "ExecuteBashAction"})


def _text(content: Any) -> str:
    """Text of an SDK message content (a list of TextContent / ImageContent) or a plain string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if hasattr(content, "text"):
        return str(content.text)
    if isinstance(content, Iterable):
        return "".join(str(getattr(part, "text", "")) for part in content)
    return str(content)


def events_from_openhands(events: Iterable[Any]) -> list[Event]:
    """coharden events for SDK events (``ActionEvent``, ``ObservationEvent``, ``MessageEvent``,
    ``SystemPromptEvent``; others become ``kind: other``), matched by class name so the SDK is not imported."""
    out: list[Event] = []
    for event in events:
        kind = type(event).__name__
        if kind == "ActionEvent":
            act: Any = getattr(event, "action", None)
            tool = getattr(event, "tool_name", "")
            if type(act).__name__ == "FinishAction":
                out.append(make_event("finish", "agent", exit_status="FinishAction",
                                      submission=str(getattr(act, "message", ""))))
            elif type(act).__name__ in _SHELL_ACTIONS and hasattr(act, "command"):
                out.append(action(str(act.command), tool_name=tool))
            else:
                args = act.model_dump(mode="json") if hasattr(act, "model_dump") else {}
                out.append(make_event("action", "agent", command="", tool_name=tool, arguments=args))
        elif kind == "ObservationEvent":
            obs = getattr(event, "observation", None)
            code = getattr(obs, "exit_code", None)
            if code is None:
                code = getattr(getattr(obs, "metadata", None), "exit_code", None)
            out.append(observation(_text(getattr(obs, "text", "")), code, tool_name=getattr(event, "tool_name", "")))
        elif kind == "MessageEvent":
            msg = getattr(event, "llm_message", None)
            out.append(message(str(getattr(msg, "role", "user")), _text(getattr(msg, "content", ""))))
        elif kind == "SystemPromptEvent":
            out.append(message("system", _text(getattr(event, "system_prompt", ""))))
        else:
            out.append(make_event("other", str(getattr(event, "source", "agent")), type=kind))
    return out


@functools.cache
def _adapter_class() -> type:
    """The SDK critic class, defined once (the SDK refuses two classes of the same name)."""
    try:
        from openhands.sdk.critic import CriticBase as SdkCriticBase
        from openhands.sdk.critic import CriticResult as SdkCriticResult
    except ImportError as exc:
        raise ImportError("the OpenHands adapter needs openhands-sdk (Python >= 3.12): "
                          "pip install 'coharden[openhands]'") from exc
    from pydantic import PrivateAttr

    class CohardenCritic(SdkCriticBase):
        """A coharden critic inside the OpenHands SDK; computes the git patch the SDK does not pass."""

        workspace: str
        base_commit: str
        _critic: Any = PrivateAttr(default=None)
        _log: list = PrivateAttr(default_factory=list)

        def evaluate(self, events: Any, git_patch: str | None = None) -> Any:
            try:
                patch = git_patch if git_patch is not None else workspace_diff(Path(self.workspace),
                                                                               self.base_commit)
                result = self._critic.evaluate(events_from_openhands(events), patch)
                accepted = self._critic.accepts(result)
                self._log.append({"result": result, "patch": patch, "accepted": accepted, "error": None})
            except Exception as exc:  # the SDK would log and swallow it, then finish: fail closed instead
                error = f"{type(exc).__name__}: {exc}"
                result = CriticResult(score=0.0, message=f"critic error: {error}", metadata={"error": error})
                self._log.append({"result": result, "patch": "", "accepted": False, "error": error})
            return SdkCriticResult(score=result.score, message=result.message, metadata=result.metadata)

        def get_followup_prompt(self, critic_result: Any, iteration: int) -> str:
            ours = CriticResult(score=critic_result.score, message=critic_result.message,
                                metadata=critic_result.metadata)
            return self._critic.get_followup_prompt(ours, iteration)

        def should_refine(self, critic_result: Any) -> bool:
            if self.iterative_refinement is None:
                return False
            ours = CriticResult(score=critic_result.score, message=critic_result.message,
                                metadata=critic_result.metadata)
            return not self._critic.accepts(ours)

    return CohardenCritic


def to_openhands_critic(critic: CriticBase, workspace: Path | str, base_commit: str) -> Any:
    """An SDK critic running ``critic`` (same threshold and max_iterations) with the diff of ``workspace``
    against ``base_commit``. Its evaluations are kept in ``._log`` (result, patch, accepted, error)."""
    from openhands.sdk.critic import IterativeRefinementConfig as SdkRefinement

    refinement = None
    if critic.iterative_refinement is not None:
        refinement = SdkRefinement(success_threshold=critic.iterative_refinement.success_threshold,
                                   max_iterations=critic.iterative_refinement.max_iterations)
    adapter = _adapter_class()(workspace=str(workspace), base_commit=base_commit, mode=critic.mode,
                               iterative_refinement=refinement)
    adapter._critic = critic
    return adapter


class OpenHandsAgent(Agent):
    """An OpenHands SDK agent (terminal + file editor tools by default) with a coharden critic at its finish."""

    name = "openhands"

    def __init__(self, llm: Any, tools: list[Any] | None = None, *,
                 conversation_kwargs: dict[str, Any] | None = None, **agent_kwargs: Any) -> None:
        """``conversation_kwargs`` go to the SDK's ``Conversation``; by default its console visualizer is off
        (``visualizer=None``): it prints every step to stdout, which is coharden's (``--json`` output), and the
        run's events go to coharden's trajectory anyway."""
        self.llm = llm
        self.tools = tools
        self.conversation_kwargs = {"visualizer": None, **(conversation_kwargs or {})}
        self.agent_kwargs = agent_kwargs

    def describe(self) -> dict[str, Any]:
        return {"model": str(getattr(self.llm, "model", ""))}

    def _run(self, task: AgentTask, session: Session) -> float | None:
        from openhands.sdk import Agent as SdkAgent
        from openhands.sdk import Conversation, Tool

        tools = self.tools
        if tools is None:
            from openhands.tools.file_editor import FileEditorTool
            from openhands.tools.terminal import TerminalTool

            tools = [Tool(name=TerminalTool.name), Tool(name=FileEditorTool.name)]
        adapter = to_openhands_critic(session.critic, session.root, session.workspace.commit)
        agent = SdkAgent(llm=self.llm, tools=tools, critic=adapter, **self.agent_kwargs)
        conversation = Conversation(agent=agent, workspace=str(session.root), **self.conversation_kwargs)
        conversation.send_message(task.render(session.mode))
        conversation.run()
        for event in events_from_openhands(conversation.state.events):
            session.emit(event)
        session.iteration = int(conversation.state.agent_state.get(_REFINEMENT_KEY, 0))
        log = adapter._log
        for entry in log:
            session.critic_results.append(entry["result"])
            session.emit(make_event("critic", "harness", score=entry["result"].score, message=entry["result"].message,
                                    metadata=entry["result"].metadata, accepted=entry["accepted"],
                                    error=entry["error"], patch=entry["patch"]))
        cost = float(getattr(getattr(self.llm, "metrics", None), "accumulated_cost", 0.0) or 0.0)
        if not log:
            session.stop("Stopped", error="the OpenHands agent ended without a finish the critic evaluated")
        elif log[-1]["error"]:
            session.stop("CriticError", error=log[-1]["error"])
        else:
            session.patch = log[-1]["patch"]
            session.accepted = bool(log[-1]["accepted"])
            session.exit_status = "Submitted" if session.accepted else "CriticRejected"
        return cost
