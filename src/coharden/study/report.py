"""The report of the real-bugs study, computed only from the step records.

:func:`~coharden.study.summary.summarize` turns the rows of :class:`~coharden.study.real_bugs.RealBugsStudy`
into plain numbers (a JSON document); :func:`~coharden.study.report_sections.render` writes them as Markdown;
``plots`` draws PNG figures when matplotlib is installed; ``write_report`` puts it all in a folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coharden.analysis import figures, stats
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.schema.estimate import clopper_pearson
from coharden.schema.mpe_config import PAPER_TAU
from coharden.study.real_bugs import WARM_UP, RealBugsStudy, StudyConfig
from coharden.study.report_sections import headline, render
from coharden.study.split import split_rule
from coharden.study.summary import CLASS_ORDER, summarize


def _draw(config: StudyConfig) -> str:
    """How the mutants were drawn and the class decided."""
    mpe = config.mpe
    if mpe.paper_classes:
        return f"{mpe.per_operator} mutants per operator, class by the paper's point rule (--paper-classes)"
    if mpe.is_sequential:
        return (f"sequential MPE (stratified seeded rounds, stopped when the {mpe.confidence:g} Clopper-Pearson "
                f"interval lies on one side of tau, at most {mpe.max_mutants or 'the whole pool'} mutants)")
    return f"at most {mpe.per_operator} mutants per operator, class from the {mpe.confidence:g} interval"


def _warm_up(settings: Settings, config: StudyConfig, repos: Sequence[str]) -> str:
    """What the fork servers preload: the settings' modules, or the study's per-repository defaults."""
    if settings.server.preload or not config.warm_defaults:
        return ", ".join(settings.server.preload) or "-"
    named = [f"{', '.join(WARM_UP[r]['preload'])} for {r.split('/')[1]}" for r in repos if r in WARM_UP]
    return "; ".join(named) or "-"


def _points_by_class(summary: dict[str, Any], systems: Sequence[str]) -> list[tuple[str, list[float], list[float]]]:
    """(class, x, y) of the laxity plot: one series per class in the reports' class order (Borderline its own),
    x the system's column with a small jitter so equal laxities stay visible."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for i, system in enumerate(systems):
        entry = summary["systems"][system]
        values = entry["laxities"]
        classes = entry.get("laxity_classes") or ["F->P"] * len(values)  # a summary written before the classes
        for k, (value, name) in enumerate(zip(values, classes, strict=True)):
            xs, ys = series.setdefault(name, ([], []))
            xs.append(i + 1 + ((k % 7) - 3) * 0.03)
            ys.append(value)
    order = [c for c in CLASS_ORDER if c in series] + sorted(c for c in series if c not in CLASS_ORDER)
    return [(name, *series[name]) for name in order]


def plots(summary: dict[str, Any], directory: Path, systems: Sequence[str]) -> dict[str, str]:
    """PNG figures (laxity per system; laxity vs acceptance of real wrong fixes); {} without matplotlib."""
    data = [summary["systems"][s]["laxities"] for s in systems]
    if not any(data):  # no system test graded (e.g. only the imitation phase ran): no empty figure
        return {}
    try:
        fig = figures.figure(6, 3.2, layout="tight")
    except CoHardenError:
        return {}
    directory.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    ax = fig.subplots()
    for name, x, y in _points_by_class(summary, systems):
        ax.scatter(x, y, s=16, alpha=0.85, color=figures.CLASS_COLORS.get(name, "#000000"), label=name,
                   marker=figures.CLASS_MARKERS.get(name, "o"), edgecolors="#5d4037", linewidths=0.4)
    tau = summary.get("tau", PAPER_TAU)
    ax.axhline(tau, color="grey", linestyle="--", linewidth=1)
    ax.text(len(systems) + 0.45, tau + 0.02, f"tau = {tau}", fontsize=8, color="grey", ha="right")
    ax.set_xticks(range(1, len(systems) + 1), systems)
    ax.set_xlim(0.5, len(systems) + 0.5)
    ax.set_ylabel("laxity")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Laxity of F->P tests (sympy, mechanical mutants)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False, title="class",
              title_fontsize=7)
    figures.save(fig, directory / "real_bugs_laxity.png", dpi=120)
    made["laxity"] = "real_bugs_laxity.png"
    rows = [r for r in summary["wrong"]["rows"] if r["accepts"] is not None and r["laxity"] is not None]
    if rows:
        fig = figures.figure(6, 2.8, layout="tight")
        ax = fig.subplots()
        for flag, color, label in ((False, "tab:blue", "rejects the wrong fix"),
                                   (True, "tab:red", "accepts the wrong fix")):
            xs = [r["laxity"] for r in rows if r["accepts"] is flag]
            ys = [(1 if flag else 0) + ((k % 5) - 2) * 0.04 for k in range(len(xs))]
            ax.scatter(xs, ys, s=18, color=color, label=label, alpha=0.8)
        ax.axvline(tau, color="grey", linestyle="--", linewidth=1)
        ax.set_yticks([0, 1], ["rejects", "accepts"])
        ax.set_xlabel("laxity (mechanical mutants)")
        ax.set_xlim(-0.05, 1.05)
        ax.set_title("Real wrong fixes (mini-swe-agent) vs laxity")
        figures.save(fig, directory / "real_bugs_validity.png", dpi=120)
        made["validity"] = "real_bugs_validity.png"
    return made


