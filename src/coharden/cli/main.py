"""The ``coharden`` command line (typer + rich). Subcommands import their layers lazily."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from coharden.cli.common import (
    ConfigOpt,
    IdOpt,
    JsonOpt,
    PythonOpt,
    ReposOpt,
    StoreOpt,
    TimeoutOpt,
    console,
    err_console,
    llm_client,
    parse_operators,
    pick_instance,
    read_patch_arg,
)
from coharden.cli.common import fail as _fail
from coharden.cli.common import settings_from as _settings
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.schema.mpe_config import MPEConfig

app = typer.Typer(
    name="coharden",
    help="Measure and harden the rigor of bug reproduction tests with mutant patches.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """coharden: verdicts, mutation patch evaluation (MPE) and hardening of reproduction tests."""


@app.command()
def verify(
    instance: Annotated[Path, typer.Argument(help="Instance directory, or SWE-bench records (.json/.jsonl).")],
    test: Annotated[str, typer.Option("--test", "-t", help="Test patch file, candidate name, or 'golden'.")] = "golden",
    fix: Annotated[str, typer.Option("--fix", "-f", help="Fix patch file (default: the golden fix).")] = "golden",
    instance_id: IdOpt = None,
    repos: ReposOpt = None,
    config: ConfigOpt = None,
    timeout: TimeoutOpt = None,
    python: PythonOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Verdicts of a test on the buggy and the fixed code, and whether it is fail-to-pass."""
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.store import Store
    from coharden.execution.verify import fail_to_pass
    from coharden.instances import resolve_repo
    from coharden.patches import split_patch

    try:
        settings = _settings(config, repos_dir=repos, timeout=timeout, python=python, store=store)
        local = pick_instance(instance, instance_id, settings)
        inst = local.instance
        candidates = {c.name: c.patch for c in local.candidates}
        test_name, test_text = read_patch_arg(test, candidates, inst.test_patch, "--test")
        _, fix_text = read_patch_arg(fix, {}, inst.patch, "--fix")
        fix_source, fix_tests = split_patch(fix_text, settings.test_patterns)
        if fix_tests.strip():
            err_console.print("[yellow]warning:[/] the fix touches test files; only its source part is used")
        repo = resolve_repo(inst, settings.repos_dir)
        with InstanceExecutor(inst, repo, settings, Store(settings.store)) as executor:
            spec = executor.golden_test() if test == "golden" else executor.test_patch(test_text, name=test_name)
            result = fail_to_pass(executor, spec, fix_source)
    except CoHardenError as exc:
        _fail(str(exc))
        return
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


def _render_mpe(result, show: int) -> None:  # type: ignore[no-untyped-def]
    from rich.syntax import Syntax

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
        ops = Table(title="per operator")
        for col in ("operator", "total", "admissible", "alpha", "beta", "gamma", "delta", "inadmissible"):
            ops.add_column(col)
        for op, row in result.per_operator().items():
            inad = ", ".join(f"{k} {v}" for k, v in row["inadmissible"].items()) or "-"
            ops.add_row(op, *(str(row[k]) for k in ("total", "admissible", "alpha", "beta", "gamma", "delta")), inad)
        console.print(ops)
        dropped = result.pool.get("dropped", {})
        if dropped:
            console.print("dropped before running: " + "; ".join(
                f"{op}: " + ", ".join(f"{k} {v}" for k, v in reasons.items()) for op, reasons in dropped.items()))
        _render_sources(result)
    laxity = "n/a" if result.laxity is None else f"{result.laxity:.3f}"
    console.print(f"laxity: [bold]{laxity}[/] (tau {result.tau})   class: [bold]{result.test_class.value}[/]")
    lax = result.lax_mutants()
    if lax and show:
        console.print(f"\n[bold]wrong fixes the test lets through[/] ({len(lax)}; showing {min(show, len(lax))}):")
        for mr in lax[:show]:
            console.print(f"[bold]{mr.mutant.id}[/] {mr.mutant.description} @ {mr.mutant.location}")
            console.print(Syntax(mr.mutant.patch, "diff", theme="ansi_dark", word_wrap=True))


def _render_sources(result) -> None:  # type: ignore[no-untyped-def]
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
    if not result.pool_complete:
        console.print(f"[bold red]{result.pool_incomplete_reason}[/]")


