"""The ``coharden`` command line (typer + rich). Subcommands import their layers lazily."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from coharden.cli.common import (
    RunOptions,
    cli_errors,
    console,
    err_console,
    fix_source,
    llm_client,
    new_app,
    pick_instance,
    print_counts,
    print_diff,
    progress_bar,
    read_patch_arg,
    run_options,
)
from coharden.cli.common import settings_from as _settings
from coharden.cli.options import (
    ApiBaseOpt,
    BudgetOpt,
    ConfidenceOpt,
    ConfigOpt,
    CutoffsOpt,
    IdOpt,
    JsonOpt,
    LLMModeOpt,
    LLMStoreOpt,
    MaxMutantsOpt,
    ModelOpt,
    MutatorOpt,
    NoImpliedOpt,
    OperatorsOpt,
    PaperClassesOpt,
    PerOperatorOpt,
    PreferExercisedOpt,
    SamplesOpt,
    SeedOpt,
    StoreOpt,
    TauOpt,
    WorkersOpt,
    mpe_config,
    parse_cutoffs,
    parse_mutators,
    parse_operators,
    ranged,
    unwritable,
    workers_option,
)
from coharden.config import Settings
from coharden.errors import CoHardenError

if TYPE_CHECKING:
    from coharden.schema.mpe_config import MPEConfig

app = new_app(name="coharden", help="Measure and harden the rigor of bug reproduction tests with mutant patches.")


def _print_version(value: bool) -> None:
    if value:
        from coharden import __version__

        print(f"coharden {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    """coharden: verdicts, mutation patch evaluation (MPE) and hardening of reproduction tests."""


@app.command()
@cli_errors
@run_options
def verify(
    instance: Annotated[Path, typer.Argument(help="Instance directory, or SWE-bench records (.json/.jsonl).")],
    test: Annotated[str, typer.Option("--test", "-t", help="Test patch file, candidate name, or 'golden'.")] = "golden",
    fix: Annotated[str, typer.Option("--fix", "-f", help="Fix patch file (default: the golden fix).")] = "golden",
    instance_id: IdOpt = None,
    run: RunOptions = RunOptions(),
    as_json: JsonOpt = False,
) -> None:
    """Verdicts of a test on the buggy and the fixed code, and whether it is fail-to-pass."""
    from coharden.environment.derived import auto_spec_settings
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.store import Store
    from coharden.execution.verify import fail_to_pass
    from coharden.instances import resolve_repo

    settings = run.settings()
    local = pick_instance(instance, instance_id, settings)
    inst = local.instance
    candidates = {c.name: c.patch for c in local.candidates}
    test_name, test_text = read_patch_arg(test, candidates, inst.test_patch, "--test", instance)
    _, fix_text = read_patch_arg(fix, {}, inst.patch, "--fix", instance)
    repo = resolve_repo(inst, settings.repos_dir)
    if not fix_text.strip():
        raise CoHardenError(f"--fix: {inst.instance_id} has no golden fix; give a fix patch file")
    source = fix_source(fix_text, settings)
    settings = auto_spec_settings(inst, repo, settings)  # a SWE-bench record runs in its spec environment
    with InstanceExecutor(inst, repo, settings, Store(settings.store)) as executor:
        spec = executor.golden_test() if test == "golden" else executor.test_patch(test_text, name=test_name)
        result = fail_to_pass(executor, spec, source)
    if as_json:
        print(json.dumps({"instance_id": inst.instance_id, "test": test_name, **result.to_json()}, indent=2))
    else:
        table = Table(title=f"{inst.instance_id}: test {test_name!r}")
        table.add_column("code")
        table.add_column("verdict")
        table.add_column("detail", overflow="fold")
        for label, verdict in (("buggy", result.buggy), ("fixed", result.fixed)):
            table.add_row(label, verdict.outcome.value, verdict.reason[:300])
        console.print(table)
        console.print(f"test ids: {', '.join(result.test_ids)}")
        mark = "[green]yes[/]" if result.fail_to_pass else "[red]no[/]"
        console.print(f"fail-to-pass: {mark}")
    raise typer.Exit(0 if result.admissible else 1)


def _render_mpe(result, show: int) -> None:
    table = Table(title=f"MPE {result.instance_id}: test {result.test!r} vs reference {result.reference!r}")
    for col in ("", "buggy", "fixed"):
        table.add_column(col)
    table.add_row("candidate", result.candidate_buggy.short()[:80], result.candidate_fixed.short()[:80])
    table.add_row("reference", result.reference_buggy.short()[:80], result.reference_fixed.short()[:80])
    console.print(table)
    if result.fail_to_pass:
        counts = result.matrix.counts()
        matrix = Table(title="matrix (candidate x reference over admissible mutants)")
        matrix.add_column("")
        matrix.add_column("reference PASS")
        matrix.add_column("reference FAIL")
        matrix.add_row("candidate PASS", f"alpha {counts['alpha']}", f"[bold red]beta {counts['beta']}[/]")
        matrix.add_row("candidate FAIL", f"gamma {counts['gamma']}", f"delta {counts['delta']}")
        console.print(matrix)
        ops = Table(title=f"per operator (laxity [{result.confidence:g} interval])")
        for col in ("operator", "pool", "drawn", "admissible", "alpha", "beta", "gamma", "delta", "laxity",
                    "inadmissible"):
            ops.add_column(col)
        for op, row in result.per_operator().items():
            inad = ", ".join(f"{k} {v}" for k, v in row["inadmissible"].items()) or "-"
            ops.add_row(op, str(row.get("pool", "-")), str(row["total"]),
                        *(str(row[k]) for k in ("admissible", "alpha", "beta", "gamma", "delta")),
                        _laxity_text(row["laxity"], row["interval"]), inad)
        console.print(ops)
        console.print(_frame_text(result))
        dropped = result.pool.get("dropped", {})
        if dropped:
            console.print("dropped before running: " + "; ".join(
                f"{op}: " + ", ".join(f"{k} {v}" for k, v in reasons.items()) for op, reasons in dropped.items()))
        _render_sources(result)
    if result.runs:
        console.print("runs: " + "; ".join(f"{role} {row['made']} made, {row['cached']} from the store, "
                                           f"{row['implied']} implied" for role, row in result.runs.items())
                      + (f"; flaky on the fixed code: {', '.join(result.flaky)}" if result.flaky else ""))
    if result.candidate_timeouts:
        console.print(f"candidate timeouts on mutants: {result.candidate_timeouts} (limit "
                      f"{result.time_limits.get('candidate', 0):g} s; inadmissible, not counted in laxity)")
    for note in result.tampering:
        console.print(f"[bold yellow]tampering:[/] {note}")
    if result.pool_complete:  # else the caller says why there is no class, once
        laxity = "n/a" if result.laxity is None else result.estimate().text()
        rule = "point rule (--paper-classes)" if result.point_classes else f"{result.confidence:g} interval"
        console.print(f"laxity: [bold]{laxity}[/] (tau {result.tau}, class by the {rule})   class: "
                      f"[bold]{result.test_class.value}[/]")
        if result.test_class.value == "Inconclusive" and result.fail_to_pass:
            console.print("no admissible mutant: laxity undefined (every mutant was inadmissible or the pool is "
                          "empty)")
    for warning in result.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False)
    lax = result.lax_mutants()
    if lax and show:
        console.print(f"\n[bold]wrong fixes the test lets through[/] ({len(lax)}; showing {min(show, len(lax))}):")
        for mr in lax[:show]:
            console.print(f"[bold]{mr.mutant.id}[/] {mr.mutant.description} @ {mr.mutant.location}")
            print_diff(mr.mutant.patch)


def _laxity_text(laxity: float | None, interval: list[float] | None) -> str:
    if laxity is None or interval is None:
        return "-"
    if interval[0] == interval[1]:
        return f"{laxity:.3f}"
    return f"{laxity:.3f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def _frame_text(result) -> str:
    """The sampling frame in one line: pool, drawn, admissible, and how the draw ended."""
    pool = sum(row["pool"] for row in result.frame.values())
    drawn = len(result.mutants)
    how = f"sequential, {result.rounds} round(s), stopped: {result.stop}" if result.sequential else result.stop
    return (f"sampling frame: pool {pool}, drawn {drawn}, admissible {result.matrix.admissible} ({how}"
            f"{'; the whole pool ran, the laxity is exact' if result.census else ''})")


def _render_sources(result) -> None:
    """Per-source counts and the LLM pool (samples, rejections, usage), when the LLM mutator ran."""
    if result.llm_pool is None:
        return
    sources = Table(title="per source")
    for col in ("source", "total", "admissible", "alpha", "beta", "gamma", "delta"):
        sources.add_column(col)
    for source, row in result.per_source().items():
        sources.add_row(source, *(str(row[k]) for k in ("total", "admissible", "alpha", "beta", "gamma", "delta")))
    console.print(sources)
    llm = Table(title=f"LLM pool ({result.llm_pool['model']})")
    for col in ("operator", "wanted", "attempts", "admitted", "rejected", "failed", "tokens in/out", "USD"):
        llm.add_column(col)
    usage = result.llm_usage.get("per_operator", {})
    for op, row in result.llm_pool["per_operator"].items():
        u = usage.get(op, {})
        llm.add_row(op, str(row["wanted"]), str(row["attempts"]), str(row["admitted"]),
                    ", ".join(f"{k} {v}" for k, v in row["rejected"].items()) or "-",
                    ", ".join(f"{k} {v}" for k, v in row["failed"].items()) or "-",
                    f"{u.get('prompt_tokens', 0)}/{u.get('completion_tokens', 0)}", f"{u.get('cost_usd', 0.0):.4f}")
    console.print(llm)


@app.command()
@cli_errors
@run_options
def mpe(
    instance: Annotated[Path | None, typer.Argument(help="Instance directory or records file (single mode).")] = None,
    test: Annotated[str, typer.Option("--test", "-t", help="Candidate test: patch file, candidate name, 'golden'.")]
    = "golden",
    reference: Annotated[str, typer.Option("--reference", "-r", help="Reference test (default: golden).")]
    = "golden",
    instances: Annotated[Path | None, typer.Option("--instances", help="Batch: SWE-bench records file.")] = None,
    predictions: Annotated[Path | None, typer.Option("--predictions", help="Batch: SWT-bench predictions.")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Batch output directory.")] = Path("mpe-results"),
    run_id: Annotated[str | None, typer.Option("--run-id", help="Batch: the run's name in the log directory "
                                               "(default: the --output directory's name).")] = None,
    log_dir: Annotated[Path | None, typer.Option("--log-dir", help="Batch: per-instance log folders go in "
                                                 "LOG_DIR/RUN_ID/MODEL/INSTANCE_ID/ (patch.diff, report.json, "
                                                 "run_instance.log), as the SWE-bench harness's (default: logs/ "
                                                 "beside the --output directory).")] = None,
    operators: OperatorsOpt = None,
    per_operator: PerOperatorOpt = None,
    prefer_exercised: PreferExercisedOpt = False,
    no_implied: NoImpliedOpt = False,
    seed: SeedOpt = None,
    tau: TauOpt = None,
    paper_classes: PaperClassesOpt = False,
    confidence: ConfidenceOpt = 0.95,
    max_mutants: MaxMutantsOpt = None,
    cutoffs: CutoffsOpt = None,
    workers: WorkersOpt = None,
    executor: Annotated[str, typer.Option("--executor", help="Batch: where jobs run: local or ray.")] = "local",
    address: Annotated[str | None, typer.Option("--address", help="Batch: Ray cluster address.")] = None,
    show: Annotated[int, ranged("--show", help="How many beta mutants to print as diffs.", lo=0)] = 5,
    mutator: MutatorOpt = "mechanical",
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    samples: SamplesOpt = 3,
    llm_store: LLMStoreOpt = None,
    llm_mode: LLMModeOpt = "auto",
    budget_usd: BudgetOpt = None,
    trust_tests: Annotated[bool, typer.Option("--trust-tests", help="Candidate and reference may share one "
                                              "pytest process (only for tests you trust).")] = False,
    reject_tampering: Annotated[bool, typer.Option("--reject-tampering", help="A candidate with tampering notes "
                                                   "(conftest.py, pytest hooks, JUnit writes, os._exit) is "
                                                   "Invalid.")] = False,
    timeout_factor: Annotated[float, ranged("--timeout-factor", help="Time limit on a mutant: this many times "
                                            "the test's run on the fixed code.", lo=0, lo_open=True)] = 5.0,
    timeout_floor: Annotated[float, ranged("--timeout-floor", help="Smallest time limit on a mutant, seconds.",
                                           lo=0, lo_open=True)] = 10.0,
    instance_id: IdOpt = None,
    run: RunOptions = RunOptions(),
    as_json: JsonOpt = False,
) -> None:
    """Mutation Patch Evaluation: is a reproduction test Rigorous, Borderline, Lax, Misaligned or NotReproducing?

    Exit status 1 when a mutant source failed (LLM truncation, cost cap, LLM error): the finished mutants are
    reported, but no laxity and no class (fail closed)."""
    from coharden.execution.store import Store

    settings = run.settings(seed=seed, tau=tau, workers=workers)
    if executor not in ("local", "ray"):
        raise CoHardenError(f"--executor: {executor!r} (known: local, ray)")
    if executor != "local" and instances is None:
        raise CoHardenError("--executor ray runs batches (--instances and --predictions); a single MPE runs locally")
    if instances is not None and (why := unwritable(output, directory=True)):  # before any job runs
        raise CoHardenError(f"--output: {why}")
    logs = (log_dir or output.parent / "logs", run_id or output.resolve().name)
    if instances is not None and (why := unwritable(logs[0], directory=True)):
        raise CoHardenError(f"--log-dir: {why}")
    sources = parse_mutators(mutator)
    ops = parse_operators(operators)
    llm = None
    if "llm" in sources:
        llm = _llm_mutator(settings, operators, model, api_base, samples, llm_store, llm_mode, budget_usd)
        ops = list(dict.fromkeys([*(ops if "mechanical" in sources else []), *llm.settings.operators]))
    mpe_cfg = mpe_config(settings, ops, per_operator, paper_classes=paper_classes, mechanical="mechanical" in sources,
                         llm_model=llm.client.config.model if llm is not None else None,
                         prefer_exercised=prefer_exercised, workers=settings.workers, confidence=confidence,
                         max_mutants=max_mutants, no_implied=no_implied)
    mpe_cfg = mpe_cfg.model_copy(update={"trust_tests": trust_tests, "reject_tampering": reject_tampering,
                                         "timeout_factor": timeout_factor, "timeout_floor": timeout_floor})
    if instances is not None or predictions is not None:
        if instances is None or predictions is None:
            raise CoHardenError("batch mode needs both --instances and --predictions")
        if llm is not None and executor != "local":
            raise CoHardenError("--mutator llm runs with the local executor (one client, one budget, one "
                                "record/replay store for the whole batch)")
        _mpe_batch(instances, predictions, output, settings, Store(settings.store), mpe_cfg, llm, cutoffs, as_json,
                   executor, address, logs=logs)
        return
    if instance is None:
        raise CoHardenError("give an INSTANCE, or --instances and --predictions for a batch")
    single_cutoffs = parse_cutoffs(cutoffs, []) if cutoffs is not None else None  # checked before any work
    with progress_bar("mpe", quiet=as_json) as update:
        update(description="fail-to-pass check, mutant pool")

        def report(stage: str, done: int, total: int | None) -> None:
            update(description=stage, completed=done, total=total)

        result = _mpe_single(instance, instance_id, test, reference, settings, mpe_cfg, llm, report)
    from coharden.mpe.batch import cutoff_classes

    by_cutoff = cutoff_classes(result.laxity, single_cutoffs) if single_cutoffs is not None else None
    if as_json:
        data = result.to_json()
        if by_cutoff is not None:
            data["cutoffs"] = by_cutoff
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        _render_mpe(result, show)
        if by_cutoff is not None:
            console.print("class by cutoff: " + (", ".join(f"{row['cutoff']:g} {row['class']}" for row in by_cutoff)
                                                 or "none (no laxity: the class does not depend on a cutoff)"),
                          highlight=False)
    if not result.pool_complete:
        err_console.print(f"[bold red]no classification:[/] {result.pool_incomplete_reason}")
        raise typer.Exit(1)


def _llm_mutator(settings: Settings, operators: str | None, model: str | None, api_base: str | None, samples: int,
                 llm_store: Path | None, llm_mode: str, budget_usd: float | None):
    """The LLM mutator for ``--mutator llm``: client (env + flags), record/replay store, budget, operators."""
    from coharden.mutation.llm_operators import LLM_OPERATORS, LLMMutator, LLMMutatorSettings

    client = llm_client(model=model, api_base=api_base, llm_store=llm_store, llm_mode=llm_mode,
                        default_store=settings.store, budget_usd=budget_usd, what="--mutator llm")
    chosen = list(LLM_OPERATORS)
    if operators:
        chosen = [op for op in parse_operators(operators) if op in LLM_OPERATORS]
    return LLMMutator(client, LLMMutatorSettings(operators=tuple(chosen), samples=samples, seed=settings.seed))


def _mpe_single(instance: Path, instance_id: str | None, test: str, reference: str, settings: Settings,
                config: MPEConfig, llm_mutator, progress):
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.pool import ExecutorPool
    from coharden.execution.store import Store
    from coharden.instances import resolve_repo
    from coharden.mpe.evaluate import evaluate

    local = pick_instance(instance, instance_id, settings)
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
        result = evaluate(executor, inst.patch, cand, ref, config, llm_mutator=llm_mutator, pool=pool,
                          progress=progress)
    if result.pool_complete:  # kept for `coharden mutants` (list / show by id)
        from coharden.execution.store import MPE_RESULT, mpe_result_key

        key = mpe_result_key(instance_id=inst.instance_id, base_commit=inst.base_commit, fix=inst.patch,
                             reference=ref_text, candidate=test_text, candidate_name=test_name,
                             mpe=config.cache_key())
        store.put_record(MPE_RESULT, key, result.to_json(timings=False))
    return result


def _mpe_batch(instances: Path, predictions: Path, output: Path, settings: Settings, store,
               config: MPEConfig, llm_mutator,
               cutoffs: str | None, as_json: bool, executor: str = "local", address: str | None = None,
               logs: tuple[Path, str] | None = None) -> None:
    from coharden.evaluation.runner import load_eval_instances
    from coharden.execution.engine import make_engine
    from coharden.mpe.batch import DEFAULT_CUTOFFS, run_batch, stage_times, summarize
    from coharden.schema.prediction import check_one_per_instance, load_predictions, unknown_ids_message

    cut = parse_cutoffs(cutoffs, DEFAULT_CUTOFFS)
    records = load_eval_instances(instances, settings.cache_dir)  # a records file or instance directories
    preds = load_predictions(predictions)
    check_one_per_instance(preds, predictions)
    unknown = sorted({p.instance_id for p in preds if p.instance_id not in records})
    if unknown:
        err_console.print("warning: " + unknown_ids_message(unknown), highlight=False, markup=False)
    with progress_bar("mpe", quiet=as_json, total=len(preds)) as update:
        def advance(row: dict) -> None:
            update(advance=1, description=f"{row['instance_id']}: {row.get('test_class', 'error')}")

        def interrupted(running: int) -> None:
            err_console.print(f"interrupted: finishing {running} running job{'s' if running != 1 else ''} "
                              "(Ctrl-C again to stop now)", highlight=False, markup=False)

        engine = make_engine(executor, workers=settings.workers, address=address, on_interrupt=interrupted)
        try:
            rows = run_batch(records, preds, settings, store, output, config, workers=settings.workers,
                             progress=advance, engine=engine, llm_mutator=llm_mutator, logs=logs)
        except KeyboardInterrupt as exc:
            _stopped(exc, output)
        finally:
            engine.close()
    summary = summarize(rows, cut)
    summary["unknown_ids"] = unknown
    summary["stage_seconds"] = stage_times(rows)
    summary["executor"] = executor
    (output / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    print_counts(f"MPE over {summary['total']} predictions ({output / 'mpe.jsonl'})", ("class", "tests"),
                 summary["classes"])
    if logs is not None:
        console.print(f"per-instance logs: {logs[0] / logs[1]}/MODEL/INSTANCE_ID/", highlight=False)
    cut_table = Table(title="Rigorous / Lax by cutoff (F->P tests)")
    for col in ("cutoff", "Rigorous", "Lax"):
        cut_table.add_column(col)
    for row in summary["cutoffs"]:
        cut_table.add_row(str(row["cutoff"]), str(row["Rigorous"]), str(row["Lax"]))
    console.print(cut_table)
    for iid, error in summary["errors"].items():
        err_console.print(f"[yellow]{iid}[/]: {error}")
    if summary["stage_seconds"]:
        console.print("time per stage: " + ", ".join(f"{k} {v:.1f}s" for k, v in summary["stage_seconds"].items()))


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


examples_app = new_app(help="Bundled examples: hand-labelled candidate tests for checking coharden.")
app.add_typer(examples_app, name="examples")


@examples_app.command("check")
@cli_errors
def examples_check(
    directory: Annotated[Path, typer.Option("--dir", help="Examples directory.")] = Path("examples"),
    only: Annotated[list[str] | None, typer.Option("--only", help="Run only these examples.")] = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
    workers: Annotated[int | None, workers_option("Parallel workers per MPE.")] = None,
    no_implied: NoImpliedOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run MPE on every bundled candidate test and compare with its label (exit 1 on any mismatch)."""
    settings = _settings(config, store=store, workers=workers)
    with progress_bar("examples", quiet=as_json) as update:
        rows = _check_examples(directory, only or [], settings, update, no_implied=no_implied)
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        table = Table(title="bundled examples: expected vs got")
        for col in ("example", "candidate", "expected", "got", "laxity [interval]", "drawn/pool", "matrix a/b/g/d",
                    ""):
            table.add_column(col)
        for row in rows:
            ok = "[green]ok[/]" if row["ok"] else "[bold red]MISMATCH[/]"
            table.add_row(row["example"], row["candidate"], row["expected"], row["got"],
                          _laxity_text(row["laxity"], row["interval"]), f"{row['drawn']}/{row['pool']}",
                          row["matrix"], ok)
        console.print(table)
    raise typer.Exit(0 if all(r["ok"] for r in rows) else 1)


