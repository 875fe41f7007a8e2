"""``coharden suite ...``: mutation testing of a module with its suite, critic hardening (arm comparisons:
:mod:`coharden.cli.suite_compare`).

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coharden.cli.command import Renamed, renamed_flags
from coharden.cli.common import (
    RUN_RENAMED,
    cli_errors,
    console,
    err_console,
    new_app,
    option_group,
    print_diff,
    read_text,
)
from coharden.cli.common import settings_from as _settings
from coharden.cli.llm_options import LLM_RENAMED, llm_client
from coharden.cli.options import ConfigOpt, JsonOpt, output_option, ranged, workers_option
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc

if TYPE_CHECKING:
    from coharden.suite.loop import HardeningConfig

suite_app = new_app(help="Harden a module's whole test suite against mutants (mechanical kill oracle).")

ModuleArg = Annotated[Path, typer.Argument(help="The Python module to mutate.")]
TestsOpt = Annotated[Path | None, typer.Option("--tests", help="Seed test file (pytest) for the module.")]
RootOpt = Annotated[Path | None, typer.Option("--root", help="Project root copied into the sandbox and put on "
                                              "sys.path (default: the module's directory).")]
EngineOpt = Annotated[str, typer.Option("--engine", help="Mutant generator: builtin, or mutmut (if installed).")]
SuiteOperatorsOpt = Annotated[str | None, typer.Option("--operators", help="builtin engine: comma-separated "
                                                       "behavior_substitution,statement_deletion,return_value.")]
MaxMutantsOpt = Annotated[int | None, ranged("--max-mutants", help="Seeded sample of at most N mutants (default: "
                                             "all).", lo=1)]
SuiteWorkersOpt = Annotated[int, workers_option("Parallel sandboxes (one fork server each).")]
ShowOpt = Annotated[int, ranged("--show", help="How many surviving mutants to print as diffs.", lo=0)]
Round0Opt = Annotated[Path | None, typer.Option("--round0", help="A saved round-0 suite (.py) to start from.")]
MaxRoundsOpt = Annotated[int, ranged("--max-rounds", help="Critic round budget.", lo=0)]
MaxShownOpt = Annotated[int, ranged("--max-shown", help="Surviving mutants shown to the critic per round.", lo=1)]


@dataclass(frozen=True)
class HardeningOptions:
    """The critic rounds and the mutants of ``suite run`` and ``suite compare`` (one flag each; the seed of the
    mutant sample, the survivors shown and the bootstrap is ``-c mpe.seed``, set by :func:`with_seed`)."""

    max_rounds: int = 3
    max_shown: int = 10
    root: Path | None = None
    engine: str = "builtin"
    operators: str | None = None
    max_mutants: int | None = None
    seed: int = 0
    workers: int = 1

    def rounds(self) -> HardeningConfig:
        """The critic rounds these options ask for."""
        from coharden.suite.loop import HardeningConfig

        return HardeningConfig(self.max_rounds, self.max_shown, self.seed)


#: The suite commands' flags that set a key (read for one more release, as ``-c KEY=VALUE``): the time limit
#: (an upper bound: mutants get min(timeout, 10 x baseline + 5)), the store, the seed, the LLM endpoint,
#: record/replay store and mode and the cost cap (the critic's and tester's sampling: ``suite_llm_flags``).
SUITE_RENAMED = (*(r for r in RUN_RENAMED if r.flag in ("--timeout", "--store")), Renamed("--seed", "mpe.seed"),
                 *(LLM_RENAMED[k] for k in ("api_base", "llm_store", "llm_mode", "budget_usd")))
suite_llm_flags = renamed_flags(*SUITE_RENAMED, LLM_RENAMED["temperature"], LLM_RENAMED["max_tokens"])

hardening_options = option_group(HardeningOptions, {
    "max_rounds": MaxRoundsOpt, "max_shown": MaxShownOpt, "root": RootOpt, "engine": EngineOpt,
    "operators": SuiteOperatorsOpt, "max_mutants": MaxMutantsOpt, "workers": SuiteWorkersOpt,
}, "hardening")


def with_seed(hardening: HardeningOptions, settings: Any) -> HardeningOptions:
    """``hardening`` with the settings' seed (``-c mpe.seed``)."""
    return replace(hardening, seed=settings.mpe.seed)


def read_input(path: Path | None, what: str) -> str:
    """The text of an input file of a suite command (empty when not given)."""
    if path is None:
        return ""
    if not path.is_file():
        raise CoHardenError(f"{what}: {path} is not a file")
    return read_text(path, what)


