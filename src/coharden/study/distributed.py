"""The real-bugs study on an engine (``--executor ray``): one job per instance, rows merged in instance order.

A job takes one instance through the study's phases exactly as :meth:`RealBugsStudy.run` does (its own
checkouts, the result store opened at ``settings.store``, so records made by a job are found by the next run
wherever it ran), and returns its rows. The driver appends them in the order a local run would have produced
them, so the report is the same whichever engine ran the jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coharden.config import Settings
from coharden.execution.engine import Engine
from coharden.execution.store import Store
from coharden.study.data import StudyData
from coharden.study.real_bugs import Progress, RealBugsStudy, StudyConfig

Rows = dict[str, list[dict[str, Any]]]


def study_instance_job(data: StudyData, settings: Settings, config: StudyConfig, iid: str,
                       phases: Sequence[str]) -> dict[str, Any]:
    """One instance through ``phases`` (module level and picklable: an engine job)."""
    store = Store(settings.store)
    try:
        with RealBugsStudy(data, settings, store, config.model_copy(update={"ids": [iid]})) as study:
            rows = study.run(phases=phases)
            return {"rows": rows, "missing": dict(study.missing)}
    finally:
        store.close()


def run_on_engine(study: RealBugsStudy, engine: Engine, progress: Progress | None = None,
                  phases: Sequence[str] = ("verify", "golden", "grade")) -> Rows:
    """``study.run`` with every instance as one job on ``engine``; fills ``study.rows`` and ``study.missing``."""
    ids = study.verify_ids()
    jobs = [(study_instance_job, (study.data, study.settings, study.config, iid, list(phases))) for iid in ids]

    def arrived(index: int, result: dict[str, Any]) -> None:
        if progress:
            steps = sum(len(rows) for rows in result["rows"].values())
            progress(f"{ids[index]}: {steps} steps", steps)

    results = engine.run(jobs, arrived)
    for result in results:  # instance order, as a local run appends them
        for kind, rows in result["rows"].items():
            study.rows.setdefault(kind, []).extend(rows)
        for kind, count in result["missing"].items():
            study.missing[kind] = study.missing.get(kind, 0) + count
    return study.rows