def jsonable(obj: Any) -> Any:
    """The summary as plain JSON data (dataclasses such as Share / Validity become dicts)."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        data = {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if isinstance(obj, stats.Share):
            data["rate"] = obj.rate
            data["interval"] = list(clopper_pearson(obj.hits, obj.total)) if obj.total else None
        return data
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj


def write_report(study: RealBugsStudy, rows: dict[str, list[dict[str, Any]]], output: Path) -> dict[str, Any]:
    """Write ``real_bugs_report.md``, ``summary.json``, the step rows (``rows/*.jsonl``) and the plots of
    ``study``'s run (its data, settings and configuration) into ``output``; return the summary (JSON data, with
    ``headline``). The steps a report-only run found no record for (``study.missing``) make the report say it is
    partial."""
    import json
    import os
    import platform

    from coharden.execution.verdict_cache import environment_id

    data, settings, config, missing = study.data, study.settings, study.config, study.missing
    output.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows, data, config.systems, config.mpe.tau)
    made = plots(summary, output, config.systems)
    env = (["", "spec environments", "per instance"] if data.spec_envs
           else environment_id(settings.environment.python).split())
    repos = sorted({data.instances[i].repo for i in data.study_ids})
    settings_text = [
        f"data: the data directory's files ({len(data.study_ids)} study instances = `{data.env_field}` in "
        f"`{data.env_source}` and in SWT-bench Verified; repositories: {', '.join(repos) or '-'})",
        f"test interpreter: Python {env[1]}, pytest {env[2] if len(env) > 2 else '?'}; "
        f"timeout {settings.sandbox.timeout:.0f} s, memory limit {settings.sandbox.memory_mb} MB, fork server "
        f"{'on' if settings.server.fork_server else 'off'} (preload {_warm_up(settings, config, repos)})",
        f"mutant pool: mechanical operators {', '.join(config.mpe.operators)}; "
        f"{_draw(config)} (seed {config.mpe.seed}); tau = {config.mpe.tau}; split: {config.split} "
        f"({split_rule()}); "
        f"{config.workers} MPE workers; checked-hash bytecode (PEP 552) kept in the checkouts for: "
        f"{', '.join(config.bytecode) or 'nothing'} (rows made without it are marked in section 7)",
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} cores (shared with other work "
        "during the run, so times are upper bounds)",
        f"store: `{Path(settings.store).name}`; steps resumed from it: "
        + ", ".join(f"{k} {sum(1 for r in v if r.get('resumed'))}/{len(v)}" for k, v in rows.items()),
    ]
    if missing:
        settings_text.append("**partial report**: steps with no record in the store (report-only run): "
                             + ", ".join(f"{k} {n}" for k, n in sorted(missing.items())))
    text = render(summary, rows, data, settings_text=settings_text, plots=made)
    if rows.get("imitation"):  # study/imitation.py
        from coharden.study.imitation_report import render_imitation
        from coharden.study.imitation_summary import summarize_imitation

        ops = [str(op) for op in config.mpe.operators]
        summary["imitation"] = summarize_imitation(rows["imitation"], ops, config.mpe.tau, rows.get("fix", []),
                                                   config.mpe.confidence)
        if "llm" not in summary["imitation"]:  # the study's pool is mechanical unless a model is configured
            summary["imitation"]["llm_skipped"] = config.llm_skipped or "no model configured; the pool is mechanical"
        text += "\n" + "\n".join(render_imitation(summary["imitation"], ops, config.mpe.per_operator))
    (output / "real_bugs_report.md").write_text(text + "\n")
    (output / "rows").mkdir(exist_ok=True)
    for kind, kind_rows in rows.items():
        with (output / "rows" / f"{kind}.jsonl").open("w") as handle:
            for row in kind_rows:
                handle.write(json.dumps(row, sort_keys=True) + "\n")
    result = jsonable(summary)
    result["headline"] = headline(summary, rows, config.systems)
    result["plots"] = made
    (output / "summary.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result
