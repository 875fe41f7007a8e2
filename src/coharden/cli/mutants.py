"""``coharden mutants list`` / ``coharden mutants show ID``: the mutants of past MPE runs, from the result store
(as mutmut's ``results`` and ``show``). The layer below is imported inside the commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from coharden.cli.common import cli_errors, console, err_console, new_app
from coharden.cli.common import settings_from as _settings
from coharden.cli.options import ConfigOpt, JsonOpt, StoreOpt
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc

mutants_app = new_app(help="The mutants of past MPE runs in the result store: list them, show one by id "
                      "(INSTANCE:MUTANT) with its diff.")

TestFilterOpt = Annotated[str | None, typer.Option("--test", help="Only runs of this test (candidate name, or a "
                                                   "batch's model_name_or_path).")]


def _open(store: Path | None, config: list[str] | None):
    """The store, read as it is: a missing file is an error, never a new empty store."""
    from coharden.execution.store import Store

    path = store or _settings(config).store
    if not path.is_file():
        raise CoHardenError(f"{path}: no result store here (run `coharden mpe ... --store {path}` first, or give "
                            "--store)")
    return Store(path)


@mutants_app.command("list")
@cli_errors
def mutants_list(
    store: StoreOpt = None,
    instance: Annotated[str | None, typer.Option("--instance", help="Only mutants of this instance id.")] = None,
    test: TestFilterOpt = None,
    cell: Annotated[str | None, typer.Option("--cell", help="Only this cell: alpha, beta (the wrong fixes the test "
                                             "let through), gamma or delta.")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every mutant of the MPE runs kept in the store: id, the test that graded it, its cell, its behaviour
    (mutants no test run told apart, grouped and counted once in laxity), operator and change (a single `mpe`
    and batch runs; oldest run first, a run's mutants by behaviour)."""
    from coharden.mpe.mutants import behaviour_sizes, past_mutants

    found = past_mutants(_open(store, config), instance=instance, test=test, cell=cell)
    if as_json:
        print(json.dumps([{k: v for k, v in m.to_json().items() if k != "patch"} for m in found], indent=2))
        return
    if not found:
        err_console.print("no mutants of past runs match (a single `coharden mpe` or a batch keeps them in its "
                          "--store)")
        return
    sizes = behaviour_sizes(found)
    first: dict[tuple[str, str, str, str | None], int] = {}
    for i, m in enumerate(found):
        first.setdefault((m.when, m.instance_id, m.test, m.behaviour), i)
    # a run's mutants grouped by behaviour, each group where its first mutant was (stable sort)
    found = [m for _, m in sorted(enumerate(found), key=lambda p: (
        p[1].when, first[(p[1].when, p[1].instance_id, p[1].test, p[1].behaviour)] if p[1].behaviour else p[0]))]
    table = Table(title=f"{len(found)} mutant runs")
    # ids are kept whole on any width (they are typed back into `show`); the other columns fold
    table.add_column("id", no_wrap=True, min_width=max(len(m.id) for m in found))
    for column in ("test", "cell", "behaviour", "operator", "location", "change"):
        table.add_column(column, overflow="fold")
    for m in found:
        size = sizes.get((m.when, m.instance_id, m.test, m.behaviour or ""), 0)
        behaviour = f"{m.behaviour} (x{size})" if m.behaviour and size > 1 else (m.behaviour or "-")
        table.add_row(esc(m.id), esc(m.test), esc(m.cell), esc(behaviour), esc(m.operator), esc(m.location),
                      esc(m.description))
    console.print(table)
    console.print("show one: coharden mutants show ID", highlight=False)


mutants_app.command("results", hidden=True, help="The same as `list` (mutmut's name).")(mutants_list)


@mutants_app.command("show")
@cli_errors
def mutants_show(
    mutant_id: Annotated[str, typer.Argument(metavar="ID", help="INSTANCE:MUTANT as `list` prints it (or the "
                                             "bare mutant id when one instance alone has it).")],
    store: StoreOpt = None,
    test: TestFilterOpt = None,
    against_buggy: Annotated[bool, typer.Option("--against-buggy", help="Print the mutant as a patch of the "
                                                "buggy code (what is applied) instead of its change to the fix.")]
    = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One mutant: what it changes, the cell each test that graded it gave it, and its diff against the fixed
    code, as mutmut's ``show`` diffs against the code it mutated (``--against-buggy``: the patch of the buggy
    code that is applied). Diffs are never wrapped: they apply as printed."""
    from coharden.mpe.mutants import CELL_MEANING, find_mutant

    runs = find_mutant(_open(store, config), mutant_id, test=test)
    if as_json:
        print(json.dumps([m.to_json() for m in runs], indent=2))
        return
    first = runs[0]
    console.print(f"{first.id}: {first.operator} ({first.source}) at {first.location}: {first.description}",
                  highlight=False, soft_wrap=True, markup=False)
    for m in runs:
        console.print(f"  {m.run} {m.when}, test {m.test}: {m.cell} ({CELL_MEANING.get(m.cell, '?')}; candidate "
                      f"{m.candidate or '-'}, reference {m.reference or '-'})", highlight=False, soft_wrap=True,
                      markup=False)
    changes = [m.change for m in runs]
    if not against_buggy and all(changes):
        patches = list(dict.fromkeys(changes))
        err_console.print("the change to the fixed code (--against-buggy: the applied patch)", style="dim",
                          highlight=False)
    else:
        if not against_buggy:
            err_console.print("note: stored before mutants kept their change to the fix: the patch of the buggy "
                              "code follows", highlight=False)
        patches = list(dict.fromkeys(m.patch for m in runs))
    if len(patches) > 1:
        err_console.print(f"note: {len(patches)} different diffs under this id (runs of different pools)")
    for patch in patches:
        print(patch, end="" if patch.endswith("\n") else "\n")
