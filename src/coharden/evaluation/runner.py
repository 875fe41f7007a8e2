"""The ``coharden eval`` pipeline: load inputs, plan, grade (real test runs, cached), compute, write."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError
from coharden.evaluation.grading_jobs import Grading, grade_all
from coharden.evaluation.inputs import Injection, PredictionSet, load_injection, load_prediction_sets, unique_names
from coharden.evaluation.metrics import build_report, plan
from coharden.evaluation.refinement import (
    DEFINITION,
    RefinementRun,
    load_refinement,
    plan_refinement,
    refinement_section,
)
from coharden.execution.engine import Engine
from coharden.instances import MANIFEST_NAMES, load_instances, load_local
from coharden.mpe.batch import DEFAULT_CUTOFFS
from coharden.schema.instance import Instance
from coharden.schema.round_record import RoundRecord, load_runs


def load_eval_instances(source: Path, cache_dir: Path) -> dict[str, Instance]:
    """A records file, one instance directory, or a directory of instance directories (like ``examples/``)."""
    if source.is_dir() and not any((source / n).is_file() for n in MANIFEST_NAMES):
        dirs = sorted(d for d in source.iterdir() if d.is_dir() and any((d / n).is_file() for n in MANIFEST_NAMES))
        if not dirs:
            raise CoHardenError(f"{source}: neither an instance directory nor a directory of them")
        found = [load_local(d, cache_dir).instance for d in dirs]
    else:
        found = [li.instance for li in load_instances(source, cache_dir)]
    instances: dict[str, Instance] = {}
    for inst in found:
        if inst.instance_id in instances:
            raise CoHardenError(f"{source}: duplicate instance_id {inst.instance_id!r}")
        instances[inst.instance_id] = inst
    return instances


@dataclass(frozen=True)
class EvalSources:
    """Where one ``coharden eval`` reads its inputs: the instances (a records file, an instance directory or a
    directory of them), fix and test prediction sets (``PATH``, ``NAME=PATH`` or ``gold``), test injections
    (``[NAME=]BASELINE,INJECTED,TESTS``), a directory of loop round records, output directories of
    ``coharden overfit refine``."""

    instances: Path
    fixes: Sequence[str] = ()
    tests: Sequence[str] = ()
    injections: Sequence[str] = ()
    runs: Path | None = None
    overfit: Sequence[Path] = ()


@dataclass
class EvalInputs:
    """Everything one ``coharden eval`` grades."""

    instances: dict[str, Instance]
    fix_sets: Sequence[PredictionSet] = ()
    test_sets: Sequence[PredictionSet] = ()
    injections: Sequence[Injection] = ()
    runs: dict[str, list[RoundRecord]] = field(default_factory=dict)
    refinements: Sequence[RefinementRun] = ()

    def __post_init__(self) -> None:
        unique_names(list(self.fix_sets), "--fixes")
        unique_names(list(self.test_sets), "--tests")
        names = [inj.name for inj in self.injections]
        if len(set(names)) != len(names):
            raise CoHardenError(f"--injection: test source names repeat ({', '.join(names)}); name them NAME=...")
        self.fix_sets, self.test_sets = list(self.fix_sets), list(self.test_sets)
        self.injections = list(self.injections)
        self.refinements = list(self.refinements)
        refined = [r.name for r in self.refinements]
        if len(set(refined)) != len(refined):
            raise CoHardenError(f"--overfit: run names repeat ({', '.join(refined)})")

    @classmethod
    def load(cls, sources: EvalSources, cache_dir: Path) -> EvalInputs:
        found = load_eval_instances(sources.instances, cache_dir)
        if not found:  # an empty records file graded nothing and said "0 instances" with exit status 0
            raise CoHardenError(f"--instances: {sources.instances} holds no instance")
        return cls(found,
                   [s for spec in sources.fixes for s in load_prediction_sets(spec, found, "fix")],
                   [s for spec in sources.tests for s in load_prediction_sets(spec, found, "test")],
                   [load_injection(spec, found) for spec in sources.injections],
                   load_runs(sources.runs) if sources.runs is not None else {},
                   [load_refinement(d, found) for d in sources.overfit])


def run_evaluation(inputs: EvalInputs, grading: Grading, progress: Callable[[str, str], None] | None = None,
                   on_plan: Callable[[int], None] | None = None, engine: Engine | None = None) -> dict[str, Any]:
    """Grade everything and return the report document (see :func:`coharden.evaluation.metrics.build_report`),
    its sensitivity table at the MPE config's cutoffs (default: a batch's). ``engine``: where the instances are
    graded (default: local threads, ``options.workers``)."""
    options = grading.options
    cutoffs = options.mpe.cutoffs or list(DEFAULT_CUTOFFS)
    if not (inputs.fix_sets or inputs.test_sets or inputs.injections or inputs.runs or inputs.refinements):
        raise CoHardenError("nothing to evaluate: give --fixes, --tests, --injection, --runs or --overfit")
    work = plan(inputs.instances, inputs.fix_sets, inputs.test_sets, inputs.injections, inputs.runs)
    for refinement in inputs.refinements:
        plan_refinement(work, refinement)
    if on_plan:
        on_plan(sum(w.size() for w in work.values()))
    grades = grade_all(inputs.instances, work, grading, progress, engine=engine)
    report = build_report(inputs, grades, options, cutoffs)
    if inputs.refinements:  # test overfitting before / after reward-guided refinement (coharden overfit)
        report["definitions"] = {**report["definitions"], "refinement": DEFINITION}  # not the module's dict
        report["refinement"] = {r.name: refinement_section(r, list(inputs.instances), grades)
                                for r in inputs.refinements}
    return report


def write_outputs(report: dict[str, Any], output: Path, *, html: bool = True) -> dict[str, Path]:
    """``report.json``, ``report.md`` and (with matplotlib) the self-contained ``report.html``."""
    from coharden.evaluation.report import render_html, render_markdown

    output.mkdir(parents=True, exist_ok=True)
    written = {"json": output / "report.json", "markdown": output / "report.md"}
    written["json"].write_text(json.dumps(report, indent=2) + "\n")  # key order is meaningful (instances, classes)
    written["markdown"].write_text(render_markdown(report))
    if html:
        written["html"] = output / "report.html"
        written["html"].write_text(render_html(report))
    return written
