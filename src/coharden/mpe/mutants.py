"""The mutants of past MPE runs, read back from the result store: what ``coharden mutants list`` and
``coharden mutants show ID`` print (as mutmut's ``results`` and ``show``).

A mutant's id is ``INSTANCE:MUTANT`` (``example__boundary_check:behavior_substitution-2``): the instance and the
mutant's id in its pool. One mutant can appear in several runs (the same instance graded with several tests);
each run is one :class:`PastMutant`, with the cell that test gave it. Single ``coharden mpe`` runs and batch
runs (``--predictions``) are kept with their mutants; ``coharden eval`` keeps no test names and is not read.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from coharden.errors import CoHardenError
from coharden.execution.store import MPE_RESULT, MPE_ROW, Store
from coharden.mpe.result import BREAKING, IMPLAUSIBLE

#: What each cell says about the wrong fix (the candidate's verdict, the reference's).
CELL_MEANING = {"alpha": "both tests pass", "beta": "let through: the candidate passes, the reference fails",
                "gamma": "caught by the candidate only", "delta": "both tests fail"}


@dataclass(frozen=True)
class PastMutant:
    """One mutant as one past run graded it."""

    id: str
    instance_id: str
    test: str
    cell: str
    operator: str
    location: str
    description: str
    source: str
    patch: str
    """The mutant as a patch of the buggy code (it applies as printed)."""
    change: str
    """The diff from the fixed code to the mutant: what its operator changed ("" in runs stored before it was
    kept)."""
    candidate: str | None
    reference: str | None
    plausibility: str | None
    """The PASS_TO_PASS tests' outcome on it (None: not measured); not PASS makes it implausible."""
    behaviour: str | None
    """Its behaviour in that run (mutants no test run told apart share one; see :mod:`coharden.mpe.behaviours`)."""
    run: str
    """``mpe`` (a single run) or ``batch``."""
    when: str
    """When the run was stored (UTC, ISO 8601)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _outcome(verdict: Any) -> str | None:
    return verdict.get("outcome") if isinstance(verdict, dict) else None


def _from_result(data: dict[str, Any], run: str, created: float) -> list[PastMutant]:
    instance_id = str(data.get("instance_id") or "?")
    test = str(data.get("model_name_or_path") if run == "batch" else data.get("test") or "?")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    found = []
    for row in data.get("mutants") or []:
        mutant = row.get("mutant") or {}
        found.append(PastMutant(
            id=f"{instance_id}:{mutant.get('id', '?')}", instance_id=instance_id, test=test,
            cell=str(row.get("cell") or _not_counted(row)), operator=str(mutant.get("operator", "")),
            location=str(mutant.get("location", "")), description=str(mutant.get("description", "")),
            source=str(mutant.get("source", "")), patch=str(mutant.get("patch", "")),
            change=str(mutant.get("change") or ""),
            candidate=_outcome(row.get("candidate")), reference=_outcome(row.get("reference")),
            plausibility=_outcome(row.get("plausibility")), behaviour=row.get("behaviour"), run=run, when=when))
    return found


def _not_counted(row: dict[str, Any]) -> str:
    """The cell column of a mutant without a cell: ``implausible`` when it broke a PASS_TO_PASS test, else ``-``."""
    return IMPLAUSIBLE if _outcome(row.get("plausibility")) in BREAKING else "-"


def behaviour_sizes(mutants: list[PastMutant]) -> dict[tuple[str, str, str, str], int]:
    """(when, instance, test, behaviour) -> how many mutants of that run share the behaviour."""
    sizes: dict[tuple[str, str, str, str], int] = {}
    for m in mutants:
        if m.behaviour:
            key = (m.when, m.instance_id, m.test, m.behaviour)
            sizes[key] = sizes.get(key, 0) + 1
    return sizes


def past_mutants(store: Store, *, instance: str | None = None, test: str | None = None,
                 cell: str | None = None) -> list[PastMutant]:
    """Every mutant of the runs in ``store`` (oldest run first, pool order within a run), optionally only those
    of one instance, one test (candidate name or system) or one cell."""
    if cell is not None and cell not in CELL_MEANING:
        raise CoHardenError(f"--cell: {cell!r} (known: {', '.join(CELL_MEANING)})")
    found: list[PastMutant] = []
    for kind, run in ((MPE_RESULT, "mpe"), (MPE_ROW, "batch")):
        for data, created in store.records(kind):
            if isinstance(data, dict):
                found += _from_result(data, run, created)
    found.sort(key=lambda m: m.when)
    return [m for m in found if (instance is None or m.instance_id == instance) and (test is None or m.test == test)
            and (cell is None or m.cell == cell)]


def find_mutant(store: Store, mutant_id: str, *, test: str | None = None) -> list[PastMutant]:
    """The runs of one mutant: ``INSTANCE:MUTANT``, or a bare mutant id when one instance alone has it."""
    everything = past_mutants(store, test=test)
    if ":" in mutant_id:
        runs = [m for m in everything if m.id == mutant_id]
    else:
        runs = [m for m in everything if m.id.rsplit(":", 1)[-1] == mutant_id]
        ids = sorted({m.id for m in runs})
        if len(ids) > 1:
            raise CoHardenError(f"{mutant_id}: several instances have a mutant of this id ({', '.join(ids)}); "
                                "give INSTANCE:MUTANT")
    if not runs:
        raise CoHardenError(f"{mutant_id}: no such mutant in {store.path}"
                            f"{f' for test {test!r}' if test else ''} (`coharden mutants list` shows the ids)")
    return runs
