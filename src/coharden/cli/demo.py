"""``coharden demo loop``: the CoHarden loop on a bundled example, offline, against the mock LLM server with
scripted replies (see :mod:`coharden.loop.demo`). Mounted on the main app by :mod:`coharden.cli.main`."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coharden.cli.common import cli_errors, console, err_console, new_app, settings_from
from coharden.cli.options import ConfigOpt, JsonOpt, output_option
from coharden.errors import CoHardenError

if TYPE_CHECKING:
    from coharden.loop.engine import LoopResult

EXPLAIN = {
    "lax_init": "t0: a first test, aimed at the most visible symptom; fails on the buggy code",
    "regression": "t_k passes wrong fixes t_ref rejects (laxity > tau): back to t0, the fix is kept",
    "clean": "laxity <= tau and the test changed: the loop returns (t_k, c_k)",
    "unchanged": "the test did not change: retry with the surviving mutants as feedback",
    "inconclusive": "no admissible mutant: the check is skipped",
    "gate_failed": "the submission failed the F->P gate",
}

demo_app = new_app(help="Offline demonstrations on the bundled examples (no model, no key, no network; --live: the "
                   "local model of scripts/local-model serve).")


@demo_app.command("loop")
@cli_errors
def demo_loop(
    example: Annotated[Path | None, typer.Argument(
        help="A bundled example with scripted replies (loop-replies.yaml); default: examples/boundary_check, "
             "here or in coharden's checkout.", show_default=False)] = None,
    replies: Annotated[Path | None, typer.Option("--replies", help="Another rules file for the mock model "
                                                 "(default: the example's loop-replies.yaml).")] = None,
    output: Annotated[Path | None, output_option(help="Keep the run here (state, rounds, "
                                                "trajectories); default: a temporary directory.")] = None,
    live: Annotated[bool, typer.Option("--live", help="The real local model instead of scripted replies: "
                                       "needs scripts/local-model serve running (one joint round, 5 agent steps "
                                       "a run; minutes per reply). Says so and stops when it is not running.")]
    = False,
    api_base: Annotated[str | None, typer.Option("--api-base", help="--live: the local server (default "
                                                 "$OPENAI_BASE_URL, else http://127.0.0.1:8765/v1).")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The CoHarden loop on a bundled example against the mock LLM server, whose scripted replies play the
    model, each chosen by what the request says: round 0 writes a lax test, round 1 fixes the bug with a test
    of another input (a regression at the loop's tau), round 2 reacts to the wrong fixes the feedback shows
    with a rigorous test (clean). Shows each round's decision, temporal matrix and laxity. Takes a minute or
    two. Exit status 1, with the first real cause, when the loop does not end as scripted."""
    from coharden.loop.demo import (
        DEMO_CONFIG,
        DEMO_DECISION,
        DemoRun,
        check_live_server,
        find_example,
        first_cause,
        local_base,
        run_demo,
        run_live,
    )
    from coharden.loop.progress import LoopProgress

    def show(event: LoopProgress) -> None:
        if not as_json and event.phase in ("agent", "mutants"):
            err_console.print(f"  {event.describe()}", highlight=False)

    example = find_example(example)
    if replies is not None and not replies.is_file():
        raise CoHardenError(f"--replies: {replies} not found")
    if live:
        if replies is not None:
            raise CoHardenError("--live plays the real model: give --replies or --live, not both")
        check_live_server(local_base(api_base))  # before any work: a clear error when it is not running
        err_console.print(f"live: the local model at {local_base(api_base)} plays the agent (minutes per reply)",
                          highlight=False)
    with tempfile.TemporaryDirectory(prefix="coharden-demo-") as tmp:
        out = output or Path(tmp)
        settings = settings_from(config, store=out / "store.sqlite", cache_dir=out / "cache", workers=1)
        demo = DemoRun(out / "run", settings, show)
        if live:
            result = run_live(example, demo, api_base=api_base)
            failure = None  # a real model has no script: any decision is the outcome
        else:
            result = run_demo(example, demo, replies=replies)
            failure = None if result.decision == DEMO_DECISION else first_cause(result, out / "run")
    rows = [{"round": r.round, "decision": r.decision, "laxity": r.laxity, "admissible": r.admissible,
             "matrix": {cell: len(ids) for cell, ids in r.matrix.items()}, "note": r.note} for r in result.rounds]
    if as_json:
        print(json.dumps({"instance_id": result.instance_id, "decision": result.decision, "tau": DEMO_CONFIG.tau,
                          "samples": DEMO_CONFIG.samples, "rounds": rows, "test": result.test, "fix": result.fix,
                          **({"failed": failure} if failure else {})}, indent=2))
    else:
        _show_rounds(result, rows, output)
    if failure:
        err_console.print(f"error: the demo loop did not end as scripted ({result.decision}): {failure}",
                          highlight=False, markup=False)
        raise typer.Exit(1)


def _show_rounds(result: LoopResult, rows: list[dict[str, Any]], output: Path | None) -> None:
    from coharden.loop.demo import DEMO_CONFIG

    table = Table(title=f"CoHarden loop on {result.instance_id} (tau = {DEMO_CONFIG.tau}, "
                        f"N = {DEMO_CONFIG.samples} mutants per operator)")
    for column in ("round", "decision", "α", "β", "γ", "δ", "laxity", "what happened"):
        table.add_column(column, overflow="fold")
    for row in rows:
        cells = [str(row["matrix"].get(c, "")) if row["matrix"] else "-" for c in ("alpha", "beta", "gamma", "delta")]
        laxity = "-" if row["laxity"] is None else f"{row['laxity']:.2f}"
        table.add_row(str(row["round"]), row["decision"], *cells, laxity,
                      row["note"] or EXPLAIN.get(row["decision"], ""))
    console.print(table)
    console.print("Each round's matrix runs its test t_k and the last accepted test t_ref against wrong variants "
                  "(mutants) of its fix: α both pass, β only t_k passes (t_k is lax there), γ only t_k fails, δ both "
                  "fail; laxity = β / (α+β+γ+δ).", highlight=False)
    console.print(f"decision: [bold]{result.decision}[/] after {len(result.rounds)} rounds; the final test:")
    print(result.test, end="" if result.test.endswith("\n") else "\n")
    if output is not None:
        console.print(f"run kept in {output / 'run'} (rounds/demo.jsonl, instances/*/state.json, trajectories)")