def _check_examples(directory: Path, only: list[str], settings: Settings,
                    update=lambda **_: None, *, no_implied: bool = False) -> list[dict]:
    """One row per candidate test of every example; ``update`` (a progress bar's) hears candidates done / all."""
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.pool import ExecutorPool
    from coharden.execution.store import Store
    from coharden.instances import MANIFEST_NAMES, load_local, resolve_repo
    from coharden.mpe.evaluate import evaluate

    dirs = sorted(d for d in directory.iterdir() if d.is_dir() and any((d / n).is_file() for n in MANIFEST_NAMES)) \
        if directory.is_dir() else []
    if only:
        dirs = [d for d in dirs if d.name in only]
    if not dirs:
        raise CoHardenError(f"{directory}: no examples found")
    store = Store(settings.store)
    rows: list[dict] = []
    examples = [(example, load_local(example, settings.cache_dir)) for example in dirs]
    update(total=sum(1 + len(local.candidates) for _, local in examples), completed=0)
    for example, local in examples:
        inst = local.instance
        repo = resolve_repo(inst, settings.repos_dir)

        def factory(inst=inst, repo=repo) -> InstanceExecutor:
            return InstanceExecutor(inst, repo, settings, store)

        with factory() as executor, ExecutorPool(factory, settings.workers) as pool:
            reference = executor.golden_test()
            for name, patch, label in [("golden", inst.test_patch, "Rigorous"),
                                       *((c.name, c.patch, c.label) for c in local.candidates)]:
                update(description=f"{example.name}: {name}")
                candidate = reference if name == "golden" else executor.test_patch(patch, name=name)
                result = evaluate(executor, inst.patch, candidate, reference,
                                  mpe_config(settings, None, None, workers=settings.workers,
                                             no_implied=no_implied), pool=pool)
                counts = result.matrix.counts()
                ok = result.test_class.value == label
                if name == "golden":  # the golden test against itself: no beta, no gamma
                    ok = ok and counts["beta"] == 0 and counts["gamma"] == 0
                rows.append({"example": example.name, "candidate": name, "expected": label or "?",
                             "got": result.test_class.value, "laxity": result.laxity, "ok": ok,
                             "matrix": "/".join(str(counts[k]) for k in ("alpha", "beta", "gamma", "delta")),
                             "interval": result.interval, "drawn": len(result.mutants), "stop": result.stop,
                             "pool": sum(row["pool"] for row in result.frame.values()),
                             "per_operator": result.per_operator(), "runs": result.runs})
                update(advance=1)
    return rows


def _register() -> None:
    """Mount the command modules of this package; each imports its layer only inside its commands, so
    ``coharden --help`` stays fast."""
    from coharden.cli import llm as llm_cli
    from coharden.cli.env import env_app, reproduce_app
    from coharden.cli.evaluation import eval_command
    from coharden.cli.loop import agent_cmd, run_loop
    from coharden.cli.mutants import mutants_app
    from coharden.cli.overfit import overfit_app
    from coharden.cli.study import study_app
    from coharden.cli.suite import suite_app
    from coharden.cli.table import study_table

    study_app.command("table")(study_table)
    app.command("mock-llm", help="Serve an OpenAI-compatible mock LLM with scripted replies.")(llm_cli.mock_llm)
    for name, group in (("study", study_app), ("suite", suite_app), ("env", env_app), ("reproduce", reproduce_app),
                        ("overfit", overfit_app), ("mutants", mutants_app)):
        app.add_typer(group, name=name)
    app.command("eval")(eval_command)
    app.command("agent")(agent_cmd)
    app.command("run")(run_loop)
    from coharden.cli.demo import demo_app

    app.add_typer(demo_app, name="demo")


_register()


def main() -> None:  # pragma: no cover - console entry
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
