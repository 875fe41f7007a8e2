"""An instance: repository + base commit (buggy code) + issue, in SWE-bench record shape."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Instance(BaseModel):
    """One bug. Field names are those of a SWE-bench record so records load unchanged.

    ``repo`` is either a path to a local git repository or ``owner/name`` (resolved under a repos
    directory as ``DIR/owner__name``); see :func:`coharden.instances.resolve_repo`.
    """

    model_config = ConfigDict(extra="allow", frozen=False)

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(min_length=1)
    problem_statement: str = ""
    patch: str = ""
    test_patch: str = ""
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    version: str | None = None
    environment_setup_commit: str | None = None
    hints_text: str = ""
    #: Python interpreter that runs this instance's tests (default: the configured one).
    python: str | None = None

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode_json_list(cls, value: Any) -> Any:
        # SWE-bench stores these as JSON-encoded strings.
        if isinstance(value, str):
            value = value.strip()
            if not value:
                return []
            decoded = json.loads(value)
            if not isinstance(decoded, list):
                raise ValueError("must be a list of test ids (or a JSON string encoding one)")
            return decoded
        if value is None:
            return []
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_as_str(cls, value: Any) -> Any:
        return None if value is None else str(value)
