"""Batch MPE over SWT-bench style predictions: resumable (results kept in the store), parallel over instances.

Every prediction gives one JSON line (``mpe.jsonl``): the MPE result or the error that prevented it. The
summary counts classes and prints, for a list of cutoffs, how many F->P tests are Rigorous / Lax at each.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.errors import ApplyError, CoHardenError, PatchError, TestIdError
from coharden.execution.engine import Engine, Job, LocalEngine
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import MPE_ROW, Store, mpe_row_key
from coharden.instances import resolve_repo
from coharden.mpe.evaluate import MPERequest, evaluate
from coharden.mpe.logs import check_log_folders, try_instance_log
from coharden.patches import prediction_tests
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mpe_row import MPERow
from coharden.schema.prediction import Prediction

DEFAULT_CUTOFFS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
NOT_GRADED = "no instance with this id in the instances file"


@dataclass(frozen=True)
class BatchGrading:
    """How each prediction is graded, as every job receives it (picklable: a job may run on a Ray worker): the
    run's settings, the MPE configuration and the LLM mutator (None: the mechanical operators only)."""

    settings: Settings
    config: MPEConfig = field(default_factory=MPEConfig)
    llm_mutator: Any = None


@dataclass(frozen=True)
class BatchOutputs:
    """Where a batch's rows go as they arrive: the store that keeps them (a rerun resumes from it), the output
    directory (``mpe.jsonl``), the per-prediction log folders (log directory, run id; see
    :mod:`coharden.mpe.logs`) when asked, and who hears each row."""

    store: Store
    output: Path
    logs: tuple[Path, str] | None = None
    progress: Callable[[dict[str, Any]], None] | None = None


def result_key(prediction: Prediction, instance: Instance, config: MPEConfig) -> str:
    """Store key of one prediction's MPE row (kind ``mpe``)."""
    return mpe_row_key(instance_id=instance.instance_id, base_commit=instance.base_commit,
                       fix=instance.patch, reference=instance.test_patch,
                       candidate=prediction.model_patch or "", candidate_name=prediction.model_name_or_path,
                       mpe=config.cache_key())


def evaluate_prediction(prediction: Prediction, instance: Instance, grading: BatchGrading,
                        store: Store | None) -> dict[str, Any]:
    """One prediction -> one JSON-able row (the result, or ``error``). Never raises for bad input.

    As ``coharden eval`` grades it: the prediction's test part is the candidate (source files it also touches
    are dropped and listed); a prediction that is empty, not a diff, touches no test file or does not apply is
    ``Invalid`` (``applied`` false, the reason in words), not an error. ``store`` caches verdicts only; the
    driver of a batch keeps the rows (see :func:`run_batch`)."""
    settings, config = grading.settings, grading.config
    row: dict[str, Any] = {"instance_id": prediction.instance_id, "model_name_or_path": prediction.model_name_or_path}
    try:
        tests, dropped = prediction_tests(prediction.model_patch, settings.tests.test_patterns)
    except (TestIdError, PatchError) as exc:
        return {**row, **MPERow.invalid(str(exc)).to_json()}
    try:
        repo = resolve_repo(instance, settings.repos_dir)
        from coharden.environment.derived import auto_spec_settings

        settings = auto_spec_settings(instance, repo, settings)  # a SWE-bench record: its spec environment
        with InstanceExecutor(instance, repo, settings, store) as executor:
            reference = executor.golden_test()
            try:
                candidate = executor.test_patch(tests, name=prediction.model_name_or_path)
            except (TestIdError, ApplyError, PatchError) as exc:
                return {**row, **MPERow.invalid(str(exc)).to_json()}
            result = evaluate(executor, MPERequest(instance.patch, candidate, reference, config),
                              llm_mutator=grading.llm_mutator)
        row.update(result.to_json())
        if dropped:
            row["dropped_source_files"] = dropped
    except CoHardenError as exc:
        row["error"] = str(exc)
    return row


def mpe_job(prediction: Prediction, instance: Instance | None, grading: BatchGrading) -> dict[str, Any]:
    """The unit of work an engine runs (module level and picklable, for Ray). Opens the verdict cache at
    ``settings.store`` when it can (same machine or a shared disk) and works without one otherwise."""
    if instance is None:  # not graded: listed apart, never counted as a class (see :func:`summarize`)
        return {"instance_id": prediction.instance_id, "model_name_or_path": prediction.model_name_or_path,
                "error": NOT_GRADED, "not_graded": True}
    try:
        store: Store | None = Store(grading.settings.store)
    except OSError:
        store = None
    try:
        return evaluate_prediction(prediction, instance, grading, store)
    finally:
        if store is not None:
            store.close()


def cutoff_table(rows: Sequence[dict[str, Any]], cutoffs: Sequence[float]) -> list[dict[str, Any]]:
    laxities = [r["laxity"] for r in rows if r.get("fail_to_pass") and r.get("laxity") is not None]
    return [{"cutoff": c, "Rigorous": sum(1 for x in laxities if x < c), "Lax": sum(1 for x in laxities if x >= c)}
            for c in cutoffs]


def cutoff_classes(laxity: float | None, cutoffs: Sequence[float]) -> list[dict[str, Any]]:
    """One F->P test's class at each cutoff, by the rule of :func:`cutoff_table` (Rigorous below it); empty
    for a test without a laxity (not F->P, no admissible mutant): its class does not depend on a cutoff."""
    if laxity is None:
        return []
    return [{"cutoff": c, "class": "Rigorous" if laxity < c else "Lax"} for c in cutoffs]


