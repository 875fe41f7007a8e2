"""The outputs of ``coharden overfit refine`` and their summary.

Output directory::

    fixes.jsonl            refined fixes, SWE-bench predictions (instance_id, model_name_or_path=<run>,
                           model_patch)
    tests.jsonl            refined tests, SWT-bench predictions (same keys; the patch adds the tests)
    initial_fixes.jsonl    the starting fixes (source part), model_name_or_path=<run>-initial
    initial_tests.jsonl    the starting tests (test part), model_name_or_path=<run>-initial
    iterations.jsonl       one :class:`~coharden.overfit.refine.IterationRecord` per critic call
    instances.jsonl        one line per instance: stop reason, iterations, initial and final pair (verdicts,
                           changed-line coverage, reward), sides changed, cost
    summary.json           counts over the run (see :func:`summarize`)
    summary.md             the same as a short Markdown page

``coharden eval --overfit DIR`` reads this directory (see :mod:`coharden.evaluation.refinement`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coharden.overfit.critic_prompt import SIDES
from coharden.overfit.refine import IterationRecord, RefineResult
from coharden.overfit.refine_config import RefineConfig

OUTPUT_VERSION = 1
INITIAL_SUFFIX = "-initial"


class IterationLog:
    """``iterations.jsonl``, written as the loop goes (a crashed run keeps the iterations it made)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        path.write_text("")

    def __call__(self, record: IterationRecord) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps(record.model_dump(mode="json")) + "\n")


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def instance_row(result: RefineResult) -> dict[str, Any]:
    """One line of ``instances.jsonl``."""
    return {"version": OUTPUT_VERSION, **result.model_dump(mode="json", exclude={"initial_fix", "initial_test", "fix",
                                                                                  "test"})}


def summarize(results: Sequence[RefineResult], config: RefineConfig, run: str, model: str | None,
              errors: dict[str, str] | None = None) -> dict[str, Any]:
    """Counts over the run: stop reasons, F->P / mean reward / mean coverage before and after, iterations and
    the sides they changed, cost."""
    records = [r for res in results for r in res.records]
    statuses = Counter[str](r.status for r in records)
    return {
        "kind": "coharden-overfit",
        "version": OUTPUT_VERSION,
        "run": run,
        "model": model,
        "config": config.model_dump(mode="json"),
        "instances": len(results),
        "stop_reasons": dict(sorted(Counter(r.stop_reason for r in results).items())),
        "fail_to_pass": {"before": sum(1 for r in results if r.initial.get("fail_to_pass")),
                         "after": sum(1 for r in results if r.final.get("fail_to_pass"))},
        "mean_reward": {"before": _mean([r.initial.get("reward") for r in results]),
                        "after": _mean([r.final.get("reward") for r in results])},
        "mean_coverage": {"before": _mean([r.initial.get("coverage") for r in results]),
                          "after": _mean([r.final.get("coverage") for r in results])},
        "iterations": len(records),
        "statuses": {s: statuses.get(s, 0) for s in ("kept", "rejected", "invalid", "stopped")},
        "sides_changed": {s: sum(r.changed.get(s, 0) for r in results) for s in SIDES},
        "sides_attempted": {s: sum(r.attempted.get(s, 0) for r in results) for s in SIDES},
        "tokens": sum(r.tokens for r in results),
        "usd": sum(r.usd for r in results),
        "errors": dict(sorted({**{r.instance: r.error for r in results if r.error}, **(errors or {})}.items())),
    }


def _predictions(path: Path, rows: list[tuple[str, str]], name: str) -> None:
    with path.open("w") as handle:
        for iid, patch in rows:
            handle.write(json.dumps({"instance_id": iid, "model_name_or_path": name, "model_patch": patch}) + "\n")


def write_outputs(results: Sequence[RefineResult], output: Path, summary: dict[str, Any]) -> dict[str, Path]:
    """Predictions, per-instance lines, summary.json and summary.md (iterations.jsonl is written as it goes)."""
    output.mkdir(parents=True, exist_ok=True)
    run = summary["run"]
    paths = {name: output / f"{name}.jsonl" for name in ("fixes", "tests", "initial_fixes", "initial_tests",
                                                        "instances")}
    _predictions(paths["fixes"], [(r.instance, r.fix) for r in results], run)
    _predictions(paths["tests"], [(r.instance, r.test) for r in results], run)
    _predictions(paths["initial_fixes"], [(r.instance, r.initial_fix) for r in results], run + INITIAL_SUFFIX)
    _predictions(paths["initial_tests"], [(r.instance, r.initial_test) for r in results], run + INITIAL_SUFFIX)
    paths["instances"].write_text("".join(json.dumps(instance_row(r)) + "\n" for r in results))
    paths["summary"] = output / "summary.json"
    paths["summary"].write_text(json.dumps(summary, indent=2) + "\n")
    paths["markdown"] = output / "summary.md"
    paths["markdown"].write_text(render_markdown(summary, results))
    paths["iterations"] = output / "iterations.jsonl"
    return paths


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def render_markdown(summary: dict[str, Any], results: Sequence[RefineResult]) -> str:
    c = summary["config"]
    lines = [f"# coharden overfit: {summary['run']}", "",
             f"{summary['instances']} instances; model {summary['model'] or '-'}; at most {c['max_iterations']} "
             f"iterations; test hidden: {c['hide_test']}; extra context: {c['extra_context']}; coverage backend: "
             f"{c['backend']}.", "",
             "| | before | after |", "|---|---|---|",
             f"| F->P pairs | {summary['fail_to_pass']['before']} | {summary['fail_to_pass']['after']} |",
             f"| mean reward | {_fmt(summary['mean_reward']['before'])} | {_fmt(summary['mean_reward']['after'])} |",
             f"| mean changed-line coverage | {_fmt(summary['mean_coverage']['before'])} | "
             f"{_fmt(summary['mean_coverage']['after'])} |", "",
             f"Iterations: {summary['iterations']} ({', '.join(f'{k} {v}' for k, v in summary['statuses'].items())}); "
             f"kept changes by side: {', '.join(f'{k} {v}' for k, v in summary['sides_changed'].items())}; "
             f"cost {summary['usd']:.4f} USD, {summary['tokens']} tokens.", "",
             "| instance | stop | iterations | reward before | reward after | coverage before | coverage after | "
             "F->P after |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.instance} | {r.stop_reason} | {r.iterations} | {_fmt(r.initial.get('reward'))} | "
                     f"{_fmt(r.final.get('reward'))} | {_fmt(r.initial.get('coverage'))} | "
                     f"{_fmt(r.final.get('coverage'))} | {_fmt(r.final.get('fail_to_pass'))} |")
    if summary["errors"]:
        lines += ["", "## Errors", ""] + [f"- {iid}: {msg}" for iid, msg in summary["errors"].items()]
    return "\n".join(lines) + "\n"
