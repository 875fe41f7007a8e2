"""``coharden suite compare``: arms (no critic, critic models) x replicates from one frozen round 0, pre-registered,
with kill-rate intervals.

Mounted on the ``suite`` group by :mod:`coharden.cli.main`; the layers below are imported inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coharden.cli.command import renamed_flags
from coharden.cli.common import cli_errors, console, err_console
from coharden.cli.common import settings_from as _settings
from coharden.cli.options import ConfigOpt, JsonOpt, output_option, ranged
from coharden.cli.suite import (
    SUITE_RENAMED,
    HardeningOptions,
    ModuleArg,
    hardening_options,
    llm_client_for,
    module_mutants,
    mutant_progress,
    read_input,
    with_seed,
)
from coharden.errors import CoHardenError

if TYPE_CHECKING:
    from coharden.config import LLMSettings
    from coharden.suite.compare import CompareDesign


def _parse_arms(specs: list[str]) -> list[Any]:
    """``--arm none`` / ``--arm NAME=MODEL`` / ``--arm FILE``, an arms YAML file: a list of ``{name, <LLMConfig
    fields>}``; in the order given."""
    import yaml
    from pydantic import ValidationError

    from coharden.llm import LLMConfig
    from coharden.suite.compare import Arm

    arms: list[Arm] = []
    raw: list[dict[str, Any]] = []
    for spec in specs:
        if Path(spec).is_file():
            data = yaml.safe_load(read_input(Path(spec), "--arm"))
            data = data.get("arms") if isinstance(data, dict) else data
            if not isinstance(data, list) or not all(isinstance(a, dict) and "name" in a for a in data):
                raise CoHardenError(f"{spec}: expected a list of arms, each a mapping with `name`")
            raw += data
        elif spec == "none":
            raw.append({"name": "none"})
        elif "=" in spec:
            name, model = spec.split("=", 1)
            raw.append({"name": name.strip(), "model": model.strip()})
        else:
            raise CoHardenError(f"--arm {spec!r}: use 'none', NAME=MODEL or an arms YAML file")
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
        raise CoHardenError("give arms: --arm none --arm A=MODEL ... or --arm FILE")
    return arms


@cli_errors
@hardening_options
@renamed_flags(*SUITE_RENAMED)
def compare_cmd(
    module: ModuleArg,
    round0: Annotated[Path, typer.Option("--round0", help="The frozen round-0 suite every arm starts from.")],
    arm: Annotated[list[str] | None, typer.Option("--arm", "--arms", help="'none' (control), NAME=MODEL, or a "
                                                  "YAML file listing arms ({name, model, api_base, temperature, "
                                                  "cost_overrides, ...}); repeat. The first arm is the control "
                                                  "for the differences.")] = None,
    replicates: Annotated[int, ranged("--replicates", "-r", help="Replicates per arm.", lo=1)] = 5,
    hypotheses: Annotated[Path | None, typer.Option("--hypotheses", help="Hypotheses (YAML list or one per "
                                                    "line); default: each arm beats the control.")] = None,
    n_boot: Annotated[int, ranged("--n-boot", help="Bootstrap resamples.", lo=100)] = 2000,
    hardening: HardeningOptions = HardeningOptions(),
    output: Annotated[Path, output_option(help="Output directory.")] = Path("suite-compare"),
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Arms (no critic, critic model A, B, ...) x replicates from one frozen round 0, with kill-rate intervals.

    The pre-registration (config + hypotheses, hashed) is written to OUTPUT/prereg.json before any test runs.
    Exit status 1 when an arm has incomplete replicates (LLM failures), which are reported, never scored."""
    from coharden.execution.store import Store
    from coharden.llm import Ledger
    from coharden.suite.compare import CompareDesign, run_compare
    from coharden.suite.loop import HardeningStart, evaluate_round0
    from coharden.suite.prereg import default_hypotheses, load_hypotheses, preregister, verify
    from coharden.suite.runner import KillOracle

    settings = _settings(config)
    hardening = with_seed(hardening, settings)
    arms = _parse_arms(list(arm or []))
    suite0 = read_input(round0, "--round0")
    mutants, rel = module_mutants(module, hardening)
    hyps = load_hypotheses(hypotheses) if hypotheses else default_hypotheses([a.name for a in arms])
    result_store = Store(settings.store)
    design = CompareDesign(arms, replicates, hardening.rounds(), n_boot=n_boot)
    plan = {**_compared(module, rel, suite0, mutants, hardening), **_scoring(design, settings.llm)}
    output.mkdir(parents=True, exist_ok=True)
    prereg = preregister(output / "prereg.json", plan, hyps, store=result_store)
    ledger = Ledger()  # one ledger for every arm: --budget-usd caps the whole comparison

    def client_for(a: Any) -> Any:
        if a.llm is None:
            return None
        return llm_client_for(None, settings, ledger,
                              overrides={k: v for k, v in a.llm.model_dump().items() if v is not None})

    def on_run(run: Any) -> None:
        path = output / "runs" / run.arm / f"rep{run.replicate}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(run.to_json(), indent=2, sort_keys=True))
        mark = "" if run.complete else f" [red]INCOMPLETE ({run.failure['kind'] if run.failure else ''})[/]"
        err_console.print(f"{run.arm} rep {run.replicate}: killed {len(run.killed)}/{len(run.survivors0)} "
                          f"({run.stop_reason}){mark}")

    with KillOracle(module, settings, root=hardening.root, store=result_store, workers=hardening.workers) as oracle:
        with mutant_progress(len(mutants), "round 0") as advance:
            r0 = evaluate_round0(oracle, mutants, suite0, progress=advance)
        result = run_compare(HardeningStart(oracle, mutants, r0), design, client_for=client_for, on_run=on_run)
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


def _compared(module: Path, rel: str, suite0: str, mutants: list[Any], hardening: HardeningOptions) -> dict[str, Any]:
    """The pre-registered plan's first half: what is compared, on which inputs (hashed), with which mutants."""
    import hashlib

    from coharden import __version__

    return {
        "coharden": __version__, "module": rel, "module_sha256": hashlib.sha256(module.read_bytes()).hexdigest(),
        "round0_sha256": hashlib.sha256(suite0.encode()).hexdigest(), "engine": hardening.engine,
        "operators": hardening.operators, "max_mutants": hardening.max_mutants, "mutants": len(mutants),
        "mutant_ids_sha256": hashlib.sha256(",".join(f"{m.id}:{m.sha256}" for m in mutants).encode()).hexdigest(),
    }


def _scoring(design: CompareDesign, llm: LLMSettings) -> dict[str, Any]:
    """The pre-registered plan's second half: the arms (reached as ``llm``, the settings' LLM section, says,
    under its cost cap), the rounds and replicates, and how the comparison is scored."""
    return {
        "arms": [a.describe() for a in design.arms], "api_base": llm.api_base, "replicates": design.replicates,
        "max_rounds": design.hardening.max_rounds, "max_shown": design.hardening.max_shown,
        "seed": design.hardening.seed, "n_boot": design.n_boot, "level": design.level,
        "budget_usd": llm.budget_usd,
        "metrics": {"kill_rate": "killed round-0 survivors / round-0 survivors, pooled over complete replicates",
                    "interval": "cluster bootstrap over replicates, percentile, seeded",
                    "cost_per_killed": "LLM USD of the arm / killed mutants"},
    }


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
