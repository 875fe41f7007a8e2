"""``coharden suite ...``: mutation testing of a module with its suite, critic hardening, and arm comparisons.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from coharden.cli.common import cli_errors, console, err_console, new_app, option_group, print_diff, read_text
from coharden.cli.common import settings_from as _settings
from coharden.cli.llm_options import (
    ApiBaseOpt,
    BudgetOpt,
    LLMModeOpt,
    LLMStoreOpt,
    MaxTokensOpt,
    TemperatureOpt,
    llm_client,
)
from coharden.cli.mpe_options import seed_option
from coharden.cli.options import ConfigOpt, JsonOpt, StoreOpt, output_option, ranged, timeout_option, workers_option
from coharden.errors import CoHardenError

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
SuiteSeedOpt = Annotated[int, seed_option("Seed for mutant sampling, shown survivors, bootstrap.")]
SuiteWorkersOpt = Annotated[int, workers_option("Parallel sandboxes (one fork server each).")]
SuiteTimeoutOpt = Annotated[float | None, timeout_option("Seconds per test process (upper bound; mutants get "
                                                         "min(this, 10 x baseline + 5)).")]
ShowOpt = Annotated[int, ranged("--show", help="How many surviving mutants to print as diffs.", lo=0)]
Round0Opt = Annotated[Path | None, typer.Option("--round0", help="A saved round-0 suite (.py) to start from.")]
MaxRoundsOpt = Annotated[int, ranged("--max-rounds", help="Critic round budget.", lo=0)]
MaxShownOpt = Annotated[int, ranged("--max-shown", help="Surviving mutants shown to the critic per round.", lo=1)]


@dataclass(frozen=True)
class HardeningOptions:
    """The critic rounds and the mutants of ``suite run`` and ``suite compare`` (one flag each)."""

    max_rounds: int = 3
    max_shown: int = 10
    root: Path | None = None
    engine: str = "builtin"
    operators: str | None = None
    max_mutants: int | None = None
    seed: int = 0
    workers: int = 1


@dataclass(frozen=True)
class StoreOptions:
    """The LLM record/replay store, its budget, and the sandbox settings of ``suite run`` and ``suite compare``."""

    llm_store: Path | None = None
    llm_mode: str = "auto"
    budget_usd: float | None = None
    timeout: float | None = None
    config: list[str] | None = None
    store: Path | None = None


hardening_options = option_group(HardeningOptions, {
    "max_rounds": MaxRoundsOpt, "max_shown": MaxShownOpt, "root": RootOpt, "engine": EngineOpt,
    "operators": SuiteOperatorsOpt, "max_mutants": MaxMutantsOpt, "seed": SuiteSeedOpt, "workers": SuiteWorkersOpt,
}, "hardening")
store_options = option_group(StoreOptions, {
    "llm_store": LLMStoreOpt, "llm_mode": LLMModeOpt, "budget_usd": BudgetOpt, "timeout": SuiteTimeoutOpt,
    "config": ConfigOpt, "store": StoreOpt,
}, "stores")


def _read(path: Path | None, what: str) -> str:
    if path is None:
        return ""
    if not path.is_file():
        raise CoHardenError(f"{what}: {path} is not a file")
    return read_text(path, what)


def _mutants(module: Path, root: Path | None, engine: str, operators: str | None, max_mutants: int | None,
             seed: int) -> tuple[list, str]:
    from coharden.suite.operators import generate_mutants, select_mutants

    if not module.is_file():
        raise CoHardenError(f"{module}: not a file")
    base = (root or module.parent).resolve()
    rel = module.resolve().relative_to(base).as_posix() if module.resolve().is_relative_to(base) else module.name
    ops = [o.strip() for o in operators.split(",") if o.strip()] if operators else None
    found = generate_mutants(module.read_text(), rel, engine=engine, operators=ops)
    return select_mutants(found, max_mutants, seed), rel


@contextmanager
def _progress(total: int, label: str) -> Iterator[Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err_console, transient=True) as bar:
        task = bar.add_task("", total=total)

        def advance(mutant: Any, result: Any) -> None:
            bar.update(task, advance=1, description=f"{mutant.id} {result.status.value}")

        yield advance


def _client(model: str | None, api_base: str | None, temperature: float | None, max_tokens: int | None,
            llm_store: Path | None, llm_mode: str, store: Path, ledger: Any, budget_usd: float | None,
            overrides: dict[str, Any] | None = None):
    """An LLM client for ``model`` (None -> None), or for an arm's own config fields (``overrides``, no
    ``$COHARDEN_LLM_*``), with the shared store and ledger."""
    if model is None and not overrides:
        return None
    config = None
    if overrides:
        from pydantic import ValidationError

        from coharden.llm import LLMConfig

        try:
            config = LLMConfig.model_validate({**({"api_base": api_base} if api_base else {}), **overrides})
        except ValidationError as exc:
            raise CoHardenError(f"LLM configuration: {exc}") from exc
    return llm_client(model=model, api_base=api_base, llm_store=llm_store, llm_mode=llm_mode, default_store=store,
                      budget_usd=budget_usd, ledger=ledger, llm_config=config, temperature=temperature,
                      max_tokens=max_tokens)


def _render_survivors(mutants: list, survivors: list[str], show: int) -> None:
    by_id = {m.id: m for m in mutants}
    if not survivors or not show:
        return
    console.print(f"\n[bold]surviving mutants[/] ({len(survivors)}; showing {min(show, len(survivors))}):")
    for mid in survivors[:show]:
        m = by_id[mid]
        console.print(f"[bold]{m.id}[/] {m.operator} line {m.line}: {m.description}")
        print_diff(m.diff)


@suite_app.command("mutants")
@cli_errors
def mutants_cmd(
    module: ModuleArg,
    tests: TestsOpt = None,
    round0: Round0Opt = None,
    root: RootOpt = None,
    engine: EngineOpt = "builtin",
    operators: SuiteOperatorsOpt = None,
    max_mutants: MaxMutantsOpt = None,
    seed: SuiteSeedOpt = 0,
    workers: SuiteWorkersOpt = 1,
    timeout: SuiteTimeoutOpt = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
    show: ShowOpt = 10,
    as_json: JsonOpt = False,
) -> None:
    """Mutation testing: baseline, forced-fail check, then every mutant against the suite; survivors as diffs."""
    from coharden.execution.store import Store
    from coharden.suite.loop import evaluate_round0
    from coharden.suite.runner import KillOracle, MutantStatus

    settings = _settings(config, timeout=timeout, store=store)
    suite = _read(round0, "--round0") or _read(tests, "--tests")
    if not suite.strip():
        raise CoHardenError("give the tests to run: --tests FILE (or --round0 FILE)")
    mutants, _ = _mutants(module, root, engine, operators, max_mutants, seed)
    with KillOracle(module, settings, root=root, store=Store(settings.store), workers=workers) as oracle, \
            _progress(len(mutants), "mutants") as advance:
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
@store_options
def run_cmd(
    module: ModuleArg,
    tests: TestsOpt = None,
    round0: Round0Opt = None,
    tester_model: Annotated[str | None, typer.Option("--tester-model", help="Round 0: the Tester's model "
                                                     "(adds tests to --tests).")] = None,
    critic_model: Annotated[str | None, typer.Option("--critic-model", help="The Critic's litellm model "
                                                     "(none: round 0 only).")] = None,
    api_base: ApiBaseOpt = None,
    temperature: TemperatureOpt = None,
    max_tokens: MaxTokensOpt = None,
    hardening: HardeningOptions = HardeningOptions(),
    output: Annotated[Path, output_option(help="Output directory.")] = Path("suite-results"),
    stores: StoreOptions = StoreOptions(),
    show: ShowOpt = 5,
    as_json: JsonOpt = False,
) -> None:
    """Round 0 (seed tests, --round0, or the Tester), then Critic rounds until one kills no new mutant.

    Writes OUTPUT/round0.py (reusable with --round0), OUTPUT/final_suite.py and OUTPUT/run.json. Exit status 1
    when an LLM call failed (truncated reply, provider error, budget): the run is reported as incomplete."""
    from coharden.execution.store import Store
    from coharden.llm import Ledger
    from coharden.suite.loop import HardeningConfig, build_round0, evaluate_round0, harden
    from coharden.suite.runner import KillOracle, MutantStatus

    max_rounds, max_shown, root, engine, operators, max_mutants, seed, workers = astuple(hardening)
    llm_store, llm_mode, budget_usd, timeout, config, store = astuple(stores)
    if round0 is not None and (tests is not None or tester_model is not None):
        raise CoHardenError("--round0 is a frozen suite: do not combine it with --tests or --tester-model")
    settings = _settings(config, timeout=timeout, store=store)
    ledger = Ledger()
    tester = _client(tester_model, api_base, temperature, max_tokens, llm_store, llm_mode, settings.store,
                     ledger, budget_usd)
    critic = _client(critic_model, api_base, temperature, max_tokens, llm_store, llm_mode, settings.store,
                     ledger, budget_usd)
    seed_suite = _read(round0, "--round0") or _read(tests, "--tests")
    mutants, _ = _mutants(module, root, engine, operators, max_mutants, seed)
    with KillOracle(module, settings, root=root, store=Store(settings.store), workers=workers) as oracle:
        suite0, record = build_round0(oracle, seed_suite, tester)
        if round0 is not None:
            record.role = "round0-file"
        with _progress(len(mutants), "round 0") as advance:
            r0 = evaluate_round0(oracle, mutants, suite0, record=record, progress=advance)
        run = harden(oracle, mutants, r0, critic, HardeningConfig(max_rounds, max_shown, seed),
                     arm=critic_model or "none", progress=lambda text: err_console.print(text))
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
        err_console.print(f"[bold red]incomplete:[/] {run.failure}")
        raise typer.Exit(1)


def _parse_arms(specs: list[str], arms_file: Path | None) -> list[Any]:
    """``--arm none`` / ``--arm NAME=MODEL``, or an arms YAML file: a list of ``{name, <LLMConfig fields>}``."""
    import yaml
    from pydantic import ValidationError

    from coharden.llm import LLMConfig
    from coharden.suite.compare import Arm

    arms: list[Arm] = []
    raw: list[dict[str, Any]] = []
    if arms_file is not None:
        data = yaml.safe_load(_read(arms_file, "--arms"))
        data = data.get("arms") if isinstance(data, dict) else data
        if not isinstance(data, list) or not all(isinstance(a, dict) and "name" in a for a in data):
            raise CoHardenError(f"{arms_file}: expected a list of arms, each a mapping with `name`")
        raw += data
    for spec in specs:
        if spec == "none":
            raw.append({"name": "none"})
        elif "=" in spec:
            name, model = spec.split("=", 1)
            raw.append({"name": name.strip(), "model": model.strip()})
        else:
            raise CoHardenError(f"--arm {spec!r}: use 'none' or NAME=MODEL")
    names = [a["name"] for a in raw]
    if len(set(names)) != len(names):
        raise CoHardenError(f"arm names must be unique: {names}")
    for entry in raw:
        fields = {k: v for k, v in entry.items() if k != "name"}
        if not fields:
            arms.append(Arm(entry["name"]))
            continue
        try:
            arms.append(Arm(entry["name"], LLMConfig.from_env(**fields) if "model" in fields and len(fields) == 1
                            else LLMConfig.model_validate(fields)))
        except ValidationError as exc:
            raise CoHardenError(f"arm {entry['name']!r}: {exc}") from exc
    if not arms:
        raise CoHardenError("give arms: --arm none --arm A=MODEL ... or --arms FILE")
    return arms


@suite_app.command("compare")
@cli_errors
@hardening_options
@store_options
def compare_cmd(
    module: ModuleArg,
    round0: Annotated[Path, typer.Option("--round0", help="The frozen round-0 suite every arm starts from.")],
    arm: Annotated[list[str] | None, typer.Option("--arm", help="'none' (control) or NAME=MODEL; repeat. The "
                                                  "first arm is the control for the differences.")] = None,
    arms_file: Annotated[Path | None, typer.Option("--arms", help="YAML list of arms: {name, model, api_base, "
                                                   "temperature, cost_overrides, ...}.")] = None,
    replicates: Annotated[int, ranged("--replicates", "-r", help="Replicates per arm.", lo=1)] = 5,
    hypotheses: Annotated[Path | None, typer.Option("--hypotheses", help="Hypotheses (YAML list or one per "
                                                    "line); default: each arm beats the control.")] = None,
    n_boot: Annotated[int, ranged("--n-boot", help="Bootstrap resamples.", lo=100)] = 2000,
    api_base: ApiBaseOpt = None,
    hardening: HardeningOptions = HardeningOptions(),
    output: Annotated[Path, output_option(help="Output directory.")] = Path("suite-compare"),
    stores: StoreOptions = StoreOptions(),
    as_json: JsonOpt = False,
) -> None:
    """Arms (no critic, critic model A, B, ...) x replicates from one frozen round 0, with kill-rate intervals.

    The pre-registration (config + hypotheses, hashed) is written to OUTPUT/prereg.json before any test runs.
    Exit status 1 when an arm has incomplete replicates (LLM failures), which are reported, never scored."""
    import hashlib

    from coharden import __version__
    from coharden.execution.store import Store
    from coharden.llm import Ledger
    from coharden.suite.compare import run_compare
    from coharden.suite.loop import HardeningConfig, evaluate_round0
    from coharden.suite.prereg import default_hypotheses, load_hypotheses, preregister, verify
    from coharden.suite.runner import KillOracle

    max_rounds, max_shown, root, engine, operators, max_mutants, seed, workers = astuple(hardening)
    llm_store, llm_mode, budget_usd, timeout, config, store = astuple(stores)
    settings = _settings(config, timeout=timeout, store=store)
    arms = _parse_arms(list(arm or []), arms_file)
    suite0 = _read(round0, "--round0")
    mutants, rel = _mutants(module, root, engine, operators, max_mutants, seed)
    hyps = load_hypotheses(hypotheses) if hypotheses else default_hypotheses([a.name for a in arms])
    result_store = Store(settings.store)
    plan = {
        "coharden": __version__, "module": rel, "module_sha256": hashlib.sha256(module.read_bytes()).hexdigest(),
        "round0_sha256": hashlib.sha256(suite0.encode()).hexdigest(), "engine": engine,
        "operators": operators, "max_mutants": max_mutants, "mutants": len(mutants),
        "mutant_ids_sha256": hashlib.sha256(",".join(f"{m.id}:{m.sha256}" for m in mutants).encode()).hexdigest(),
        "arms": [a.describe() for a in arms], "api_base": api_base, "replicates": replicates,
        "max_rounds": max_rounds,
        "max_shown": max_shown, "seed": seed, "n_boot": n_boot, "level": 0.95, "budget_usd": budget_usd,
        "metrics": {"kill_rate": "killed round-0 survivors / round-0 survivors, pooled over complete replicates",
                    "interval": "cluster bootstrap over replicates, percentile, seeded",
                    "cost_per_killed": "LLM USD of the arm / killed mutants"},
    }
    output.mkdir(parents=True, exist_ok=True)
    prereg = preregister(output / "prereg.json", plan, hyps, store=result_store)
    ledger = Ledger()  # one ledger for every arm: --budget-usd caps the whole comparison

    def client_for(a: Any) -> Any:
        if a.llm is None:
            return None
        return _client(None, api_base, None, None, llm_store, llm_mode, settings.store, ledger, budget_usd,
                       overrides={k: v for k, v in a.llm.model_dump().items() if v is not None})

    def on_run(run: Any) -> None:
        path = output / "runs" / run.arm / f"rep{run.replicate}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(run.to_json(), indent=2, sort_keys=True))
        mark = "" if run.complete else f" [red]INCOMPLETE ({run.failure['kind'] if run.failure else ''})[/]"
        err_console.print(f"{run.arm} rep {run.replicate}: killed {len(run.killed)}/{len(run.survivors0)} "
                          f"({run.stop_reason}){mark}")

    with KillOracle(module, settings, root=root, store=result_store, workers=workers) as oracle:
        with _progress(len(mutants), "round 0") as advance:
            r0 = evaluate_round0(oracle, mutants, suite0, progress=advance)
        result = run_compare(oracle, mutants, r0, arms, replicates, HardeningConfig(max_rounds, max_shown, seed),
                             client_for=client_for, n_boot=n_boot, on_run=on_run)
    verify(output / "prereg.json")
    data = {**result.to_json(), "prereg_sha256": prereg["sha256"], "hypotheses": hyps,
            "llm": ledger.to_dict()}
    (output / "compare.json").write_text(json.dumps(data, indent=2, sort_keys=True))
    if as_json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        _render_compare(data, output)
    if not data["complete"]:
        bad = [n for n, s in data["arms"].items() if s["status"] != "ok"]
        err_console.print(f"[bold red]incomplete arms:[/] {', '.join(bad)} (see 'incomplete' in compare.json)")
        raise typer.Exit(1)


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _render_compare(data: dict[str, Any], output: Path) -> None:
    console.print(f"round 0: {data['mutants_total']} mutants, {data['round0_killed']} killed, "
                  f"{data['round0_survivors']} survive (timeouts {data['round0_timeouts']}, errors "
                  f"{data['round0_errors']}); pre-registration {data['prereg_sha256'][:12]}")
    table = Table(title=f"kill rate of round-0 survivors over {data['replicates']} replicates "
                        f"[{int(data['level'] * 100)}% cluster bootstrap]")
    for col in ("arm", "status", "done", "kill rate [interval]", "killed", "USD/kill", "tokens", "LLM failures"):
        table.add_column(col)
    for name, s in data["arms"].items():
        ci = s["kill_rate_ci"]
        rate = _fmt(s["kill_rate"]) + (f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "")
        table.add_row(name, s["status"], f"{s['complete_replicates']}/{s['replicates']}", rate, str(s["killed"]),
                      _fmt(s["cost_per_killed_usd"], 5), str(s["tokens"]["total"]),
                      ", ".join(f"{k} {v}" for k, v in s["llm_failures"].items()) or "-")
    console.print(table)
    for name, s in data["arms"].items():
        rejected = ", ".join(f"{k} {v}" for k, v in s["rejected_additions"].items()) or "none"
        console.print(f"{name}: rejected rounds {s['rejected_rounds']}; rejected additions: {rejected}")
    for label, d in data["differences_to_control"].items():
        ci = d["ci"]
        console.print(f"{label}: {_fmt(d['difference'])} [{_fmt(ci[0]) if ci else 'n/a'}, "
                      f"{_fmt(ci[1]) if ci else 'n/a'}] over {d['replicates']} paired replicates")
    console.print(f"results: {output / 'compare.json'}")