def module_mutants(module: Path, hardening: HardeningOptions) -> tuple[list, str]:
    """The seeded sample of ``module``'s mutants (made as ``hardening``'s root, engine, operators, max_mutants
    and seed say), and the module's path relative to the project root."""
    from coharden.suite.operators import generate_mutants, select_mutants

    if not module.is_file():
        raise CoHardenError(f"{module}: not a file")
    base = (hardening.root or module.parent).resolve()
    rel = module.resolve().relative_to(base).as_posix() if module.resolve().is_relative_to(base) else module.name
    operators = hardening.operators
    ops = [o.strip() for o in operators.split(",") if o.strip()] if operators else None
    found = generate_mutants(module.read_text(), rel, engine=hardening.engine, operators=ops)
    return select_mutants(found, hardening.max_mutants, hardening.seed), rel


@contextmanager
def mutant_progress(total: int, label: str) -> Iterator[Any]:
    """A progress bar over mutants; yields the callback that advances it by one (mutant, result)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}", markup=False), console=err_console, transient=True) as bar:
        task = bar.add_task("", total=total)

        def advance(mutant: Any, result: Any) -> None:
            bar.update(task, advance=1, description=f"{mutant.id} {result.status.value}")

        yield advance


def llm_client_for(model: str | None, settings: Any, ledger: Any, overrides: dict[str, Any] | None = None):
    """An LLM client for ``model`` (None -> None), or for an arm's own config fields (``overrides``, no
    ``$COHARDEN_LLM_*``), reached as ``settings.llm`` says, with the shared ledger."""
    if model is None and not overrides:
        return None
    api_base = settings.llm.api_base
    config = None
    if overrides:
        from pydantic import ValidationError

        from coharden.llm import LLMConfig

        try:
            config = LLMConfig.model_validate({**({"api_base": api_base} if api_base else {}), **overrides})
        except ValidationError as exc:
            raise CoHardenError(f"LLM configuration: {exc}") from exc
    return llm_client(settings, model=model, ledger=ledger, llm_config=config)


def _render_survivors(mutants: list, survivors: list[str], show: int) -> None:
    by_id = {m.id: m for m in mutants}
    if not survivors or not show:
        return
    console.print(f"\n[bold]surviving mutants[/] ({len(survivors)}; showing {min(show, len(survivors))}):")
    for mid in survivors[:show]:
        m = by_id[mid]
        console.print(f"[bold]{esc(m.id)}[/] {esc(m.operator)} line {m.line}: {esc(m.description)}", highlight=False)
        print_diff(m.diff)


@suite_app.command("mutants")
@cli_errors
@renamed_flags(*SUITE_RENAMED[:3])
def mutants_cmd(
    module: ModuleArg,
    tests: TestsOpt = None,
    round0: Round0Opt = None,
    root: RootOpt = None,
    engine: EngineOpt = "builtin",
    operators: SuiteOperatorsOpt = None,
    max_mutants: MaxMutantsOpt = None,
    workers: SuiteWorkersOpt = 1,
    config: ConfigOpt = None,
    show: ShowOpt = 10,
    as_json: JsonOpt = False,
) -> None:
    """Mutation testing: baseline, forced-fail check, then every mutant against the suite; survivors as diffs."""
    from coharden.execution.store import Store
    from coharden.suite.loop import evaluate_round0
    from coharden.suite.runner import KillOracle, MutantStatus

    settings = _settings(config)
    suite = read_input(round0, "--round0") or read_input(tests, "--tests")
    if not suite.strip():
        raise CoHardenError("give the tests to run: --tests FILE (or --round0 FILE)")
    mutants, _ = module_mutants(module, HardeningOptions(root=root, engine=engine, operators=operators,
                                                        max_mutants=max_mutants, seed=settings.mpe.seed))
    with KillOracle(module, settings, root=root, store=Store(settings.store), workers=workers) as oracle, \
            mutant_progress(len(mutants), "mutants") as advance:
        r0 = evaluate_round0(oracle, mutants, suite, progress=advance)
    counts = {s.value: len(r0.ids(s)) for s in MutantStatus}
    scored = counts["killed"] + counts["survived"] + counts["timeout"]
    if as_json:
        print(json.dumps({"module": str(module), "engine": engine, "counts": counts, "total": len(mutants),
                          "score": counts["killed"] / scored if scored else None,
                          "mutants": [{**m.to_json(), "status": r0.results[m.id].status.value,
                                       "killed_by": r0.results[m.id].failed} for m in mutants]},
                         indent=2, sort_keys=True))
    else:
        table = Table(title=f"{module} ({engine} engine, {len(mutants)} mutants)")
        for col in ("killed", "survived", "timeout", "error", "score"):
            table.add_column(col)
        table.add_row(*(str(counts[k]) for k in ("killed", "survived", "timeout", "error")),
                      f"{counts['killed'] / scored:.3f}" if scored else "n/a")
        console.print(table)
        _render_survivors(mutants, r0.ids(MutantStatus.SURVIVED), show)


@suite_app.command("run")
@cli_errors
@hardening_options
@suite_llm_flags
def run_cmd(
    module: ModuleArg,
    tests: TestsOpt = None,
    round0: Round0Opt = None,
    tester_model: Annotated[str | None, typer.Option("--tester-model", help="Round 0: the Tester's model "
                                                     "(adds tests to --tests).")] = None,
    critic_model: Annotated[str | None, typer.Option("--critic-model", help="The Critic's litellm model "
                                                     "(none: round 0 only).")] = None,
    hardening: HardeningOptions = HardeningOptions(),
    output: Annotated[Path, output_option(help="Output directory.")] = Path("suite-results"),
    config: ConfigOpt = None,
    show: ShowOpt = 5,
    as_json: JsonOpt = False,
) -> None:
    """Round 0 (seed tests, --round0, or the Tester), then Critic rounds until one kills no new mutant.

    Writes OUTPUT/round0.py (reusable with --round0), OUTPUT/final_suite.py and OUTPUT/run.json. Exit status 1
    when an LLM call failed (truncated reply, provider error, budget): the run is reported as incomplete."""
    from coharden.execution.store import Store
    from coharden.llm import Ledger
    from coharden.suite.loop import HardeningStart, Replicate, build_round0, evaluate_round0, harden
    from coharden.suite.runner import KillOracle, MutantStatus

    if round0 is not None and (tests is not None or tester_model is not None):
        raise CoHardenError("--round0 is a frozen suite: do not combine it with --tests or --tester-model")
    settings = _settings(config)
    hardening = with_seed(hardening, settings)
    engine = hardening.engine
    ledger = Ledger()
    tester = llm_client_for(tester_model, settings, ledger)
    critic = llm_client_for(critic_model, settings, ledger)
    seed_suite = read_input(round0, "--round0") or read_input(tests, "--tests")
    mutants, _ = module_mutants(module, hardening)
    with KillOracle(module, settings, root=hardening.root, store=Store(settings.store),
                    workers=hardening.workers) as oracle:
        suite0, record = build_round0(oracle, seed_suite, tester)
        if round0 is not None:
            record.role = "round0-file"
        with mutant_progress(len(mutants), "round 0") as advance:
            r0 = evaluate_round0(oracle, mutants, suite0, record=record, progress=advance)
        run = harden(HardeningStart(oracle, mutants, r0), Replicate(critic, critic_model or "none"), hardening.rounds(),
                     progress=lambda text: err_console.print(text))
    output.mkdir(parents=True, exist_ok=True)
    (output / "round0.py").write_text(r0.suite)
    (output / "final_suite.py").write_text(run.final_suite)
    survivors_final = run.survivors
    result = {"schema": "coharden-suite-run-1", "module": str(module), "engine": engine,
              "mutants": [m.to_json() for m in mutants], "round0": r0.to_json(), "run": run.to_json(),
              "llm": ledger.to_dict()}
    (output / "run.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        counts = {s.value: len(r0.ids(s)) for s in MutantStatus}
        console.print(f"round 0: {len(mutants)} mutants: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        table = Table(title=f"critic rounds ({critic_model or 'no critic'})")
        for col in ("round", "status", "accepted", "rejected", "killed", "tokens in/out", "USD"):
            table.add_column(col)
        for rd in run.rounds:
            call = rd.call
            table.add_row(str(rd.round), rd.status, str(len(rd.guard.accepted) if rd.guard else 0),
                          ", ".join(f"{k} {v}" for k, v in (rd.guard.rejected if rd.guard else {}).items()) or "-",
                          str(len(rd.killed)), f"{call.prompt_tokens}/{call.completion_tokens}" if call else "-",
                          f"{call.cost_usd:.4f}" if call else "-")
        console.print(table)
        rate = "n/a" if run.kill_rate is None else f"{run.kill_rate:.3f}"
        console.print(f"killed {len(run.killed)} of {len(run.survivors0)} round-0 survivors (rate {rate}); "
                      f"stop: {run.stop_reason}; outputs in {output}")
        _render_survivors(mutants, survivors_final, show)
    if not run.complete:
        err_console.print(f"[bold red]incomplete:[/] {esc(run.failure)}")
        raise typer.Exit(1)
