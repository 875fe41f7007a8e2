"""``coharden examples check``: MPE on every bundled candidate test, compared with its hand label.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from coharden.cli.common import cli_errors, console, new_app, progress_bar
from coharden.cli.common import settings_from as _settings
from coharden.cli.mpe_options import MPEOptions, NoImpliedOpt
from coharden.cli.mpe_render import laxity_text
from coharden.cli.options import ConfigOpt, JsonOpt, StoreOpt, workers_option
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc

examples_app = new_app(help="Bundled examples: hand-labelled candidate tests for checking coharden.")


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
            table.add_row(esc(row["example"]), esc(row["candidate"]), row["expected"], row["got"],
                          laxity_text(row["laxity"], row["interval"]), f"{row['drawn']}/{row['pool']}",
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
    from coharden.mpe.evaluate import MPERequest, evaluate

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
    config = MPEOptions(no_implied=no_implied).config(settings, workers=settings.workers)
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
                result = evaluate(executor, MPERequest(inst.patch, candidate, reference, config), pool=pool)
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
