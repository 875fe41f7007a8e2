"""The agent interface: ``Agent.run(task, workspace, mode, critic) -> AgentResult``."""

from __future__ import annotations

import abc
import time
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import StrictUndefined, Template
from pydantic import BaseModel, ConfigDict, Field

import coharden
from coharden.agent.harness import TRAJECTORY_FORMAT, Session, Trajectory, prepare_workspace
from coharden.critic.base import CriticBase, CriticResult
from coharden.critic.context import Mode
from coharden.critic.events import Event, make_event
from coharden.execution.workspace import Workspace
from coharden.llm.errors import kind_of
from coharden.schema.instance import Instance

CONFIG_DIR = Path(__file__).parent / "config"


@cache
def builtin_config(name: str = "default") -> dict[str, Any]:
    """A packaged YAML config (``coharden/agent/config/<name>.yaml``)."""
    return yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


class AgentTask(BaseModel):
    """What the agent is asked to do: the issue, and optionally a fix or a test to work against."""

    model_config = ConfigDict(extra="forbid")

    problem_statement: str
    instance_id: str = ""
    fix: str = ""
    """A fix to show the agent (e.g. the fix a test-only round hardens a test against); empty: none."""
    test: str = ""
    """A test to show the agent (e.g. the test a fix-only round must pass); empty: none."""
    notes: str = ""
    """More instructions appended to the task (e.g. feedback carried over from a previous round)."""
    test_command: str = "python -m pytest"

    @classmethod
    def from_instance(cls, instance: Instance, **kwargs: Any) -> AgentTask:
        return cls(problem_statement=instance.problem_statement, instance_id=instance.instance_id, **kwargs)

    def render(self, mode: Mode, template: str | None = None) -> str:
        """The task prompt for ``mode`` (Jinja, StrictUndefined; variables: the fields and ``mode``)."""
        text = template if template is not None else builtin_config()["task_template"]
        return Template(text, undefined=StrictUndefined, keep_trailing_newline=True).render(
            mode=mode.value, **self.model_dump())


class AgentResult(BaseModel):
    """Outcome of one run. ``patch`` is the working-tree diff at the last finish (or at the stop); it is the
    submission only when ``accepted`` -- use :attr:`submission`, which is None otherwise (fail closed)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    events: list[Event]
    patch: str
    cost: float | None
    """USD spent on model calls in this run; None when unknown (an external agent)."""
    accepted: bool
    exit_status: str
    """``Submitted`` (accepted), ``CriticRejected``, ``CriticError``, ``TruncatedReply``, ``LimitsExceeded``, ..."""
    iterations: int = 0
    """Follow-ups sent after critic rejections."""
    critic_results: list[CriticResult] = Field(default_factory=list)
    error: str | None = None
    trajectory_path: Path | None = None

    @property
    def submission(self) -> str | None:
        return self.patch if self.accepted else None

    @property
    def error_kind(self) -> str | None:
        """The kind of model error that stopped the run (an :class:`~coharden.llm.errors.ErrorKind` value: ``auth``,
        ``bad_parameter``, ``cost_cap``, ...), None when no model error stopped it."""
        return kind_of(self.exit_status)


class Agent(abc.ABC):
    """Runs in a coharden :class:`Workspace` (a throwaway clone), with the critic at every finish."""

    name: str = "agent"

    def run(
        self,
        task: AgentTask | str,
        workspace: Workspace,
        mode: Mode | str,
        critic: CriticBase,
        *,
        trajectory_path: Path | None = None,
    ) -> AgentResult:
        """Run until the critic accepts, the follow-ups run out, or the agent stops; the events go to
        ``trajectory_path`` as JSONL (one event per line, written as they happen)."""
        if not isinstance(workspace, Workspace):
            raise TypeError("an agent runs in a coharden Workspace (a throwaway clone), not in a directory: "
                            f"got {type(workspace).__name__}")
        if isinstance(task, str):
            task = AgentTask(problem_statement=task)
        mode = Mode(mode)
        context = getattr(critic, "context", None)
        if context is not None and getattr(context, "mode", mode) is not mode:
            raise ValueError(f"the critic was built for mode {context.mode.value!r}, the run is {mode.value!r}")
        if workspace.path is None:
            workspace.open()
        prepare_workspace(workspace.root)
        trajectory = Trajectory(trajectory_path)
        session = Session(mode=mode, workspace=workspace, critic=critic, trajectory=trajectory)
        session.emit(make_event("start", "harness", agent=self.name, mode=mode.value, task=task.model_dump(),
                                base_commit=workspace.commit, critic=type(critic).__name__,
                                max_iterations=critic.max_iterations, trajectory_format=TRAJECTORY_FORMAT,
                                coharden_version=coharden.__version__, **self.describe()))
        cost: float | None = None
        try:
            cost = self._run(task, session)
            if not session.done:
                session.stop("Stopped", error="the agent returned without finishing")
        except BaseException as exc:
            session.stop(type(exc).__name__, error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            session.emit(make_event("end", "harness", exit_status=session.exit_status, accepted=session.accepted,
                                    iterations=session.iteration, cost=cost,
                                    elapsed_s=round(time.monotonic() - session.started, 3)))
            trajectory.close()
        return AgentResult(events=session.events, patch=session.patch, cost=cost, accepted=session.accepted,
                           exit_status=session.exit_status, iterations=session.iteration,
                           critic_results=session.critic_results, error=session.error,
                           trajectory_path=trajectory_path)

    def describe(self) -> dict[str, Any]:
        """Extra fields for the trajectory's start event (versions, configuration)."""
        return {}

    @abc.abstractmethod
    def _run(self, task: AgentTask, session: Session) -> float | None:
        """Drive the agent: call ``session.finish()`` at each finish (it returns the follow-up prompt, or None
        when the run is over) and ``session.stop()`` when it ends otherwise. Return the cost, if known."""
