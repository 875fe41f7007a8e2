"""Agents: an LLM (or any command-line coding agent) working in a coharden workspace, with the critic at
every finish.

``Agent.run(task, workspace, mode, critic) -> AgentResult``. Agents:

* :class:`MiniSweAgent` (default): mini-swe-agent's loop with the model routed through coharden's LLMClient;
  needs ``pip install 'coharden[agent]'`` and is imported lazily;
* :class:`ExternalCommandAgent`: re-invokes any command-line agent with a prompt file (Ralph-style loop);
* :class:`~coharden.agent.openhands.OpenHandsAgent`: the OpenHands SDK (optional extra, Python >= 3.12).
"""

from typing import Any

from coharden.agent.base import Agent, AgentResult, AgentTask
from coharden.agent.external import ExternalCommandAgent, ExternalCommandAgentConfig
from coharden.agent.harness import Session, Trajectory, read_trajectory, workspace_diff
from coharden.critic.context import Mode as AgentMode

_LAZY = {
    "MiniSweAgent": "coharden.agent.mini",
    "MiniSweAgentConfig": "coharden.agent.mini",
    "LLMClientModel": "coharden.agent.mini",
    "OpenHandsAgent": "coharden.agent.openhands",
    "to_openhands_critic": "coharden.agent.openhands",
}

__all__ = [
    "Agent",
    "AgentMode",
    "AgentResult",
    "AgentTask",
    "ExternalCommandAgent",
    "ExternalCommandAgentConfig",
    "LLMClientModel",
    "MiniSweAgent",
    "MiniSweAgentConfig",
    "OpenHandsAgent",
    "Session",
    "Trajectory",
    "read_trajectory",
    "to_openhands_critic",
    "workspace_diff",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'coharden.agent' has no attribute {name!r}")
