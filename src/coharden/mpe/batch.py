"""Batch MPE over SWT-bench style predictions: resumable (results kept in the store), parallel over instances.

Every prediction gives one JSON line (``mpe.jsonl``): the MPE result or the error that prevented it. The
summary counts classes and prints, for a list of cutoffs, how many F->P tests are Rigorous / Lax at each.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from coharden.config import Settings
from coharden.errors import CoHardenError, InstanceError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import resolve_repo
from coharden.mpe.evaluate import evaluate
from coharden.mutation.pool import MECHANICAL_OPERATORS
from coharden.schema.instance import Instance
from coharden.schema.mutant import Operator

DEFAULT_CUTOFFS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)


class Prediction(BaseModel):
    """A SWT-bench / SWE-bench prediction."""

    instance_id: str
    model_name_or_path: str = "unknown"
    model_patch: str | None = None


def load_predictions(path: Path) -> list[Prediction]:
    """Predictions from .jsonl, a .json list, or a .json dict keyed by instance id (SWE-agent style)."""
    if not path.is_file():
        raise InstanceError(f"{path}: file not found")
    text = path.read_text()
    rows: list[tuple[str, Any]] = []
    if path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((f"{path}:{number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise InstanceError(f"{path}:{number}: malformed JSON line: {exc.msg}") from exc
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InstanceError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from exc
        items = data if isinstance(data, list) else [{"instance_id": k, **v} for k, v in data.items()]
        rows = [(f"{path}: record {i}", item) for i, item in enumerate(items)]
    predictions = []
    for where, row in rows:
        try:
            predictions.append(Prediction.model_validate(row))
        except ValidationError as exc:
            fields = "; ".join(f"field {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise InstanceError(f"{where}: {fields}") from exc
    return predictions


def result_key(prediction: Prediction, instance: Instance, operators: Sequence[Operator],
               per_operator: int | None, seed: int, tau: float) -> str:
    payload = json.dumps([instance.instance_id, instance.base_commit, prediction.model_name_or_path,
                          hashlib.sha256((prediction.model_patch or "").encode()).hexdigest(),
                          hashlib.sha256(instance.patch.encode()).hexdigest(),
                          hashlib.sha256(instance.test_patch.encode()).hexdigest(),
                          sorted(op.value for op in operators), per_operator, seed, tau])
    return hashlib.sha256(payload.encode()).hexdigest()


def evaluate_prediction(prediction: Prediction, instance: Instance, settings: Settings, store: Store, *,
                        operators: Sequence[Operator], per_operator: int | None, seed: int, tau: float,
                        paper_classes: bool = False) -> dict[str, Any]:
    """One prediction -> one JSON-able row (the result, or ``error``). Never raises for bad input."""
    row: dict[str, Any] = {"instance_id": prediction.instance_id, "model_name_or_path": prediction.model_name_or_path}
    if not (prediction.model_patch or "").strip():
        return {**row, "error": "empty model_patch"}
    key = result_key(prediction, instance, operators, per_operator, seed, tau)
    cached = store.get_record("mpe", key)
    if cached is not None:
        return cached
    try:
        repo = resolve_repo(instance, settings.repos_dir)
        with InstanceExecutor(instance, repo, settings, store) as executor:
            reference = executor.golden_test()
            candidate = executor.test_patch(prediction.model_patch or "", name=prediction.model_name_or_path)
            result = evaluate(executor, instance.patch, candidate, reference, operators=operators,
                              per_operator=per_operator, seed=seed, tau=tau, paper_classes=paper_classes)
        row.update(result.to_json())
    except CoHardenError as exc:
        row["error"] = str(exc)
        # errors of the environment (missing repo) are not cached: fixing them should rerun the instance
        return row
    store.put_record("mpe", key, row)
    return row


def cutoff_table(rows: Sequence[dict[str, Any]], cutoffs: Sequence[float]) -> list[dict[str, Any]]:
    laxities = [r["laxity"] for r in rows if r.get("fail_to_pass") and r.get("laxity") is not None]
    return [{"cutoff": c, "Rigorous": sum(1 for x in laxities if x < c), "Lax": sum(1 for x in laxities if x >= c)}
            for c in cutoffs]


def summarize(rows: Sequence[dict[str, Any]], cutoffs: Sequence[float]) -> dict[str, Any]:
    classes = Counter(r.get("test_class", "Error") if "error" not in r else "Error" for r in rows)
    return {
        "total": len(rows),
        "classes": dict(sorted(classes.items())),
        "fail_to_pass": sum(1 for r in rows if r.get("fail_to_pass")),
        "errors": {r["instance_id"]: r["error"] for r in rows if "error" in r},
        "cutoffs": cutoff_table(rows, cutoffs),
    }


def run_batch(instances: dict[str, Instance], predictions: Sequence[Prediction], settings: Settings, store: Store,
              output: Path, *, operators: Sequence[Operator] = MECHANICAL_OPERATORS, per_operator: int | None = None,
              seed: int = 0, tau: float = 0.202, paper_classes: bool = False, workers: int = 1,
              progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Evaluate every prediction; rows are appended to ``output/mpe.jsonl`` as they finish and the file is
    rewritten in prediction order at the end (with ``summary.json``)."""
    output.mkdir(parents=True, exist_ok=True)
    live = output / "mpe.jsonl.partial"
    lock = threading.Lock()
    rows: dict[int, dict[str, Any]] = {}

    def task(index: int, prediction: Prediction) -> tuple[int, dict[str, Any]]:
        instance = instances.get(prediction.instance_id)
        if instance is None:
            return index, {"instance_id": prediction.instance_id,
                           "model_name_or_path": prediction.model_name_or_path,
                           "error": "no instance with this id in the instances file"}
        return index, evaluate_prediction(prediction, instance, settings, store, operators=operators,
                                          per_operator=per_operator, seed=seed, tau=tau, paper_classes=paper_classes)

    with live.open("w") as handle, ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(task, i, p) for i, p in enumerate(predictions)]
        for future in as_completed(futures):
            index, row = future.result()
            with lock:
                rows[index] = row
                handle.write(json.dumps(row, sort_keys=True) + "\n")
                handle.flush()
            if progress:
                progress(row)
    ordered = [rows[i] for i in range(len(predictions))]
    with (output / "mpe.jsonl").open("w") as handle:
        for row in ordered:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
    live.unlink(missing_ok=True)
    return ordered
