"""``coharden mpe``: Mutation Patch Evaluation of one candidate test, or a batch over SWT-bench predictions.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the command."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from coharden.cli.command import renamed_flags
from coharden.cli.common import (
    RunOptions,
    cli_errors,
    console,
    err_console,
    pick_instance,
    progress_bar,
    read_patch_arg,
    run_options,
)
from coharden.cli.engine_options import EngineOptions, engine_options
from coharden.cli.llm_options import LLMOptions, ModelOpt, llm_options
from coharden.cli.mpe_options import CUTOFFS_RENAMED, SHOW_RENAMED, MPEOptions, mpe_options, parse_operators
from coharden.cli.mpe_render import finished_line, render_batch, render_mpe
from coharden.cli.options import JsonOpt, option_group, unwritable, workers_option
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc

if TYPE_CHECKING:
    from coharden.mpe.batch import BatchGrading
    from coharden.mpe.result import MPEResult


@dataclass(frozen=True)
class BatchOptions:
    """Batch MPE over SWT-bench predictions: --instances, --predictions, --output, --run-id, --log-dir; each
    also under the SWE-bench harness's name (--dataset_name, --predictions_path, --run_id)."""

    instances: Path | None = None
    predictions: Path | None = None
    output: Path = Path("mpe-results")
    run_id: str | None = None
    log_dir: Path | None = None

    @property
    def given(self) -> bool:
        return self.instances is not None or self.predictions is not None

    @property
    def logs(self) -> tuple[Path, str]:
        """(the log directory, the run's name in it)."""
        return self.log_dir or self.output / "logs", self.run_id or self.output.resolve().name

    def check(self) -> None:
        """Both inputs given, and the output and log directories writable: before any job runs."""
        if self.instances is None or self.predictions is None:
            raise CoHardenError("batch mode needs both --instances and --predictions")
        for flag, where in (("--output", self.output), ("--log-dir", self.logs[0])):
            if why := unwritable(where, directory=True):
                raise CoHardenError(f"{flag}: {why}")


@dataclass(frozen=True)
class _Single:
    """One MPE as the command line names it: the instance (a directory or records file, and the id that picks
    one of several), the candidate test and the reference test (each a patch file, a candidate name or
    'golden')."""

    instance: Path
    instance_id: str | None
    test: str
    reference: str


batch_options = option_group(BatchOptions, {
    "instances": Annotated[Path | None, typer.Option("--instances", "--dataset_name", help="Batch: SWE-bench "
                                                     "records file, or a dataset name with a local copy.")],
    "predictions": Annotated[Path | None, typer.Option("--predictions", "--predictions_path",
                                                       help="Batch: SWT-bench predictions.")],
    "output": Annotated[Path, typer.Option("--output", "-o", help="Batch output directory (mpe.jsonl, "
                                           "summary.json, report.json).")],
    "run_id": Annotated[str | None, typer.Option("--run-id", "--run_id", help="Batch: the run's name in the log "
                                                 "directory (default: the --output directory's name).")],
    "log_dir": Annotated[Path | None, typer.Option("--log-dir", help="Batch: per-instance log folders go in "
                                                   "LOG_DIR/RUN_ID/MODEL/INSTANCE_ID/ (patch.diff, report.json, "
                                                   "mpe.json, run_instance.log), as the SWE-bench harness's "
                                                   "(default: OUTPUT/logs).")],
}, "batch")

MPEIdsOpt = Annotated[list[str] | None, typer.Option(
    "--id", "--instance_ids", metavar="ID", help="Instance id: the one to take from a records file of several; "
    "in a batch, only these instances (repeatable or comma-separated).")]
MPEWorkersOpt = Annotated[int | None, workers_option(aliases=("--max_workers",))]


