"""Critic skills: a directory with ``critic.yaml`` and detector modules, loaded without changing coharden.

``critic.yaml``::

    name: my-checks                  # optional; default: the directory name
    threshold: 0.6                   # accept when score >= threshold
    max_iterations: 3                # follow-ups before giving up
    signals:
      - {name: no_skip, type: hard_gate, detector: detectors/no_skip.py}
      - {name: has_assert_message, type: soft, weight: 0.5, detector: detectors/messages.py}

A detector module exposes ``detect(events, git_patch) -> (triggered, metadata)``; ``metadata`` is a dict and
``metadata["followup_text"]``, when set, is what the agent is told if the signal triggered. A ``detect`` with
a third parameter also receives the :class:`~coharden.critic.context.CriticContext` (phase, instance,
executor); the built-in skills use it.

Scoring: signals run in the order listed. The first triggered ``hard_gate`` ends the evaluation with score 0.
Otherwise ``score = 1 - sum(weight of every triggered soft signal)``, clipped to [0, 1], and the submission
is accepted when ``score >= threshold`` (the OpenHands ``success_threshold``). ``weight`` of a hard gate is
ignored. The follow-up prompt concatenates the ``followup_text`` of every triggered signal.

A malformed ``critic.yaml`` or detector raises :class:`SkillError` naming the file and the field; a detector
that raises or returns something else than ``(bool, dict)`` raises :class:`DetectorError` at evaluation, which
the agent harness turns into a rejected run (fail closed), never into an acceptance.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coharden.critic.base import CriticBase, CriticResult, IterativeRefinementConfig
from coharden.critic.context import CriticContext
from coharden.critic.events import Event
from coharden.errors import CoHardenError
from coharden.yamlfile import read_yaml

SKILL_FILE = "critic.yaml"


class SkillError(CoHardenError):
    """A malformed skill: the message names the file and the field."""


class DetectorError(CoHardenError):
    """A detector failed at evaluation time (raised, or returned the wrong shape)."""


class SignalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    type: Literal["hard_gate", "soft"]
    weight: float = Field(default=1.0, ge=0)
    """For soft signals: how much a trigger lowers the score."""
    detector: str = Field(min_length=1)
    """Python file, relative to the skill directory."""


class SkillSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    description: str = ""
    threshold: float = Field(default=0.6, ge=0, le=1)
    max_iterations: int = Field(default=3, ge=1)
    signals: list[SignalSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> SkillSpec:
        seen: set[str] = set()
        for signal in self.signals:
            if signal.name in seen:
                raise ValueError(f"duplicate signal name {signal.name!r}")
            seen.add(signal.name)
        return self


DetectFn = Callable[..., Any]


@dataclass(frozen=True)
class Signal:
    """A loaded signal: its spec and the ``detect`` function of its detector module."""

    name: str
    type: Literal["hard_gate", "soft"]
    weight: float
    path: Path
    detect: DetectFn
    takes_context: bool

    def run(self, events: Sequence[Event], git_patch: str, context: CriticContext | None) -> tuple[bool, dict]:
        try:
            if self.takes_context:
                result = self.detect(events, git_patch, context)
            else:
                result = self.detect(events, git_patch)
        except DetectorError:
            raise
        except Exception as exc:
            raise DetectorError(f"{self.path}: detect() of signal {self.name!r} raised "
                                f"{type(exc).__name__}: {exc}") from exc
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise DetectorError(f"{self.path}: detect() of signal {self.name!r} must return (triggered, metadata), "
                                f"got {type(result).__name__}")
        triggered, metadata = result
        if metadata is None:
            metadata = {}
        if not isinstance(triggered, bool) or not isinstance(metadata, dict):
            raise DetectorError(f"{self.path}: detect() of signal {self.name!r} must return (bool, dict), "
                                f"got ({type(triggered).__name__}, {type(metadata).__name__})")
        return triggered, metadata


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _load_detector(path: Path, where: str) -> tuple[DetectFn, bool]:
    """Import a detector file under a unique module name; return ``detect`` and whether it takes a context."""
    if not path.is_file():
        raise SkillError(f"{where}: detector file {path} not found")
    if path.suffix != ".py":
        raise SkillError(f"{where}: detector file {path} is not a .py file")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(f"coharden_detector_{digest}_{path.stem}", path)
    if spec is None or spec.loader is None:  # pragma: no cover - only for odd file systems
        raise SkillError(f"{where}: cannot load detector file {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise SkillError(f"{path}: detector does not parse: line {exc.lineno}: {exc.msg} ({where})") from exc
    except Exception as exc:
        raise SkillError(f"{path}: detector failed to import: {type(exc).__name__}: {exc} ({where})") from exc
    detect = getattr(module, "detect", None)
    if not callable(detect):
        raise SkillError(f"{path}: no function `detect(events, git_patch)` ({where})")
    params = list(inspect.signature(detect).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_positional = any(p.kind is p.VAR_POSITIONAL for p in params)
    if len(positional) < 2 and not var_positional:
        raise SkillError(f"{path}: `detect` must accept (events, git_patch), it takes {len(positional)} "
                         f"positional parameter(s) ({where})")
    required = [p for p in positional if p.default is p.empty]
    if len(required) > 3:
        raise SkillError(f"{path}: `detect` requires {len(required)} parameters; at most 3 "
                         f"(events, git_patch, context) ({where})")
    takes_context = len(positional) >= 3 or any(p.name == "context" for p in params)
    return detect, takes_context


def read_spec(path: Path) -> SkillSpec:
    """Parse and validate a ``critic.yaml``; errors name the file and the field."""
    data = read_yaml(path, SkillError)
    if not isinstance(data, dict):
        raise SkillError(f"{path}: expected a mapping with threshold, max_iterations and signals, "
                         f"got {type(data).__name__}")
    try:
        return SkillSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_format_loc(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise SkillError(f"{path}: {problems}") from None


class SkillCritic(CriticBase):
    """A critic made of signals (hard gates and weighted soft signals) from one or more skill directories."""

    name: str = "skill"
    signals: list[Signal] = Field(default_factory=list)
    context: CriticContext | None = None

    def evaluate(self, events: Sequence[Event], git_patch: str | None = None) -> CriticResult:
        patch = git_patch or ""
        evaluated: list[dict[str, Any]] = []
        gate: str | None = None
        for signal in self.signals:
            triggered, metadata = signal.run(events, patch, self.context)
            evaluated.append({"name": signal.name, "type": signal.type, "weight": signal.weight,
                              "triggered": triggered, "metadata": metadata})
            if triggered and signal.type == "hard_gate":
                gate = signal.name
                break
        triggered_names = [s["name"] for s in evaluated if s["triggered"]]
        soft = sum(s["weight"] for s in evaluated if s["triggered"] and s["type"] == "soft")
        if gate is not None:
            score = 0.0
            message = f"hard gate {gate!r} triggered"
        else:
            score = min(1.0, max(0.0, 1.0 - soft))
            message = (f"soft signals triggered: {', '.join(triggered_names)} (weight {soft:g})"
                       if triggered_names else "no signal triggered")
        threshold = self.iterative_refinement.success_threshold if self.iterative_refinement else None
        metadata = {"critic": self.name, "signals": evaluated, "hard_gate": gate, "triggered": triggered_names,
                    "soft_weight": soft, "threshold": threshold}
        return CriticResult(score=score, message=message, metadata=metadata)

    def get_followup_prompt(self, critic_result: CriticResult, iteration: int) -> str:
        texts = []
        for signal in (critic_result.metadata or {}).get("signals", []):
            text = signal.get("metadata", {}).get("followup_text") if signal.get("triggered") else None
            if text:
                texts.append(str(text).strip())
        if not texts:
            return super().get_followup_prompt(critic_result, iteration)
        return "\n\n".join(texts) + "\n"

    @classmethod
    def combine(cls, critics: Sequence[SkillCritic], *, threshold: float | None = None,
                max_iterations: int | None = None, context: CriticContext | None = None,
                name: str | None = None) -> SkillCritic:
        """One critic with the signals of ``critics`` in order; threshold / iterations from the first unless
        given. Signal names that clash are prefixed with their skill's name."""
        if not critics:
            raise SkillError("no skills to combine")
        first = critics[0].iterative_refinement or IterativeRefinementConfig()
        signals: list[Signal] = []
        seen: set[str] = set()
        for critic in critics:
            for signal in critic.signals:
                label = signal.name if signal.name not in seen else f"{critic.name}/{signal.name}"
                seen.add(label)
                signals.append(Signal(label, signal.type, signal.weight, signal.path, signal.detect,
                                      signal.takes_context))
        refinement = IterativeRefinementConfig(
            success_threshold=first.success_threshold if threshold is None else threshold,
            max_iterations=first.max_iterations if max_iterations is None else max_iterations,
        )
        ctx = context if context is not None else next((c.context for c in critics if c.context), None)
        return cls(name=name or "+".join(c.name for c in critics), signals=signals, context=ctx,
                   iterative_refinement=refinement)


def load_skill(path: str | Path, *, context: CriticContext | None = None) -> SkillCritic:
    """Load a skill directory (or its ``critic.yaml``) into a :class:`SkillCritic`."""
    path = Path(path)
    yaml_path = path if path.is_file() else path / SKILL_FILE
    if not yaml_path.is_file():
        raise SkillError(f"{path}: no {SKILL_FILE} (a critic skill is a directory holding {SKILL_FILE})")
    spec = read_spec(yaml_path)
    root = yaml_path.parent
    signals = []
    for index, signal in enumerate(spec.signals):
        where = f"{yaml_path}: signals[{index}].detector"
        detect, takes_context = _load_detector(root / signal.detector, where)
        signals.append(Signal(signal.name, signal.type, signal.weight, root / signal.detector, detect, takes_context))
    return SkillCritic(
        name=spec.name or root.name,
        signals=signals,
        context=context,
        iterative_refinement=IterativeRefinementConfig(success_threshold=spec.threshold,
                                                       max_iterations=spec.max_iterations),
    )
