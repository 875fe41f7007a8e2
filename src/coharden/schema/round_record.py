"""The per-round record the CoHarden loop writes, one JSON object per line, and how ``coharden eval`` reads it.

Schema (``version`` 1). One record = one instance after one round of the loop::

    {"version": 1, "run": "coharden-gpt5", "instance": "django__django-11099", "round": 2,
     "decision": "refine_test", "laxity": 0.25, "matrix": {"alpha": 3, "beta": 1, "gamma": 0, "delta": 0},
     "admissible": 4, "tokens": 12000, "usd": 0.031, "mutant_usd": 0.012,
     "fix_patch": "diff --git ...", "test_patch": "diff --git ...", "resolved": null, "fail_to_pass": null}

Fields:

* ``instance`` (``instance_id`` accepted too): the instance id.
* ``round``: 0, 1, 2, ... Rounds of one instance need not be consecutive, but (run, instance, round) is unique.
* ``run``: the run (system) name; absent, the JSONL file's stem.
* ``decision``: what the loop decided at the end of the round (free text, tallied per round; e.g.
  ``refine_fix``, ``refine_test``, ``accept``, ``stop``). An instance is *active* in a round when it has a
  record for that round; the decision is not used to infer activity.
* ``laxity``, ``matrix``, ``admissible``: the round's temporal matrix (cells as counts, or as mutant-id lists,
  whose lengths are taken), its admissible mutant count and laxity = beta / admissible. When two of them are
  given they must agree, or the record is rejected (a record contradicting itself is a broken run).
* ``tokens``, ``usd``: LLM tokens and cost of the round (everything, mutants included); ``mutant_usd``: the
  part of ``usd`` spent generating mutants (must be <= ``usd``).
* ``fix_patch`` / ``test_patch``: the round's fix and test (whole patches against the base commit), and/or
  ``resolved`` / ``fail_to_pass``: their grades when the loop already computed them mechanically. A flag wins
  over a patch; a patch without its flag is graded by ``coharden eval`` (resolved: the golden FAIL_TO_PASS and
  PASS_TO_PASS tests on base + fix; F->P: FAIL on the base, PASS on the golden fix). Neither: unknown.
* ``meta``: anything else the loop wants to keep (ignored by eval). Any other key is an error, so a typo
  in a field name fails loudly instead of silently dropping a number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coharden.errors import CoHardenError
from coharden.jsonl import json_lines

RECORD_VERSION: Final = 1
_TOLERANCE = 1e-9


class RecordError(CoHardenError):
    """A run record that cannot be read (the message names file, line and field)."""


class MatrixCounts(BaseModel):
    """The four cells of a (temporal) matrix as counts."""

    model_config = ConfigDict(extra="forbid")

    alpha: int = Field(default=0, ge=0)
    beta: int = Field(default=0, ge=0)
    gamma: int = Field(default=0, ge=0)
    delta: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _lists_to_counts(cls, data: Any) -> Any:
        """Cells given as mutant-id lists (as in :class:`coharden.schema.matrix.Matrix`) count their ids."""
        if isinstance(data, dict):
            return {k: len(v) if isinstance(v, list) else v for k, v in data.items()}
        return data

    @property
    def admissible(self) -> int:
        return self.alpha + self.beta + self.gamma + self.delta

    def as_dict(self) -> dict[str, int]:
        return {"alpha": self.alpha, "beta": self.beta, "gamma": self.gamma, "delta": self.delta}


class RoundRecord(BaseModel):
    """One instance after one round of the CoHarden loop (see the module docstring for the schema)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    version: Literal[1] = RECORD_VERSION
    run: str | None = None
    instance: str = Field(min_length=1, validation_alias=AliasChoices("instance", "instance_id"))
    round: int = Field(ge=0)
    decision: str = Field(min_length=1)
    laxity: float | None = Field(default=None, ge=0, le=1)
    matrix: MatrixCounts | None = None
    admissible: int | None = Field(default=None, ge=0)
    tokens: int = Field(default=0, ge=0)
    usd: float = Field(default=0.0, ge=0)
    mutant_usd: float = Field(default=0.0, ge=0)
    fix_patch: str | None = None
    test_patch: str | None = None
    resolved: bool | None = None
    fail_to_pass: bool | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("run")
    @classmethod
    def _run_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RoundRecord:
        if self.mutant_usd > self.usd + _TOLERANCE:
            raise ValueError(f"mutant_usd ({self.mutant_usd}) exceeds usd ({self.usd})")
        if self.matrix is not None:
            if self.admissible is not None and self.admissible != self.matrix.admissible:
                raise ValueError(f"admissible ({self.admissible}) != alpha+beta+gamma+delta of matrix "
                                 f"({self.matrix.admissible})")
            if self.laxity is not None:
                if self.matrix.admissible == 0:
                    raise ValueError("laxity given but the matrix has no admissible mutant")
                expected = self.matrix.beta / self.matrix.admissible
                if abs(expected - self.laxity) > _TOLERANCE:
                    raise ValueError(f"laxity ({self.laxity}) != beta / admissible of matrix ({expected})")
        elif self.laxity is not None and self.admissible == 0:
            raise ValueError("laxity given but admissible is 0")
        return self

    @property
    def admissible_count(self) -> int | None:
        """Admissible mutants: the field, else the matrix's sum, else None."""
        if self.admissible is not None:
            return self.admissible
        return self.matrix.admissible if self.matrix is not None else None


def _message(exc: ValidationError) -> str:
    return "; ".join(f"field {'.'.join(map(str, e['loc'])) or '<record>'}: {e['msg']}" for e in exc.errors())


def load_run_file(path: Path) -> list[RoundRecord]:
    """Records of one JSONL file; ``run`` defaults to the file's stem."""
    records: list[RoundRecord] = []
    for number, data in json_lines(path, RecordError):
        if not isinstance(data, dict):
            raise RecordError(f"{path}:{number}: a record must be a JSON object")
        try:
            record = RoundRecord.model_validate(data)
        except ValidationError as exc:
            raise RecordError(f"{path}:{number}: {_message(exc)}") from exc
        if record.run is None:
            record.run = path.stem
        records.append(record)
    return records


def load_runs(directory: Path) -> dict[str, list[RoundRecord]]:
    """Every ``*.jsonl`` file of ``directory`` (sorted, not recursive), grouped by run name.

    Two records with the same (run, instance, round) are an error: a run must not be counted twice.
    """
    if not directory.is_dir():
        raise RecordError(f"{directory}: not a directory of run records (*.jsonl)")
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        raise RecordError(f"{directory}: no run records (*.jsonl)")
    runs: dict[str, list[RoundRecord]] = {}
    seen: dict[tuple[str, str, int], str] = {}
    for path in files:
        for index, record in enumerate(load_run_file(path)):
            run = record.run or path.stem
            key = (run, record.instance, record.round)
            where = f"{path.name} record {index + 1}"
            if key in seen:
                raise RecordError(f"{directory}: run {run!r}, instance {record.instance!r}, round {record.round} "
                                  f"appears twice ({seen[key]} and {where})")
            seen[key] = where
            runs.setdefault(run, []).append(record)
    return {name: sorted(recs, key=lambda r: (r.instance, r.round)) for name, recs in sorted(runs.items())}