@cli_errors
@renamed_flags(CUTOFFS_RENAMED, SHOW_RENAMED)
@run_options
@batch_options
@mpe_options()
@llm_options(ModelOpt, "llm_opts")
@engine_options()
def mpe(
    instance: Annotated[Path | None, typer.Argument(help="Instance directory or records file (single mode).")] = None,
    test: Annotated[str, typer.Option("--test", "-t", help="Candidate test: patch file, candidate name, 'golden'.")]
    = "golden",
    reference: Annotated[str, typer.Option("--reference", "-r", help="Reference test (default: golden).")]
    = "golden",
    batch: BatchOptions = BatchOptions(),
    mpe_opts: MPEOptions = MPEOptions(),
    workers: MPEWorkersOpt = None,
    llm_opts: LLMOptions = LLMOptions(),
    instance_id: MPEIdsOpt = None,
    run: RunOptions = RunOptions(),
    as_json: JsonOpt = False,
) -> None:
    """Mutation Patch Evaluation: is a reproduction test Rigorous, Borderline, Lax, Misaligned or NotReproducing?

    Settings used less often are config settings (-c KEY=VALUE): mpe.trust_tests, mpe.reject_tampering,
    mpe.timeout_factor, mpe.timeout_floor, mpe.prefer_exercised, mpe.llm_edit_format (README, Configuration).

    Exit status 1 when a mutant source failed (LLM truncation, cost cap, LLM error): the finished mutants are
    reported, but no laxity and no class (fail closed); in a batch, when a prediction could not be graded (each
    reason is printed; the other predictions are graded and every output is written)."""
    from coharden.mpe.batch import BatchGrading

    settings = run.settings(workers=workers)
    engine = EngineOptions.of(settings)
    if not engine.local and batch.instances is None:
        raise CoHardenError("--executor ray runs batches (--instances and --predictions); a single MPE runs locally")
    ids = split_ids(instance_id)
    if batch.given:
        batch.check()
        if instance is not None:
            raise CoHardenError(f"an INSTANCE argument ({instance}) and --instances: give one; several "
                                "--instance_ids are given by repeating the flag or separated by commas")
    sources = mpe_opts.sources
    llm = _llm_mutator(settings, mpe_opts, llm_opts) if "llm" in sources else None
    mpe_cfg = mpe_opts.config(settings, workers=settings.workers, mechanical="mechanical" in sources,
                              llm_model=llm.client.config.model if llm is not None else None,
                              llm_operators=llm.settings.operators if llm is not None else ())
    grading = BatchGrading(settings, mpe_cfg, llm)
    if batch.given:
        if llm is not None and not engine.local:
            raise CoHardenError("--mutator llm runs with the local executor (one client, one budget, one "
                                "record/replay store for the whole batch)")
        _mpe_batch(batch, grading, as_json, engine, ids)
        return
    if instance is None:
        raise CoHardenError("give an INSTANCE, or --instances and --predictions for a batch")
    if len(ids) > 1:
        raise CoHardenError(f"--id: one instance is evaluated without --instances (given {len(ids)}: "
                            f"{', '.join(ids)})")
    with progress_bar("mpe", quiet=as_json) as update:
        update(description="fail-to-pass check, mutant pool")

        def report(stage: str, done: int, total: int | None) -> None:
            update(description=stage, completed=done, total=total)

        from coharden.execution import interrupt

        interrupt.reset()
        before = _verdicts_in(settings.store)
        try:
            result = _mpe_single(_Single(instance, ids[0] if ids else None, test, reference), grading, report)
        except KeyboardInterrupt as exc:
            kept = _verdicts_in(settings.store) - before
            err_console.print(f"interrupted: no class was computed; the {kept} verdict{'s' if kept != 1 else ''} "
                              f"this run finished {'are' if kept != 1 else 'is'} kept in {settings.store}, so the "
                              "same command again starts from them", highlight=False, markup=False)
            raise typer.Exit(130) from exc
    _show_single(result, mpe_cfg.cutoffs, mpe_cfg.show_mutants, as_json)


def _show_single(result: MPEResult, cutoffs: list[float] | None, show: int, as_json: bool) -> None:
    """One MPE's result on stdout (JSON, or the tables and ``show`` beta mutants), with its class at each of
    ``cutoffs``; exit status 1 when the pool is incomplete (no class: fail closed)."""
    from coharden.mpe.batch import cutoff_classes

    by_cutoff = cutoff_classes(result.laxity, cutoffs) if cutoffs is not None else None
    if as_json:
        data = result.to_json()
        if by_cutoff is not None:
            data["cutoffs"] = by_cutoff
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        render_mpe(result, show)
        if by_cutoff is not None:
            console.print("class by cutoff: " + (", ".join(f"{row['cutoff']:g} {row['class']}" for row in by_cutoff)
                                                 or "none (no laxity: the class does not depend on a cutoff)"),
                          highlight=False)
    if not result.pool_complete:
        err_console.print(f"[bold red]no classification:[/] {esc(result.pool_incomplete_reason)}")
        raise typer.Exit(1)