@app.command()
def mpe(
    instance: Annotated[Path | None, typer.Argument(help="Instance directory or records file (single mode).")] = None,
    test: Annotated[str, typer.Option("--test", "-t", help="Candidate test: patch file, candidate name, 'golden'.")]
    = "golden",
    reference: Annotated[str, typer.Option("--reference", "-r", help="Reference test (default: golden).")]
    = "golden",
    instances: Annotated[Path | None, typer.Option("--instances", help="Batch: SWE-bench records file.")] = None,
    predictions: Annotated[Path | None, typer.Option("--predictions", help="Batch: SWT-bench predictions.")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Batch output directory.")] = Path("mpe-results"),
    operators: Annotated[str | None, typer.Option("--operators", help="Comma-separated operators.")] = None,
    per_operator: Annotated[int | None, typer.Option("--per-operator", help="Mutants per operator (all).")]
    = None,
    prefer_exercised: Annotated[bool, typer.Option("--prefer-exercised", help="With --per-operator: sample first "
                                                   "among mutants that change code the tests run.")] = False,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampling seed.")] = None,
    tau: Annotated[float | None, typer.Option("--tau", help="Laxity cutoff (default 0.202).")] = None,
    paper_classes: Annotated[bool, typer.Option("--paper-classes", help="Map every non-F->P test to Misaligned.")]
    = False,
    cutoffs: Annotated[str | None, typer.Option("--cutoffs", help="Batch: cutoffs for the Rigorous/Lax table.")]
    = None,
    workers: Annotated[int | None, typer.Option("--workers", "-w", help="Parallel workers.")] = None,
    executor: Annotated[str, typer.Option("--executor", help="Batch: where jobs run: local or ray.")] = "local",
    address: Annotated[str | None, typer.Option("--address", help="Batch: Ray cluster address.")] = None,
    show: Annotated[int, typer.Option("--show", help="How many beta mutants to print as diffs.")] = 5,
    mutator: Annotated[str, typer.Option("--mutator", help="Mutant sources: mechanical, llm, or mechanical,llm.")]
    = "mechanical",
    model: Annotated[str | None, typer.Option("--model", help="LLM mutator: litellm model name "
                                              "(default $COHARDEN_LLM_MODEL).")] = None,
    api_base: Annotated[str | None, typer.Option("--api-base", help="LLM mutator: endpoint URL.")] = None,
    samples: Annotated[int, typer.Option("--samples", min=1, help="LLM mutator: mutants wanted per operator.")]
    = 3,
    llm_store: Annotated[Path | None, typer.Option("--llm-store", help="LLM call record/replay store (default: "
                                                   "llm-calls.sqlite next to --store).")] = None,
    llm_mode: Annotated[str, typer.Option("--llm-mode", help="auto (replay stored calls, record new ones), "
                                          "record (always call, overwrite), replay (offline, fail on a miss).")]
    = "auto",
    budget_usd: Annotated[float | None, typer.Option("--budget-usd", min=0, help="LLM cost cap for the run.")]
    = None,
    instance_id: IdOpt = None,
    repos: ReposOpt = None,
    config: ConfigOpt = None,
    timeout: TimeoutOpt = None,
    python: PythonOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Mutation Patch Evaluation: is a reproduction test Rigorous, Lax, Misaligned or NotReproducing?

    Exit status 1 when a mutant source failed (LLM truncation, cost cap, LLM error): the finished mutants are
    reported, but no laxity and no class (fail closed)."""
    from coharden.execution.store import Store

    try:
        settings = _settings(config, repos_dir=repos, timeout=timeout, python=python, store=store, seed=seed,
                             tau=tau, workers=workers)
        sources = _parse_mutators(mutator)
        ops = parse_operators(operators)
        llm = None
        if "llm" in sources:
            llm = _llm_mutator(settings, operators, model, api_base, samples, llm_store, llm_mode, budget_usd)
            ops = list(dict.fromkeys([*(ops if "mechanical" in sources else []), *llm.settings.operators]))
        mpe_config = MPEConfig(operators=ops, per_operator=per_operator, seed=settings.seed, tau=settings.tau,
                               paper_classes=paper_classes, mechanical="mechanical" in sources,
                               llm=llm.client.config.model if llm is not None else None,
                               prefer_exercised=prefer_exercised, workers=settings.workers)
        if instances is not None or predictions is not None:
            if instances is None or predictions is None:
                raise CoHardenError("batch mode needs both --instances and --predictions")
            if llm is not None and executor != "local":
                raise CoHardenError("--mutator llm runs with the local executor (one client, one budget, one "
                                    "record/replay store for the whole batch)")
            _mpe_batch(instances, predictions, output, settings, Store(settings.store), mpe_config, cutoffs, as_json,
                       executor, address, llm_mutator=llm)
            return
        if instance is None:
            raise CoHardenError("give an INSTANCE, or --instances and --predictions for a batch")
        result = _mpe_single(instance, instance_id, test, reference, settings, mpe_config, llm_mutator=llm)
    except CoHardenError as exc:
        _fail(str(exc))
        return
    if as_json:
        print(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        _render_mpe(result, show)
    if not result.pool_complete:
        err_console.print(f"[bold red]no classification:[/] {result.pool_incomplete_reason}")
        raise typer.Exit(1)


MUTATORS = ("mechanical", "llm")


def _parse_mutators(value: str) -> list[str]:
    sources = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in sources if v not in MUTATORS]
    if not sources or unknown:
        raise CoHardenError(f"--mutator: {', '.join(unknown) or 'empty'} (known: {', '.join(MUTATORS)})")
    return [m for m in MUTATORS if m in sources]


def _llm_mutator(settings: Settings, operators: str | None, model: str | None, api_base: str | None, samples: int,
                 llm_store: Path | None, llm_mode: str, budget_usd: float | None):  # type: ignore[no-untyped-def]
    """The LLM mutator for ``--mutator llm``: client (env + flags), record/replay store, budget, operators."""
    from coharden.mutation.llm_operators import LLM_OPERATORS, LLMMutator, LLMMutatorSettings

    client = llm_client(model=model, api_base=api_base, llm_store=llm_store, llm_mode=llm_mode,
                        default_store=settings.store, budget_usd=budget_usd, what="--mutator llm")
    chosen = list(LLM_OPERATORS)
    if operators:
        chosen = [op for op in parse_operators(operators) if op in LLM_OPERATORS]
    return LLMMutator(client, LLMMutatorSettings(operators=tuple(chosen), samples=samples, seed=settings.seed))


def _mpe_single(instance: Path, instance_id: str | None, test: str, reference: str, settings: Settings,
                mpe_config: MPEConfig, llm_mutator=None):  # type: ignore[no-untyped-def]
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.store import Store
    from coharden.instances import resolve_repo
    from coharden.mpe.evaluate import evaluate

    local = pick_instance(instance, instance_id, settings)
    inst = local.instance
    candidates = {c.name: c.patch for c in local.candidates}
    test_name, test_text = read_patch_arg(test, candidates, inst.test_patch, "--test")
    ref_name, ref_text = read_patch_arg(reference, candidates, inst.test_patch, "--reference")
    repo = resolve_repo(inst, settings.repos_dir)
    store = Store(settings.store)

    def factory() -> InstanceExecutor:
        return InstanceExecutor(inst, repo, settings, store)

    with factory() as executor:
        ref = executor.golden_test() if reference == "golden" else executor.test_patch(ref_text, name=ref_name)
        cand = executor.golden_test() if test == "golden" else executor.test_patch(test_text, name=test_name)
        return evaluate(executor, inst.patch, cand, ref, mpe_config, llm_mutator=llm_mutator,
                        executor_factory=factory)


def _mpe_batch(instances: Path, predictions: Path, output: Path, settings: Settings, store,  # type: ignore[no-untyped-def]
               mpe_config: MPEConfig, cutoffs: str | None, as_json: bool, executor: str = "local",
               address: str | None = None, llm_mutator=None) -> None:  # type: ignore[no-untyped-def]
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from coharden.execution.engine import make_engine
    from coharden.instances import load_records
    from coharden.mpe.batch import DEFAULT_CUTOFFS, load_predictions, run_batch, stage_times, summarize

    try:
        cut = [float(c) for c in cutoffs.split(",")] if cutoffs else list(DEFAULT_CUTOFFS)
    except ValueError as exc:
        raise CoHardenError(f"--cutoffs: {exc}") from exc
    records = {inst.instance_id: inst for inst in load_records(instances)}
    preds = load_predictions(predictions)
    with Progress(TextColumn("mpe"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  TextColumn("{task.description}"), console=err_console) as bar:
        task = bar.add_task("", total=len(preds))

        def advance(row: dict) -> None:  # type: ignore[type-arg]
            bar.update(task, advance=1, description=f"{row['instance_id']}: {row.get('test_class', 'error')}")

        engine = make_engine(executor, workers=settings.workers, address=address)
        try:
            rows = run_batch(records, preds, settings, store, output, mpe_config, workers=settings.workers,
                             progress=advance, engine=engine, llm_mutator=llm_mutator)
        finally:
            engine.close()
    summary = summarize(rows, cut)
    summary["stage_seconds"] = stage_times(rows)
    summary["executor"] = executor
    (output / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    if as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    classes = Table(title=f"MPE over {summary['total']} predictions ({output / 'mpe.jsonl'})")
    classes.add_column("class")
    classes.add_column("tests")
    for name, n in summary["classes"].items():
        classes.add_row(name, str(n))
    console.print(classes)
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


examples_app = typer.Typer(help="Bundled examples: hand-labelled candidate tests for checking coharden.")
app.add_typer(examples_app, name="examples")


@examples_app.command("check")
def examples_check(
    directory: Annotated[Path, typer.Option("--dir", help="Examples directory.")] = Path("examples"),
    only: Annotated[list[str] | None, typer.Option("--only", help="Run only these examples.")] = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
    workers: Annotated[int | None, typer.Option("--workers", "-w", help="Parallel workers per MPE.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run MPE on every bundled candidate test and compare with its label (exit 1 on any mismatch)."""
    try:
        settings = _settings(config, store=store, workers=workers)
        rows = _check_examples(directory, only or [], settings)
    except CoHardenError as exc:
        _fail(str(exc))
        return
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        table = Table(title="bundled examples: expected vs got")
        for col in ("example", "candidate", "expected", "got", "laxity", "matrix a/b/g/d", ""):
            table.add_column(col)
        for row in rows:
            ok = "[green]ok[/]" if row["ok"] else "[bold red]MISMATCH[/]"
            lax = "-" if row["laxity"] is None else f"{row['laxity']:.3f}"
            table.add_row(row["example"], row["candidate"], row["expected"], row["got"], lax, row["matrix"], ok)
        console.print(table)
    raise typer.Exit(0 if all(r["ok"] for r in rows) else 1)


def _check_examples(directory: Path, only: list[str], settings: Settings) -> list[dict]:  # type: ignore[type-arg]
    from coharden.execution.executor import InstanceExecutor
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
    rows: list[dict] = []  # type: ignore[type-arg]
    for example in dirs:
        local = load_local(example, settings.cache_dir)
        inst = local.instance
        repo = resolve_repo(inst, settings.repos_dir)

        def factory(inst=inst, repo=repo) -> InstanceExecutor:  # type: ignore[no-untyped-def]
            return InstanceExecutor(inst, repo, settings, store)

        with factory() as executor:
            reference = executor.golden_test()
            for name, patch, label in [("golden", inst.test_patch, "Rigorous"),
                                       *((c.name, c.patch, c.label) for c in local.candidates)]:
                candidate = reference if name == "golden" else executor.test_patch(patch, name=name)
                result = evaluate(executor, inst.patch, candidate, reference,
                                  MPEConfig(seed=settings.seed, tau=settings.tau, workers=settings.workers),
                                  executor_factory=factory)
                counts = result.matrix.counts()
                ok = result.test_class.value == label
                if name == "golden":  # the golden test against itself: no beta, no gamma
                    ok = ok and counts["beta"] == 0 and counts["gamma"] == 0
                rows.append({"example": example.name, "candidate": name, "expected": label or "?",
                             "got": result.test_class.value, "laxity": result.laxity, "ok": ok,
                             "matrix": "/".join(str(counts[k]) for k in ("alpha", "beta", "gamma", "delta")),
                             "per_operator": result.per_operator()})
    return rows


def _register_mock_llm() -> None:
    # the mock server's CLI lives with the LLM layer; it imports no provider SDK, so mounting it is cheap
    from coharden.cli import llm as llm_cli

    app.command("mock-llm", help="Serve an OpenAI-compatible mock LLM with scripted replies.")(llm_cli.mock_llm)


_register_mock_llm()


# --- studies on real data (coharden study ...) ------------------------------------------------------------------

def _register_study() -> None:
    # the group lives with its layer (coharden.study.cli) and imports that layer only inside its commands
    from coharden.cli.study import study_app

    app.add_typer(study_app, name="study")


_register_study()


# --- adversarial hardening of a whole test suite (coharden suite ...) -----------------------------------------

def _register_suite() -> None:
    # the group lives with its layer (coharden.suite.cli) and imports that layer only inside its commands
    from coharden.cli.suite import suite_app

    app.add_typer(suite_app, name="suite")


_register_suite()


# --- environments for real repositories (coharden env ...) ------------------------------------------------------

def _register_env() -> None:
    # the group lives with its layer (coharden.environment.cli) and imports that layer only inside its commands
    from coharden.cli.env import env_app

    app.add_typer(env_app, name="env")


_register_env()


# --- verified reproduction of real bugs (coharden reproduce ...) ------------------------------------------------

def _register_reproduce() -> None:
    from coharden.cli.env import reproduce_app

    app.add_typer(reproduce_app, name="reproduce")


_register_reproduce()


# --- evaluation, agents and the loop (coharden eval / agent / run) ---------------------------------------------

def _register_commands() -> None:
    # the commands live with their layers and import those layers only inside the commands
    from coharden.cli.evaluation import eval_command
    from coharden.cli.loop import agent_cmd, run_loop

    app.command("eval")(eval_command)
    app.command("agent")(agent_cmd)
    app.command("run")(run_loop)


_register_commands()


# --- test overfitting: reward and reward-guided refinement (coharden overfit ...) ---------------------------------

def _register_overfit() -> None:
    # the group lives with its layer (coharden.overfit.cli) and imports that layer only inside its commands
    from coharden.cli.overfit import overfit_app

    app.add_typer(overfit_app, name="overfit")


_register_overfit()


def main() -> None:  # pragma: no cover - console entry
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
