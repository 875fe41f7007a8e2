"""Run a method over many instances: parallel across instances, resumable, SWE-bench / SWT-bench outputs.

Output directory::

    instances/<id>/state.json, round<k>.traj.jsonl   per-instance state and agent trajectories
    rounds/<run>.jsonl                               one RoundRecord per instance and round (coharden eval --runs)
    fixes.jsonl                                      SWE-bench predictions (instance_id, model_name_or_path,
                                                     model_patch)
    tests.jsonl                                      SWT-bench predictions (the patch adds the tests)
    summary.json                                     decisions, costs, errors, model errors per instance

``summary["model_errors"]`` maps each instance a model error ended to ``"<kind>: <first line of the error>"``;
``summary["model_failure"]`` is true when no instance produced a fix or a test and model errors are why (the
CLI then exits non-zero).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coharden.errors import CoHardenError
from coharden.instances import resolve_repo
from coharden.llm.errors import first_line
from coharden.loop.engine import InstanceLoop, LoopResult
from coharden.loop.run import LoopRun
from coharden.schema.instance import Instance

if TYPE_CHECKING:
    from coharden.agent.base import Agent


def run_all(instances: Sequence[Instance], run: LoopRun, agent_factory: Callable[[], Agent], *,
            llm_mutator_factory: Callable[[], Any] | None = None,
            progress: Callable[[str, LoopResult | None, str | None], None] | None = None) -> dict[str, Any]:
    """Run ``run.config.method`` on every instance; errors of one instance are reported, not fatal. ``progress``
    is called once per finished instance, ``run.progress`` at every phase of every round (see
    :class:`~coharden.loop.progress.LoopProgress`); both from worker threads."""
    settings, config, output, ledger, run_name = run.settings, run.config, run.output, run.ledger, run.run_name
    output.mkdir(parents=True, exist_ok=True)
    results: dict[str, LoopResult] = {}
    errors: dict[str, str] = {}
    lock = threading.Lock()

    def one(instance: Instance) -> tuple[str, LoopResult | None, str | None]:
        try:
            repo = resolve_repo(instance, settings.repos_dir)
            loop = InstanceLoop(instance, repo, agent_factory(), run,
                                llm_mutator=llm_mutator_factory() if llm_mutator_factory else None)
            return instance.instance_id, loop.run(), None
        except CoHardenError as exc:
            return instance.instance_id, None, str(exc)

    with ThreadPoolExecutor(max_workers=max(1, settings.workers)) as pool:
        futures = [pool.submit(one, inst) for inst in instances]
        for future in as_completed(futures):
            iid, result, error = future.result()
            with lock:
                if result is not None:
                    results[iid] = result
                else:
                    errors[iid] = error or "unknown error"
            if progress:
                progress(iid, result, error)
    order = [inst.instance_id for inst in instances if inst.instance_id in results]
    _write_predictions(output / "fixes.jsonl", [(iid, results[iid].fix) for iid in order], run_name)
    _write_predictions(output / "tests.jsonl", [(iid, results[iid].test) for iid in order], run_name)
    summary = {
        "run": run_name,
        "method": config.method.value,
        "config": config.model_dump(mode="json"),
        "instances": len(instances),
        "finished": len(results),
        "decisions": dict(sorted(Counter(r.decision for r in results.values()).items())),
        "inconclusive_rounds": sum(r.inconclusive_rounds for r in results.values()),
        "cost_usd": sum(r.cost_usd for r in results.values()),
        "errors": errors,
        "per_instance": {iid: {"decision": results[iid].decision, "rounds": len(results[iid].rounds),
                               "cost_usd": results[iid].cost_usd,
                               **({"error_kind": results[iid].error_kind, "cause": first_line(results[iid].note)}
                                  if results[iid].error_kind else {})} for iid in order},
    }
    model_errors = {iid: f"{results[iid].error_kind}: {first_line(results[iid].note)}" for iid in order
                    if results[iid].error_kind}
    produced = sum(bool(results[iid].fix.strip() or results[iid].test.strip()) for iid in order)
    summary.update(model_errors=model_errors, produced=produced, model_failure=not produced and bool(model_errors))
    if ledger is not None:
        summary["llm"] = ledger.to_dict()["run"]
    (output / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    return summary


def _write_predictions(path: Path, rows: list[tuple[str, str]], run_name: str) -> None:
    with path.open("w") as handle:
        for iid, patch in rows:
            if patch.strip():
                handle.write(json.dumps({"instance_id": iid, "model_name_or_path": run_name,
                                         "model_patch": patch}) + "\n")