def _verdicts_in(path: Path) -> int:
    """How many verdicts the store at ``path`` holds (0 when there is none yet)."""
    from coharden.execution.store import Store

    if not path.exists():
        return 0
    store = Store(path)
    try:
        return store.count()
    finally:
        store.close()


def _llm_mutator(settings: Settings, mpe_opts: MPEOptions, llm_opts: LLMOptions):
    """The LLM mutator for ``--mutator llm``: client (env + flags), record/replay store, budget, operators."""
    from coharden.mutation.llm_operators import LLM_OPERATORS, LLMMutator, LLMMutatorSettings

    client = llm_opts.client(settings, required=True, what="--mutator llm")
    chosen = list(LLM_OPERATORS)
    if mpe_opts.operators:
        chosen = [op for op in parse_operators(mpe_opts.operators) if op in LLM_OPERATORS]
    return LLMMutator(client, LLMMutatorSettings.of(settings.mpe, seed=mpe_opts.seed,
                                                    operators=chosen))


def _mpe_single(single: _Single, grading: BatchGrading, progress):
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.pool import ExecutorPool
    from coharden.execution.store import Store
    from coharden.instances import resolve_repo
    from coharden.mpe.evaluate import MPERequest, evaluate

    instance, test, reference = single.instance, single.test, single.reference
    settings, config = grading.settings, grading.config
    local = pick_instance(instance, single.instance_id, settings)
    inst = local.instance
    candidates = {c.name: c.patch for c in local.candidates}
    test_name, test_text = read_patch_arg(test, candidates, inst.test_patch, "--test", instance)
    ref_name, ref_text = read_patch_arg(reference, candidates, inst.test_patch, "--reference",
                                      instance)
    repo = resolve_repo(inst, settings.repos_dir)
    from coharden.environment.derived import auto_spec_settings

    settings = auto_spec_settings(inst, repo, settings)
    store = Store(settings.store)

    def factory() -> InstanceExecutor:
        return InstanceExecutor(inst, repo, settings, store)

    with factory() as executor, ExecutorPool(factory, settings.workers) as pool:
        ref = executor.golden_test() if reference == "golden" else executor.test_patch(ref_text, name=ref_name)
        cand = executor.golden_test() if test == "golden" else executor.test_patch(test_text, name=test_name)
        result = evaluate(executor, MPERequest(inst.patch, cand, ref, config), llm_mutator=grading.llm_mutator,
                          pool=pool, progress=progress)
    if result.pool_complete:  # kept for `coharden mutants` (list / show by id)
        from coharden.execution.store import MPE_RESULT, mpe_result_key

        key = mpe_result_key(instance_id=inst.instance_id, base_commit=inst.base_commit, fix=inst.patch,
                             reference=ref_text, candidate=test_text, candidate_name=test_name,
                             mpe=config.cache_key())
        store.put_record(MPE_RESULT, key, result.to_json(timings=False))
    return result


def split_ids(values: list[str] | None) -> list[str]:
    """Instance ids of repeated ``--id`` / ``--instance_ids`` values, each maybe comma- or space-separated."""
    return list(dict.fromkeys(i for v in values or [] for i in v.replace(",", " ").split()))


def _batch_inputs(batch: BatchOptions, settings: Settings, ids: list[str]):
    """The batch's instances and predictions, checked before any work: an empty file, an id filter naming no
    instance, predictions none of which names an instance of the file are each one clear error. Returns
    (instances, predictions to run, ids of predictions not in the instances file)."""
    from coharden.evaluation.runner import load_eval_instances
    from coharden.schema.prediction import check_one_per_instance, load_predictions

    instances, predictions = batch.instances, batch.predictions
    if instances is None or predictions is None:
        raise CoHardenError("batch mode needs both --instances and --predictions")
    records = load_eval_instances(instances, settings.cache_dir)  # a records file or instance directories
    if not records:
        raise CoHardenError(f"--instances: {instances} holds no instance")
    preds = load_predictions(predictions)
    if not preds:
        raise CoHardenError(f"--predictions: {predictions} holds no prediction")
    check_one_per_instance(preds, predictions)
    if ids:
        missing = [i for i in ids if i not in records]
        if missing:
            raise CoHardenError(f"--instance_ids: no instance with id {', '.join(missing)} in {instances}")
        records = {i: records[i] for i in ids}
        preds = [p for p in preds if p.instance_id in records]
        if not preds:
            raise CoHardenError(f"--instance_ids: {predictions} holds no prediction for {', '.join(ids)}")
    unknown = sorted({p.instance_id for p in preds if p.instance_id not in records})
    if len(unknown) == len({p.instance_id for p in preds}):
        raise CoHardenError(f"--predictions: none of the predictions names an instance of {instances} (their "
                            f"ids: {', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''}): is it the "
                            "right instances file?")
    return records, preds, unknown