def row_label(row: dict[str, Any], several_models: bool) -> str:
    """How a row is named in a summary and on the console: its instance id, with its system when the batch
    holds several (two systems' errors on one instance must not overwrite each other)."""
    iid = str(row.get("instance_id"))
    return f"{iid} ({row.get('model_name_or_path')})" if several_models else iid


def row_errors(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Why each graded prediction has no class (``error``) or no log folder (``log_error``), by
    :func:`row_label`; predictions of unknown instances are not here (they were not graded)."""
    several = len({r.get("model_name_or_path") for r in rows}) > 1
    errors: dict[str, str] = {}
    for row in rows:
        if row.get("not_graded"):
            continue
        # an error that starts with the instance's id (a repository error does) is not given it twice
        reasons = [str(row[k]).removeprefix(f"{row.get('instance_id')}: ") for k in ("error", "log_error")
                   if row.get(k)]
        if reasons:
            errors[row_label(row, several)] = "; ".join(reasons)
    return errors


def summarize(rows: Sequence[dict[str, Any]], cutoffs: Sequence[float]) -> dict[str, Any]:
    """Class counts, F->P count, errors and the cutoff table over the graded rows; predictions whose instance
    is not in the instances file are ``not_graded`` (listed, never counted as a class)."""
    graded = [r for r in rows if not r.get("not_graded")]
    classes = Counter(r.get("test_class") or "Error" if "error" not in r else "Error" for r in graded)
    return {
        "total": len(graded),
        "classes": dict(sorted(classes.items())),
        "fail_to_pass": sum(1 for r in graded if r.get("fail_to_pass")),
        "errors": row_errors(graded),
        "not_graded": [row_label(r, len({x.get("model_name_or_path") for x in rows}) > 1)
                       for r in rows if r.get("not_graded")],
        "cutoffs": cutoff_table(graded, cutoffs),
    }


def run_batch(instances: dict[str, Instance], predictions: Sequence[Prediction], grading: BatchGrading,
              outputs: BatchOutputs, *, engine: Engine | None = None) -> list[dict[str, Any]]:
    """Grade every prediction as ``grading`` says on ``engine`` (default: a local pool of the settings'
    workers). Rows already in the store are not recomputed; new rows are stored and appended to
    ``output/mpe.jsonl.partial`` as they arrive; ``output/mpe.jsonl`` is written in prediction order at the
    end. With an LLM mutator, ``config.llm`` names its model (set from the mutator when not given). With
    ``logs`` (log directory, run id), each prediction's folder ``LOG_DIR/RUN_ID/MODEL/INSTANCE_ID/`` is written
    as its row arrives (see :mod:`coharden.mpe.logs`); names that would share a folder are refused before
    anything runs."""
    store, output, logs, progress = outputs.store, outputs.output, outputs.logs, outputs.progress
    if logs is not None:
        check_log_folders(*logs, predictions)
    output.mkdir(parents=True, exist_ok=True)
    live = output / "mpe.jsonl.partial"
    llm_mutator = grading.llm_mutator
    if llm_mutator is not None and grading.config.llm is None:
        grading = replace(grading, config=grading.config.model_copy(update={"llm": llm_mutator.client.config.model}))
    config = grading.config
    rows: dict[int, dict[str, Any]] = {}
    keys: dict[int, str] = {}
    jobs: list[Job] = []
    job_index: list[int] = []
    for index, prediction in enumerate(predictions):
        instance = instances.get(prediction.instance_id)
        if instance is not None:
            keys[index] = result_key(prediction, instance, config)
            cached = store.get_record(MPE_ROW, keys[index])
            if cached is not None:
                rows[index] = cached
                _log(logs, prediction, cached)
                if progress:
                    progress(cached)
                continue
        jobs.append((mpe_job, (prediction, instance, grading)))
        job_index.append(index)
    lock = threading.Lock()
    own_engine = engine is None
    engine = engine or LocalEngine(grading.settings.workers)
    with live.open("w") as handle:

        def arrived(position: int, row: dict[str, Any]) -> None:
            index = job_index[position]
            with lock:
                rows[index] = row
                # environment errors (missing repo, ...) are not stored: fixing them should rerun the job
                if index in keys and "error" not in row and row.get("pool_complete", True):
                    store.put_record(MPE_ROW, keys[index], row)
                _log(logs, predictions[index], row)
                handle.write(json.dumps(row, sort_keys=True) + "\n")
                handle.flush()
            if progress:
                progress(row)

        try:
            engine.run(jobs, arrived)
        finally:
            if own_engine:
                engine.close()
    ordered = [rows[i] for i in range(len(predictions))]
    with (output / "mpe.jsonl").open("w") as handle:
        for row in ordered:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
    live.unlink(missing_ok=True)
    return ordered


def _log(logs: tuple[Path, str] | None, prediction: Prediction, row: dict[str, Any]) -> None:
    """Write the row's log folder; a folder that cannot be written is that row's ``log_error`` (its class
    stands), never the end of the batch."""
    if logs is not None and (why := try_instance_log(*logs, prediction, row)):
        row["log_error"] = why


def stage_times(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Seconds spent per MPE stage over the rows computed in this run (cached rows carry their old times)."""
    totals: dict[str, float] = {}
    for row in rows:
        timings = row.get("timings")
        for stage, seconds in (timings.items() if isinstance(timings, dict) else ()):
            if stage != "total" and isinstance(seconds, int | float):  # a stage without a time (None) adds none
                totals[stage] = totals.get(stage, 0.0) + float(seconds)
    return dict(sorted(totals.items()))
