"""What ``coharden eval`` grades: prediction sets (any system's fixes or tests) and injection experiments.

A *prediction set* is one system's predictions, at most one per instance. Files are read in every format the
SWE-bench and SWT-bench harnesses accept (JSONL, a JSON list, a JSON dict keyed by instance id; see
:func:`coharden.schema.prediction.load_predictions`). A file is split into one set per ``model_name_or_path`` (as the
SWE-bench harness groups its logs), unless a name is given with ``NAME=PATH``: then the whole file is one set
called NAME. The literal ``gold`` is the instances' own golden fix (or golden test).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from coharden.errors import CoHardenError
from coharden.schema.instance import Instance
from coharden.schema.prediction import Prediction, check_one_per_instance, load_predictions

GOLD = "gold"


def patch_key(text: str | None) -> str:
    """Content key of a patch (None and the empty patch share the key of "")."""
    return hashlib.sha256((text or "").encode()).hexdigest()


@dataclass
class PredictionSet:
    """One system's predictions, keyed by instance id."""

    name: str
    source: str
    predictions: dict[str, Prediction] = field(default_factory=dict)

    def patch(self, instance_id: str) -> str | None:
        pred = self.predictions.get(instance_id)
        return None if pred is None else pred.model_patch


@dataclass
class Injection:
    """A test-injection experiment: the same system's fixes without (``baseline``) and with (``injected``) the
    tests of one test source (``tests``) shown to it, on the same instances."""

    name: str
    baseline: PredictionSet
    injected: PredictionSet
    tests: PredictionSet


def _split_spec(spec: str) -> tuple[str | None, str]:
    """``NAME=PATH`` -> (NAME, PATH); a plain path (even one holding '=') -> (None, PATH)."""
    if "=" in spec and not Path(spec).exists():
        name, _, path = spec.partition("=")
        if name and "/" not in name:
            return name, path
    return None, spec


def load_prediction_sets(spec: str, instances: Mapping[str, Instance], kind: Literal["fix", "test"], *,
                         name: str | None = None) -> list[PredictionSet]:
    """The sets of one ``--fixes`` / ``--tests`` argument: ``gold``, ``PATH`` or ``NAME=PATH`` (or ``name``)."""
    if name is None:
        name, path_text = _split_spec(spec)
    else:
        path_text = spec
    if path_text == GOLD:
        preds = {iid: Prediction(instance_id=iid, model_name_or_path=GOLD,
                                 model_patch=inst.patch if kind == "fix" else inst.test_patch)
                 for iid, inst in instances.items()}
        return [PredictionSet(name=name or GOLD, source=GOLD, predictions=preds)]
    path = Path(path_text)
    predictions = load_predictions(path)
    groups: dict[str, list[Prediction]] = {}
    for pred in predictions:
        groups.setdefault(name or pred.model_name_or_path, []).append(pred)
    sets: list[PredictionSet] = []
    for group, members in groups.items():
        check_one_per_instance([p.model_copy(update={"model_name_or_path": group}) for p in members], path, kind)
        by_id = {pred.instance_id: pred for pred in members}
        sets.append(PredictionSet(name=group, source=str(path), predictions=by_id))
    if not sets:
        raise CoHardenError(f"{path}: holds no predictions")
    return sets


def unique_names(sets: list[PredictionSet], what: str) -> None:
    """Two sets of the same kind with one name would be merged silently in every table: refuse."""
    seen: dict[str, str] = {}
    for s in sets:
        if s.name in seen:
            raise CoHardenError(f"{what}: system {s.name!r} comes from both {seen[s.name]} and {s.source}; "
                                f"name one of them with NAME=PATH")
        seen[s.name] = s.source


def load_injection(spec: str, instances: Mapping[str, Instance]) -> Injection:
    """``[NAME=]BASELINE,INJECTED,TESTS``: fix-only predictions, fix-with-test predictions, injected tests.

    NAME (the test source) defaults to the tests' ``model_name_or_path`` when the file has one, else its stem.
    """
    name, rest = spec.split("=", 1) if "=" in spec.split(",", 1)[0] else (None, spec)
    parts = [p.strip() for p in rest.split(",")]
    if len(parts) != 3 or not all(parts):
        raise CoHardenError(f"--injection {spec!r}: expected [NAME=]BASELINE_FIXES,INJECTED_FIXES,TESTS")

    def one(path: str, kind: Literal["fix", "test"], label: str) -> PredictionSet:
        return load_prediction_sets(path, instances, kind, name=label)[0]

    tests_file = parts[2]
    if name is None:
        if tests_file == GOLD:
            name = GOLD
        else:
            models = {p.model_name_or_path for p in load_predictions(Path(tests_file))}
            name = models.pop() if len(models) == 1 else Path(tests_file).stem
    return Injection(name=name, baseline=one(parts[0], "fix", f"{name}/baseline"),
                     injected=one(parts[1], "fix", f"{name}/injected"), tests=one(tests_file, "test", name))
