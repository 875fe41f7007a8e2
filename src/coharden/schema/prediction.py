"""A SWT-bench / SWE-bench prediction (a system's patch for one instance) and the loader of prediction files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from coharden.errors import InstanceError
from coharden.jsonl import json_lines


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
        rows = [(f"{path}:{number}", row) for number, row in json_lines(path, InstanceError, text=text)]
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


def check_one_per_instance(predictions: list[Prediction], source: Path | str, kind: str = "test") -> None:
    """Refuse two predictions of one system for one instance (which one would count?), as ``eval`` and batch
    ``mpe`` both do."""
    seen: set[tuple[str, str]] = set()
    for pred in predictions:
        key = (pred.model_name_or_path, pred.instance_id)
        if key in seen:
            raise InstanceError(f"{source}: two {kind} predictions of system {pred.model_name_or_path!r} for "
                                f"instance {pred.instance_id!r}; give one per instance")
        seen.add(key)


def unknown_ids_message(ids: list[str], what: str = "predictions") -> str:
    """The one line both ``eval`` and batch ``mpe`` print for predictions whose instance is not in the
    instances file (they are not graded)."""
    shown = ", ".join(ids[:10]) + (f", ... ({len(ids) - 10} more)" if len(ids) > 10 else "")
    return (f"{len(ids)} {what} name instance ids that are not in the instances file (not graded): {shown}"
            if len(ids) != 1 else f"1 of the {what} names an instance id that is not in the instances file "
                                   f"(not graded): {shown}")
