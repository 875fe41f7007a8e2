"""``coharden overfit ...``: the reward of (fix, test) pairs and their reward-guided refinement by an LLM critic.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from coharden.cli import common
from coharden.cli.common import RunOptions, cli_errors, console, err_console, new_app, run_options
from coharden.cli.llm_options import LLMOptions, ModelOpt, llm_options
from coharden.cli.options import IdOpt, IdsOpt, JsonOpt, output_option, ranged
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc

overfit_app = new_app(help="Test overfitting: the reward of (fix, test) pairs and their reward-guided "
                           "refinement by an LLM critic.")

BackendOpt = Annotated[str, typer.Option("--coverage-backend", help="coverage (coverage.py in the test "
                                         "interpreter) or settrace (stdlib line tracer, when the test "
                                         "interpreter has no coverage.py).")]


def _backend(value: str):
    from coharden.overfit.coverage import BACKENDS

    if value not in BACKENDS:
        raise CoHardenError(f"--coverage-backend: {value!r} is not one of {', '.join(BACKENDS)}")
    return value


def _patches(spec: str, instances: dict, kind: str) -> dict[str, str]:
    """Per instance id: the patch of a predictions file, or the golden one (``gold``)."""
    from coharden.schema.prediction import load_predictions

    if spec in ("gold", "golden"):
        return {iid: (inst.patch if kind == "fix" else inst.test_patch) for iid, inst in instances.items()}
    out: dict[str, str] = {}
    for pred in load_predictions(Path(spec)):
        if pred.instance_id in out:
            raise CoHardenError(f"{spec}: two {kind} predictions for instance {pred.instance_id!r}")
        out[pred.instance_id] = pred.model_patch or ""
    return out


@overfit_app.command("refine")
@cli_errors
@run_options
@llm_options(ModelOpt, "llm_opts")
def refine_command(
    instances: Annotated[Path, typer.Option("--instances", help="SWE-bench records file, an instance directory, "
                                            "or a directory of instance directories (like examples/).")],
    fixes: Annotated[str, typer.Option("--fixes", help="Starting fixes: SWE-bench predictions file, or 'gold'.")],
    tests: Annotated[str, typer.Option("--tests", help="Starting tests: SWT-bench predictions file.")],
    instance_id: IdsOpt = None,
    llm_opts: LLMOptions = LLMOptions(),
    max_iterations: Annotated[int, ranged("--max-iterations", help="Critic calls per instance.", lo=0, hi=15)] = 15,
    hide_test: Annotated[bool, typer.Option("--hide-test", help="Variant: the critic sees the test's pass/fail "
                                            "flags only and changes the focal code only.")] = False,
    no_extra_context: Annotated[bool, typer.Option("--no-extra-context", help="Variant: no issue text, no whole "
                                                   "files and no coverage feedback in the prompt.")] = False,
    coverage_backend: BackendOpt = "coverage",
    output: Annotated[Path, output_option(help="Output directory.")] = Path("overfit-run"),
    run_name: Annotated[str | None, typer.Option("--run-name", help="model_name_or_path of the refined "
                                                 "predictions.")] = None,
    run: RunOptions = RunOptions(),
) -> None:
    """Refine each (fix, test) pair with an LLM critic, keeping a change only when the pair's reward rises;
    writes refined fixes / tests as SWE-bench / SWT-bench predictions plus iterations.jsonl (grade them with
    coharden eval --overfit DIR)."""
    from pydantic import ValidationError

    from coharden.evaluation.runner import load_eval_instances
    from coharden.execution.store import Store
    from coharden.overfit.refine import RefineResult, RefineRun, refine_instance
    from coharden.overfit.refine_config import RefineConfig
    from coharden.overfit.report import IterationLog, summarize, write_outputs

    settings = run.settings()
    try:
        refine_config = RefineConfig(max_iterations=max_iterations, hide_test=hide_test,
                                     extra_context=not no_extra_context, backend=_backend(coverage_backend))
    except (ValueError, ValidationError) as exc:
        raise CoHardenError(f"coharden overfit refine: {exc}") from exc
    client = llm_opts.client(settings, required=True, what="coharden overfit refine")
    llm_config = client.config
    found = load_eval_instances(instances, settings.cache_dir)
    if instance_id:
        missing = sorted(set(instance_id) - set(found))
        if missing:
            raise CoHardenError(f"{instances}: no instance with id {', '.join(missing)}")
        found = {iid: inst for iid, inst in found.items() if iid in set(instance_id)}
    fix_of, test_of = _patches(fixes, found, "fix"), _patches(tests, found, "test")
    chosen = [iid for iid in found if iid in fix_of and iid in test_of]
    if not chosen:
        raise CoHardenError("no instance has both a fix (--fixes) and a test (--tests)")
    name = run_name or f"overfit-{llm_config.model.replace('/', '__')}"
    log = IterationLog(output / "iterations.jsonl")
    refine = RefineRun(client, refine_config, name, Store(settings.store), log)
    results: list[RefineResult] = []
    for iid in chosen:
        result = refine_instance(found[iid], settings, fix_of[iid], test_of[iid], refine)
        results.append(result)
        err_console.print(f"{iid}: {result.stop_reason} after {result.iterations} iterations, reward "
                          f"{result.initial.get('reward', 0):.3f} -> {result.final.get('reward', 0):.3f}",
                          markup=False, highlight=False)
    skipped = {iid: "no fix" if iid not in fix_of else "no test" for iid in found if iid not in chosen}
    summary = summarize(results, refine_config, name, llm_config.model)
    summary["skipped"] = skipped
    written = write_outputs(results, output, summary)
    table = Table(title=f"{esc(name)}: {len(results)} instances ({esc(output)})")
    for title in ("instance", "stop", "iterations", "reward", "coverage", "F->P"):
        table.add_column(title, no_wrap=True)
    for r in results:
        table.add_row(esc(r.instance), esc(r.stop_reason), str(r.iterations),
                      f"{_num(r.initial.get('reward'))} -> {_num(r.final.get('reward'))}",
                      f"{_num(r.initial.get('coverage'))} -> {_num(r.final.get('coverage'))}",
                      f"{_yes(r.initial.get('fail_to_pass'))} -> {_yes(r.final.get('fail_to_pass'))}")
    console.print(table)
    console.print(f"kept changes by side: {summary['sides_changed']}; cost {summary['usd']:.4f} USD")
    for kind, path in written.items():
        console.print(f"{kind}: {esc(path)}", highlight=False)
    for iid, error in summary["errors"].items():
        err_console.print(f"[yellow]{esc(iid)}[/]: {esc(error)}", highlight=False)
    raise typer.Exit(0 if not summary["errors"] else 1)


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _yes(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "no")


@overfit_app.command("reward")
@cli_errors
@run_options
def reward_command(
    instance: Annotated[Path, typer.Argument(help="Instance directory or records file.")],
    fix: Annotated[str, typer.Option("--fix", help="Fix patch file, or 'golden'.")],
    test: Annotated[str, typer.Option("--test", help="Test patch file, a candidate name of a local instance, or "
                                      "'golden'.")],
    instance_id: IdOpt = None,
    coverage_backend: BackendOpt = "coverage",
    run: RunOptions = RunOptions(),
    as_json: JsonOpt = False,
) -> None:
    """The reward of one (fix, test) pair: 1/3 fails on the old code + 1/3 passes on the new code + 1/3
    changed-line coverage, with the lines the test misses."""
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.store import Store
    from coharden.instances import resolve_repo
    from coharden.overfit.reward import check_backend, coverage_settings, evaluate_pair

    settings = run.settings()
    backend = _backend(coverage_backend)
    local = common.pick_instance(instance, instance_id, settings)
    inst = local.instance
    candidates = {c.name: c.patch for c in local.candidates}
    _, fix_text = common.read_patch_arg(fix, {}, inst.patch, "--fix", instance)
    fix_text = common.fix_source(fix_text, settings)
    _, test_text = common.read_patch_arg(test, candidates, inst.test_patch, "--test", instance)
    check_backend(settings, backend, inst.python)
    settings = coverage_settings(settings, backend)
    with InstanceExecutor(inst, resolve_repo(inst, settings.repos_dir), settings, Store(settings.store)) as ex:
        evaluation = evaluate_pair(ex, fix_text, test_text, backend=backend)
    data = {**evaluation.summary(), "missed": evaluation.coverage.missed() if evaluation.coverage else {}}
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table = Table(title=f"{inst.instance_id}: reward {data['reward']:.4f}")
    table.add_column("component")
    table.add_column("value")
    table.add_row("fails on the old code", f"{_yes(data['fails_old'])} ({data['old']})")
    table.add_row("passes on the new code", f"{_yes(data['passes_new'])} ({data['new']})")
    table.add_row("changed-line coverage",
                  f"{_num(data['coverage'])} ({data['covered_lines']}/{data['changed_lines']})")
    console.print(table)
    for path, missed in data["missed"].items():
        if missed["old"] or missed["new"]:
            console.print(f"not run: {esc(path)}: old lines {missed['old']}, new lines {missed['new']}")
    if not evaluation.valid:
        err_console.print(f"[yellow]invalid pair[/]: {esc(evaluation.reason)}", highlight=False)
