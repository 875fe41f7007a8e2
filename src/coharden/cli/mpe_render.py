"""What ``coharden mpe`` prints: for one MPE the verdicts, the frame, the mutant sources and the shown mutants;
for a batch the run log's line of each finished prediction and the summary.

Every string from the instance, the tests or the mutants (ids, names, reasons, notes, descriptions) goes through
:func:`coharden.escaping.for_rich` where it meets Rich markup."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from coharden.cli.common import console, print_counts, print_diff
from coharden.escaping import for_rich as esc
from coharden.mutation.diff_view import folded


def render_mpe(result, show: int) -> None:
    table = Table(title=f"MPE {esc(result.instance_id)}: test {esc(repr(result.test))} vs reference "
                        f"{esc(repr(result.reference))}")
    for col in ("", "buggy", "fixed"):
        table.add_column(col)
    table.add_row("candidate", esc(result.candidate_buggy.short()[:80]), esc(result.candidate_fixed.short()[:80]))
    table.add_row("reference", esc(result.reference_buggy.short()[:80]), esc(result.reference_fixed.short()[:80]))
    console.print(table)
    if result.fail_to_pass:
        counts = result.matrix.counts()
        matrix = Table(title="matrix (candidate x reference over admissible mutants"
                             f"{', plausible ones' if result.plausibility.get('measured') else ''})")
        matrix.add_column("")
        matrix.add_column("reference PASS")
        matrix.add_column("reference FAIL")
        matrix.add_row("candidate PASS", f"alpha {counts['alpha']}", f"[bold red]beta {counts['beta']}[/]")
        matrix.add_row("candidate FAIL", f"gamma {counts['gamma']}", f"delta {counts['delta']}")
        console.print(matrix)
        if result.counted == "behaviours":
            b = result.behaviour_matrix.counts()
            console.print(f"distinct behaviours: {result.behaviour_matrix.admissible} (alpha {b['alpha']}, beta "
                          f"{b['beta']}, gamma {b['gamma']}, delta {b['delta']}): mutants no test run tells apart "
                          "count once")
        ops = Table(title=f"per operator (laxity [{result.confidence:g} interval])")
        per_operator = result.per_operator()
        # operator names whole (they are typed back into --operators); the reasons column folds instead
        ops.add_column("operator", no_wrap=True, min_width=max((len(op) for op in per_operator), default=8))
        for col in ("pool", "drawn", "admissible", "alpha", "beta", "gamma", "delta", "laxity"):
            ops.add_column(col)
        ops.add_column("inadmissible", overflow="fold")
        for op, row in per_operator.items():
            inad = esc(", ".join(f"{k} {v}" for k, v in row["inadmissible"].items()) or "-")
            ops.add_row(esc(op), str(row.get("pool", "-")), str(row["total"]),
                        *(str(row[k]) for k in ("admissible", "alpha", "beta", "gamma", "delta")),
                        laxity_text(row["laxity"], row["interval"]), inad)
        console.print(ops)
        console.print(_frame_text(result))
        dropped = result.pool.get("dropped", {})
        if dropped:
            console.print("dropped before running: " + esc("; ".join(
                f"{op}: " + ", ".join(f"{k} {v}" for k, v in reasons.items()) for op, reasons in dropped.items())))
        _render_sources(result)
    if result.runs:
        console.print("runs: " + "; ".join(f"{role} {row['made']} made, {row['cached']} from the store, "
                                           f"{row['implied']} implied, {row.get('not_needed', 0)} not needed"
                                           for role, row in result.runs.items())
                      + (f"; flaky on the fixed code: {esc(', '.join(result.flaky))}" if result.flaky else ""))
    if result.candidate_timeouts:
        console.print(f"candidate timeouts on mutants: {result.candidate_timeouts} (limit "
                      f"{result.time_limits.get('candidate', 0):g} s; inadmissible, not counted in laxity)")
    for note in result.tampering:
        console.print(f"[bold yellow]tampering:[/] {esc(note)}", highlight=False)
    if result.pool_complete:  # else the caller says why there is no class, once
        laxity = "n/a" if result.laxity is None else result.estimate().text()
        if result.counted == "behaviours" and result.laxity is not None:
            per_mutant = "-" if result.mutant_laxity is None else f"{result.mutant_laxity:.3f}"
            laxity += (f" over {result.behaviour_matrix.admissible} behaviours (per mutant {per_mutant} over "
                       f"{result.matrix.admissible})")
        rule = "point rule (--paper-classes)" if result.point_classes else f"{result.confidence:g} interval"
        why = f" ({result.undecided})" if result.undecided else ""
        console.print(f"laxity: [bold]{laxity}[/] (tau {result.tau}, class by the {rule})   class: "
                      f"[bold]{result.test_class.value}[/]{esc(why)}")
        if result.undecided == "pool_too_small":
            console.print("every mutant of the pool ran and the interval still contains tau: the pool is too small "
                          "to decide (more operators or LLM mutants would add to it)")
        if result.test_class.value == "Inconclusive" and result.fail_to_pass:
            console.print(_inconclusive_text(result), highlight=False, markup=False)
    for warning in result.warnings:
        console.print(f"[bold yellow]warning:[/] {esc(warning)}", highlight=False)
    lax = _one_per_behaviour(result.lax_mutants())
    if lax and show:
        console.print(f"\n[bold]wrong fixes the test lets through[/] ({len(lax)}; showing {min(show, len(lax))}"
                      "; each as its change to the fixed code):")
        for mr, same in lax[:show]:
            more = f" (and {same} more of the same behaviour)" if same else ""
            console.print(f"[bold]{esc(mr.mutant.id)}[/] {esc(mr.mutant.description)} @ {esc(mr.mutant.location)}"
                          f"{more}", highlight=False)
            print_diff(folded(mr.mutant.change or mr.mutant.patch))


def _inconclusive_text(result) -> str:
    """Why no laxity: an empty pool (with why its candidates were dropped) or no admissible mutant (with what made
    them inadmissible, summed over the operators)."""
    if result.undecided == "empty_pool":
        dropped: dict[str, int] = {}
        for reasons in result.pool.get("dropped", {}).values():
            for reason, n in reasons.items():
                dropped[reason] = dropped.get(reason, 0) + n
        why = ("; candidates dropped: " + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()))) if dropped \
            else ""
        return f"Inconclusive: the pool is empty, no operator made a mutant of this fix{why}; laxity undefined"
    counts: dict[str, int] = {}
    for row in result.per_operator().values():
        for reason, n in row["inadmissible"].items():
            counts[reason] = counts.get(reason, 0) + n
    why = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "none counted"
    return f"Inconclusive: none of the {len(result.mutants)} mutants run was admissible ({why}); laxity undefined"


def _one_per_behaviour(results: list) -> list[tuple]:
    """The first mutant of each behaviour with how many more share it (every mutant alone without behaviours)."""
    seen: dict[object, list] = {}
    for mr in results:
        seen.setdefault(mr.behaviour or mr.mutant.id, []).append(mr)
    return [(members[0], len(members) - 1) for members in seen.values()]


def laxity_text(laxity: float | None, interval: list[float] | None) -> str:
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
    implausible = sum(row.get("implausible", 0) for row in result.frame.values())
    measured = result.plausibility
    plausible = (f", implausible {implausible} (broke one of {measured['tests']} PASS_TO_PASS tests)"
                 if measured.get("measured") else "")
    return (f"sampling frame: pool {pool}, drawn {drawn}{plausible}, admissible {result.matrix.admissible} ({how}"
            f"{'; the whole pool ran' if result.census else ''})")


def _render_sources(result) -> None:
    """Per-source counts and the LLM pool (samples, rejections, usage), when the LLM mutator ran."""
    if result.llm_pool is None:
        return
    sources = Table(title="per source")
    for col in ("source", "total", "admissible", "alpha", "beta", "gamma", "delta"):
        sources.add_column(col)
    for source, row in result.per_source().items():
        sources.add_row(esc(source), *(str(row[k]) for k in ("total", "admissible", "alpha", "beta", "gamma", "delta")))
    console.print(sources)
    llm = Table(title=f"LLM pool ({esc(result.llm_pool['model'])})")
    for col in ("operator", "wanted", "attempts", "admitted", "rejected", "failed", "tokens in/out", "USD"):
        llm.add_column(col)
    usage = result.llm_usage.get("per_operator", {})
    for op, row in result.llm_pool["per_operator"].items():
        u = usage.get(op, {})
        llm.add_row(esc(op), str(row["wanted"]), str(row["attempts"]), str(row["admitted"]),
                    esc(", ".join(f"{k} {v}" for k, v in row["rejected"].items()) or "-"),
                    esc(", ".join(f"{k} {v}" for k, v in row["failed"].items()) or "-"),
                    f"{u.get('prompt_tokens', 0)}/{u.get('completion_tokens', 0)}", f"{u.get('cost_usd', 0.0):.4f}")
    console.print(llm)


def finished_line(done: int, total: int, row: dict) -> str:
    """The run log's line for one finished prediction (stderr not a terminal: no progress bar to show it)."""
    from coharden.mpe.logs import number

    what = f"{row.get('instance_id')} ({row.get('model_name_or_path')})"
    if row.get("not_graded"):
        verdict = "not graded (no such instance)"
    elif "error" in row:
        verdict = f"error: {str(row['error']).removeprefix(str(row.get('instance_id')) + ': ')}"
    else:
        verdict = str(row.get("test_class") or "?")
        if row.get("laxity") is not None:
            verdict += f", laxity {number(row.get('laxity'))}"
    if row.get("log_error"):
        verdict += f"; {row['log_error']}"
    timings = row.get("timings")
    seconds = timings.get("total") if isinstance(timings, dict) else None
    took = f" ({number(seconds, '.0f')}s)" if isinstance(seconds, int | float) else ""
    return f"[{done}/{total}] {what}: {verdict}{took}"


def render_batch(summary: dict, output: Path) -> None:
    """The batch's summary on stdout: the classes, where its logs and report are, Rigorous / Lax by cutoff and the
    time per stage."""
    print_counts(f"MPE over {summary['total']} predictions ({output / 'mpe.jsonl'})", ("class", "tests"),
                 summary["classes"])
    console.print(f"per-instance logs: {summary['logs']}/MODEL/INSTANCE_ID/", highlight=False, markup=False)
    console.print(f"run report: {output / 'report.json'}; store: {summary['store']}", highlight=False,
                  markup=False)
    cut_table = Table(title="Rigorous / Lax by cutoff (F->P tests)")
    for col in ("cutoff", "Rigorous", "Lax"):
        cut_table.add_column(col)
    for row in summary["cutoffs"]:
        cut_table.add_row(str(row["cutoff"]), str(row["Rigorous"]), str(row["Lax"]))
    console.print(cut_table)
    if summary["stage_seconds"]:
        console.print("time per stage: " + ", ".join(f"{k} {v:.1f}s" for k, v in summary["stage_seconds"].items()))
