"""The environment plan: what an environment for a repository at a commit needs, as one JSON document.

A plan is produced by rule-guided inference (:mod:`coharden.environment.inference`), rendered into a
Dockerfile (:mod:`coharden.environment.dockerfile`) or built as a local virtual environment
(:mod:`coharden.environment.build`), and changed by refinement only through JSON patches
(:mod:`coharden.environment.refine`), so every change to it is recorded and replayable.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from coharden.errors import CoHardenError, validation_message

_VERSION = re.compile(r"^3\.\d{1,2}$")


class PlanError(CoHardenError):
    """A plan that is not valid (bad JSON, a field of the wrong type, a JSON patch that does not apply)."""


class Evidence(BaseModel):
    """Where one inferred fact came from: a file, the field or line read, and the value found."""

    model_config = ConfigDict(extra="forbid")

    source: str
    field: str
    value: str


class EnvPlan(BaseModel):
    """How to build and test an environment for one repository at one commit.

    ``install`` holds shell commands run in the repository root with the environment's ``python`` / ``pip``
    first on PATH (a virtual environment locally, ``/opt/venv`` in the Docker image), in order.
    ``source_roots`` are directories (relative to the repository root) that hold the importable code, such as
    ``src``: the built environment puts ``<cwd>/<root>`` first on ``sys.path`` so tests in any checkout of the
    repository import that checkout's code, not the copy the environment was built from.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    repo: str = ""
    commit: str = ""
    python: str = Field(default="3.12", description="Python version X.Y the environment is built with.")
    python_requires: str | None = Field(default=None, description="Version specifier from the package metadata.")
    python_tested: list[str] = Field(default_factory=list, description="Versions named by tox / nox / CI / "
                                     "classifiers, ascending.")
    system_packages: list[str] = Field(default_factory=list, description="Debian packages for the Docker image.")
    install: list[str] = Field(default_factory=list)
    extras: list[str] = Field(default_factory=list)
    requirements: list[str] = Field(default_factory=list, description="Requirement files the install uses.")
    source_roots: list[str] = Field(default_factory=list)
    test_runner: Literal["pytest"] = "pytest"
    test_args: list[str] = Field(default_factory=list, description="Extra pytest arguments (from tox / CI).")
    test_paths: list[str] = Field(default_factory=list, description="Where the tests are (empty: pytest's "
                                  "configuration decides).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for test runs.")
    mock_services: bool = Field(default=True, description="Point model-provider variables at the mock server.")
    evidence: list[Evidence] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @field_validator("python")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError(f"python must be a version X.Y such as 3.11, got {value!r}")
        return value

    @field_validator("install", "test_args", "system_packages")
    @classmethod
    def _no_newlines(cls, value: list[str]) -> list[str]:
        # one command per entry: a newline would hide a second command inside a Dockerfile RUN line
        for item in value:
            if "\n" in item or "\r" in item:
                raise ValueError(f"entries must be single lines, got {item!r}")
        return value

    def digest(self) -> str:
        """Content hash of what affects the built environment (evidence and notes do not)."""
        data = self.model_dump(mode="json", exclude={"evidence", "notes"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "<plan>") -> EnvPlan:
        try:
            return cls.model_validate_json(text)
        except ValueError as exc:
            raise PlanError(f"{source}: not a valid environment plan: {validation_message(exc)}") from exc



@dataclass(frozen=True)
class EnvTarget:
    """An environment to build and smoke-test: the repository ``repo`` checked out at ``commit``, with ``plan``
    (which a refinement replaces by the patched plan of its next attempt)."""

    repo: Path
    commit: str
    plan: EnvPlan


# --- JSON patch (RFC 6902) ----------------------------------------------------------------------------------
#: Fields a refinement patch must not change: they say which repository and commit the plan is for.
FROZEN_FIELDS = ("schema_version", "repo", "commit")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PlanError(f"JSON pointer {path!r} must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: object, parts: list[str], path: str) -> tuple[object, str]:
    if not parts:
        raise PlanError(f"{path!r}: the whole document cannot be the target")
    node = doc
    for part in parts[:-1]:
        node = _child(node, part, path)
    return node, parts[-1]


def _child(node: object, part: str, path: str) -> object:
    if isinstance(node, dict):
        if part not in node:
            raise PlanError(f"{path!r}: no member {part!r}")
        return node[part]
    if isinstance(node, list):
        return node[_index(node, part, path, allow_end=False)]
    raise PlanError(f"{path!r}: {part!r} is inside a scalar")


def _index(node: list, part: str, path: str, *, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return len(node)
    if not part.isdigit():
        raise PlanError(f"{path!r}: {part!r} is not a list index")
    index = int(part)
    if index > len(node) or (index == len(node) and not allow_end):
        raise PlanError(f"{path!r}: index {index} out of range (length {len(node)})")
    return index


def _add(doc: object, path: str, value: object) -> None:
    node, last = _parent(doc, _pointer(path), path)
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list):
        node.insert(_index(node, last, path, allow_end=True), value)
    else:
        raise PlanError(f"{path!r}: cannot add inside a scalar")


def _remove(doc: object, path: str) -> object:
    node, last = _parent(doc, _pointer(path), path)
    if isinstance(node, dict):
        if last not in node:
            raise PlanError(f"{path!r}: no member {last!r} to remove")
        return node.pop(last)
    if isinstance(node, list):
        return node.pop(_index(node, last, path, allow_end=False))
    raise PlanError(f"{path!r}: cannot remove inside a scalar")


def apply_json_patch(document: dict, operations: object) -> dict:
    """Apply RFC 6902 operations (add, remove, replace, move, copy, test) to a copy of ``document``."""
    if not isinstance(operations, list):
        raise PlanError("a JSON patch must be a list of operations")
    doc = json.loads(json.dumps(document))
    for number, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PlanError(f"operation {number}: needs 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if not isinstance(path, str):
            raise PlanError(f"operation {number}: path must be a string")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PlanError(f"operation {number}: {kind} needs 'value'")
        if kind == "add":
            _add(doc, path, op["value"])
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _remove(doc, path)
            _add(doc, path, op["value"])
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise PlanError(f"operation {number}: {kind} needs 'from'")
            value = _remove(doc, source) if kind == "move" else json.loads(json.dumps(_resolve(doc, source)))
            _add(doc, path, value)
        elif kind == "test":
            if _resolve(doc, path) != op["value"]:
                raise PlanError(f"operation {number}: test failed at {path!r}")
        else:
            raise PlanError(f"operation {number}: unknown op {kind!r}")
    return doc


def _resolve(doc: object, path: str) -> object:
    node = doc
    for part in _pointer(path):
        node = _child(node, part, path)
    return node


def patch_plan(plan: EnvPlan, operations: object) -> EnvPlan:
    """A new plan: ``plan`` with a JSON patch applied, validated; fields in :data:`FROZEN_FIELDS` must not
    change (a refinement may not retarget the plan to another repository or commit)."""
    before = plan.model_dump(mode="json")
    after = apply_json_patch(before, operations)
    changed = [f for f in FROZEN_FIELDS if after.get(f) != before.get(f)]
    if changed:
        raise PlanError(f"the patch changes {', '.join(changed)}, which a refinement may not change")
    try:
        return EnvPlan.model_validate(after)
    except ValueError as exc:
        raise PlanError(f"the patched plan is not valid: {exc}") from exc