def _mpe_batch(batch: BatchOptions, grading: BatchGrading, as_json: bool,
               engine_opts: EngineOptions = EngineOptions(), ids: list[str] | None = None) -> None:
    from coharden.execution.store import Store
    from coharden.mpe.batch import DEFAULT_CUTOFFS, BatchOutputs, run_batch, stage_times, summarize
    from coharden.mpe.logs import folder_name
    from coharden.mpe.run_report import run_report
    from coharden.schema.prediction import unknown_ids_message

    settings = grading.settings
    store = Store(settings.store)
    cut = grading.config.cutoffs or list(DEFAULT_CUTOFFS)
    records, preds, unknown = _batch_inputs(batch, settings, ids or [])
    output, logs = batch.output, batch.logs
    if unknown:
        err_console.print("warning: " + unknown_ids_message(unknown), highlight=False, markup=False)
    run_log = not as_json and not err_console.is_terminal  # no progress bar: one line per finished prediction
    if run_log:
        err_console.print(f"mpe: {len(preds)} predictions over {len(records)} instances; store {settings.store}; "
                          f"per-instance logs {logs[0] / logs[1]}", highlight=False, markup=False)
    finished = 0
    with progress_bar("mpe", quiet=as_json, total=len(preds)) as update:
        def advance(row: dict) -> None:
            nonlocal finished
            finished += 1
            update(advance=1, description=f"{row['instance_id']}: {row.get('test_class', 'error')}")
            if run_log:
                err_console.print(finished_line(finished, len(preds), row), highlight=False, markup=False)

        def interrupted(running: int) -> None:
            err_console.print(f"interrupted: finishing {running} running job{'s' if running != 1 else ''} "
                              "(Ctrl-C again to stop now)", highlight=False, markup=False)

        engine = engine_opts.engine(settings.workers, on_interrupt=interrupted)
        try:
            rows = run_batch(records, preds, grading, BatchOutputs(store, output, logs, advance),
                             engine=engine)
        except KeyboardInterrupt as exc:
            _stopped(exc, output)
        finally:
            engine.close()
    summary = summarize(rows, cut)
    summary["unknown_ids"] = unknown
    summary["stage_seconds"] = stage_times(rows)
    summary["executor"] = engine_opts.executor
    summary["store"] = str(settings.store)
    summary["logs"] = str(logs[0] / folder_name(logs[1]))
    (output / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    (output / "report.json").write_text(json.dumps(run_report(rows, len(records), logs[1]), indent=2) + "\n")
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        render_batch(summary, output)
    for label, error in summary["errors"].items():
        err_console.print(f"error: {label}: {error}", highlight=False, markup=False)
    if summary["errors"]:
        n = len(summary["errors"])
        err_console.print(f"{n} prediction{'s' if n != 1 else ''} of {summary['total']} could not be graded or "
                          f"logged (above; also in {output / 'summary.json'})", highlight=False, markup=False)
        raise typer.Exit(1)


def _stopped(exc: KeyboardInterrupt, output: Path) -> NoReturn:
    """Leave an interrupted batch with exit status 130 (the shell's code for SIGINT): after the running jobs
    stopped, through the normal exit; on a second Ctrl-C at once (the running test processes' sandboxes die
    with this process; their leftover directories are swept by the next run)."""
    from coharden.execution.interrupt import StopNow

    if isinstance(exc, StopNow):
        err_console.show_cursor(True)  # the progress bar's Live display is not stopped on this way out
        err_console.print("stopped", highlight=False)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(130)
    err_console.print(f"interrupted: the finished results are in the store; run the same command again to go on "
                      f"({output / 'mpe.jsonl.partial'} lists them)", highlight=False, markup=False)
    raise typer.Exit(130) from exc
