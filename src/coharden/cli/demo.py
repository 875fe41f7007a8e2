"""``coharden demo loop``: the CoHarden loop on a bundled example, offline, against the mock LLM server with
scripted replies (see :mod:`coharden.loop.demo`). Mounted on the main app by :mod:`coharden.cli.main`."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from coharden.cli.common import cli_errors, console, err_console, new_app, settings_from
from coharden.cli.options import ConfigOpt, JsonOpt

EXPLAIN = {
    "lax_init": "t0: a first test, aimed at the most visible symptom; fails on the buggy code",
    "regression": "t_k passes wrong fixes t_ref rejects (laxity > tau): back to t0, the fix is kept",
    "clean": "laxity <= tau and the test changed: the loop returns (t_k, c_k)",
    "unchanged": "the test did not change: retry with the surviving mutants as feedback",
    "inconclusive": "no admissible mutant: the check is skipped",
    "gate_failed": "the submission failed the F->P gate",
}

demo_app = new_app(help="Offline demonstrations on the bundled examples (no model, no key, no network).")


@demo_app.command("loop")
@cli_errors
def demo_loop(
    example: Annotated[Path, typer.Argument(help="A bundled example with scripted replies (loop-replies.yaml).")
                       ] = Path("examples/boundary_check"),
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Keep the run here (state, rounds, "
                                                "trajectories); default: a temporary directory.")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The CoHarden loop on a bundled example against the mock LLM server, whose scripted replies play the
    model: round 0 writes a lax test, round 1 fixes the bug with a weaker test (regression), round 2 writes a
    rigorous test (clean). Shows each round's decision, temporal matrix and laxity. Takes a minute or two."""
    from coharden.loop.demo import DEMO_CONFIG, run_demo
    from coharden.loop.progress import LoopProgress

    def show(event: LoopProgress) -> None:
        if not as_json and event.phase in ("agent", "mutants"):
            err_console.print(f"  {event.describe()}", highlight=False)

    with tempfile.TemporaryDirectory(prefix="coharden-demo-") as tmp:
        out = output or Path(tmp)
        settings = settings_from(config, store=out / "store.sqlite", cache_dir=out / "cache", workers=1)
        result = run_demo(example, out / "run", settings, progress=show)
    rows = [{"round": r.round, "decision": r.decision, "laxity": r.laxity, "admissible": r.admissible,
             "matrix": {cell: len(ids) for cell, ids in r.matrix.items()}, "note": r.note} for r in result.rounds]
    if as_json:
        print(json.dumps({"instance_id": result.instance_id, "decision": result.decision, "tau": DEMO_CONFIG.tau,
                          "rounds": rows, "test": result.test, "fix": result.fix}, indent=2))
        return
    table = Table(title=f"CoHarden loop on {result.instance_id} (tau = {DEMO_CONFIG.tau}, every mutant)")
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
