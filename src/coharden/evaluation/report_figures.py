"""The evaluation report's figures, drawn from its JSON document: rounds, laxity histograms, matrix cells, cost,
test injection. They need matplotlib (``pip install 'coharden[report]'``) and are drawn on
:class:`matplotlib.figure.Figure` objects with the Agg canvas, never through pyplot, so no global backend state is
touched."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coharden.analysis.figures import CLASS_COLORS, CLASS_HATCHES, shared_count_limit
from coharden.analysis.figures import figure as _figure
from coharden.analysis.figures import png as _png
from coharden.evaluation.metrics import CELLS, CLASSES

CELL_COLORS = {"alpha": "#64b5f6", "beta": "#ef5350", "gamma": "#66bb6a", "delta": "#bdbdbd"}


def _round_axis(ax, rounds: Sequence[int]) -> None:
    """Rounds are whole numbers: one tick per round (a locator would give 0.5 steps around a single round)."""
    from matplotlib.ticker import MaxNLocator

    values = sorted(set(rounds))
    if not values:
        return
    if len(values) <= 20:
        ax.set_xticks(values)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(values[0] - 0.6, values[-1] + 0.6)


def _count_axis(ax) -> None:
    """Counts and costs are never negative: the axis starts at 0 (also when every value is 0)."""
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top if top > 0 else 1)


def _legend_below(fig, *axes, ncols: int = 4) -> None:
    """One legend for the figure, outside the axes (below them), so it covers no data: the entries of every axis
    in ``axes``, each label once (two runs of one name, or one series drawn on two axes, would repeat it)."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(list(entries.values()), list(entries), loc="outside lower center",
                   ncols=min(ncols, len(entries)), fontsize=7, frameon=False)


def rounds_figure(runs: dict[str, Any]):
    fig = _figure(8, 4.2)
    left, right = fig.subplots(1, 2)
    all_rounds: list[int] = []
    for name, run in runs.items():
        rounds = [r["round"] for r in run["rounds"]]
        all_rounds += rounds
        left.plot(rounds, [r["resolved_rate"] for r in run["rounds"]], marker="o", label=f"{name}: Resolved")
        left.plot(rounds, [r["fail_to_pass_rate"] for r in run["rounds"]], marker="s", linestyle="--",
                  label=f"{name}: F->P")
        right.plot(rounds, [r["active"] for r in run["rounds"]], marker="o", label=f"{name}: active")
    left.set(title="Resolved and F->P by round", xlabel="round", ylabel="share of instances", ylim=(-0.02, 1.02))
    right.set(title="Active instances by round", xlabel="round", ylabel="instances")
    for ax in (left, right):
        _round_axis(ax, all_rounds)
    _count_axis(right)
    right.yaxis.set_major_locator(_integer_locator())
    _legend_below(fig, left, right, ncols=3)
    return fig


def _integer_locator():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def plot_rounds(runs: dict[str, Any]) -> bytes:
    return _png(rounds_figure(runs))


def laxity_figure(tests: dict[str, Any], tau: float):
    """One panel per test system (same axes), each a histogram stacked by class; one legend below."""
    per_system: dict[str, dict[str, list[float]]] = {}
    for system, section in tests.items():
        values: dict[str, list[float]] = {}
        for row in section["instances"].values():
            if "error" not in row and row.get("laxity") is not None:
                values.setdefault(row["test_class"], []).append(row["laxity"])
        if values:
            per_system[system] = values
    n = max(1, len(per_system))
    fig = _figure(max(5.0, 3.2 * n), 3.8)
    axes = fig.subplots(1, n, sharey=True, squeeze=False)[0]
    bins = [i / 20 for i in range(21)]
    shown: dict[str, Any] = {}
    tops: list[float] = []
    for ax, (system, values) in zip(axes, per_system.items(), strict=False):
        names = [c for c in CLASSES if c in values]
        counts, _, patches = ax.hist([values[c] for c in names], bins=bins, stacked=True, label=names,
                                     color=[CLASS_COLORS[c] for c in names])
        tops.append(float(max(counts[-1] if len(names) > 1 else counts)))  # stacked: the last row is the total
        line = ax.axvline(tau, color="black", linestyle=":")
        containers = patches if len(names) > 1 else [patches]  # one dataset: hist returns its bars directly
        for name, bars in zip(names, containers, strict=True):
            for bar in bars:
                bar.set_hatch(CLASS_HATCHES.get(name, ""))
            shown[name] = bars[0]
        shown[f"tau = {tau}"] = line
        ax.set(title=system, xlabel="laxity (beta / admissible)", xlim=(0, 1))
        ax.yaxis.set_major_locator(_integer_locator())
    shared_count_limit(axes, tops)
    axes[0].set_ylabel("tests")
    fig.suptitle("Laxity of F->P tests, by system and class", fontsize=10)
    order = [c for c in CLASSES if c in shown] + [k for k in shown if k not in CLASSES]
    fig.legend([shown[k] for k in order], order, loc="outside lower center", ncols=min(6, len(order)), fontsize=7,
               frameon=False)
    return fig


def plot_laxity(tests: dict[str, Any], tau: float) -> bytes:
    return _png(laxity_figure(tests, tau))


CELL_LABELS = {"alpha": "alpha: both pass", "beta": "beta: lax (candidate passes)",
               "gamma": "gamma: rigor (candidate fails)", "delta": "delta: both fail"}


def matrix_groups(tests: dict[str, Any], runs: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    """(label, cell counts) per test system and per loop round that ran mutants; a round without a matrix
    (lax-init, a failed gate) has nothing to show and is left out rather than drawn as an empty bar."""
    groups: list[tuple[str, dict[str, int]]] = [(f"tests: {name}", s["summary"]["matrix"])
                                                for name, s in tests.items()]
    for name, run in runs.items():
        groups += [(f"{name} r{r['round']}", r["matrix"]) for r in run["rounds"]
                   if sum((r.get("matrix") or {}).values())]
    return groups


def matrix_figure(tests: dict[str, Any], runs: dict[str, Any]):
    """Each group's cells as shares of its own mutants, its n above the bar: groups graded over pools of
    different sizes (a system's tests over many instances, one loop round over one fix) compare by share, and
    stacked raw counts would show the sizes of the pools instead."""
    groups = matrix_groups(tests, runs)
    fig = _figure(max(5.5, 1.0 * len(groups) + 2.5), 4.2)
    ax = fig.subplots()
    bottom = [0.0] * len(groups)
    labels = [g[0] for g in groups]
    totals = [sum(g[1].get(cell, 0) for cell in CELLS) for g in groups]
    bars = None
    for cell in CELLS:
        heights = [g[1].get(cell, 0) / n if n else 0.0 for g, n in zip(groups, totals, strict=True)]
        bars = ax.bar(labels, heights, bottom=bottom, label=CELL_LABELS[cell], color=CELL_COLORS[cell])
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    if bars is not None:
        ax.bar_label(bars, labels=[f"n={n}" for n in totals], fontsize=7)
    ax.set(title="Matrix cells per test system and loop round (shares)",
           ylabel="share of mutants", ylim=(0, 1.12))
    ax.title.set_fontsize(10)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    _legend_below(fig, ax, ncols=2)
    return fig


def plot_matrix(tests: dict[str, Any], runs: dict[str, Any]) -> bytes:
    return _png(matrix_figure(tests, runs))


def cost_figure(runs: dict[str, Any]):
    fig = _figure(8, 4.2)
    left, right = fig.subplots(1, 2)
    width = 0.8 / max(1, len(runs))
    all_rounds: list[int] = []
    for i, (name, run) in enumerate(runs.items()):
        offset = (i - (len(runs) - 1) / 2) * width  # bars of the runs side by side, centred on the round
        all_rounds += [r["round"] for r in run["rounds"]]
        rounds = [r["round"] + offset for r in run["rounds"]]
        mutant = [r["mutant_usd"] for r in run["rounds"]]
        other = [r["usd"] - r["mutant_usd"] for r in run["rounds"]]
        left.bar(rounds, other, width=width, label=f"{name}: agent")
        left.bar(rounds, mutant, width=width, bottom=other, hatch="//", label=f"{name}: mutants")
        right.plot([r["round"] for r in run["rounds"]], [r["cumulative_usd"] for r in run["rounds"]], marker="o",
                   label=f"{name}: cumulative")
    left.set(title="Cost by round (USD)", xlabel="round", ylabel="USD")
    right.set(title="Cumulative cost (USD)", xlabel="round", ylabel="USD")
    for ax in (left, right):
        _round_axis(ax, all_rounds)
        _count_axis(ax)
    _legend_below(fig, left, right, ncols=3)
    return fig


def plot_cost(runs: dict[str, Any]) -> bytes:
    return _png(cost_figure(runs))


def plot_injection(injection: dict[str, Any]) -> bytes:
    return _png(injection_figure(injection))


def injection_figure(injection: dict[str, Any]):
    """Delta Resolved per class of the injected test (Borderline a group of its own when present), one bar per
    test source, each labelled with its n; room above and below the bars for the labels, the legend below."""
    fig = _figure(7.0, 4.0)
    ax = fig.subplots()
    groups = [("all sources", injection["overall"]), *injection["sources"].items()]
    classes = ["all", *injection["overall"]["by_class"]]
    width = 0.8 / len(groups)
    for i, (name, data) in enumerate(groups):
        cells = [data["overall"], *(data["by_class"].get(c) or {"n": 0, "delta": None} for c in classes[1:])]
        offset = (i - (len(groups) - 1) / 2) * width
        bars = ax.bar([k + offset for k in range(len(classes))], [c["delta"] or 0.0 for c in cells], width=width,
                      label=name)
        ax.bar_label(bars, labels=[f"n={c['n']}" for c in cells], fontsize=7)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(classes)), classes)
    ax.set(title="Test injection: change in Resolved by class of the injected test", ylabel="delta Resolved")
    ax.title.set_fontsize(10)
    ax.margins(y=0.15)  # the n= labels above (and below) the tallest bars stay inside the axes
    _legend_below(fig, ax)
    return fig


def plots(report: dict[str, Any]) -> dict[str, bytes]:
    """The report's figures as PNG bytes (only those with data)."""
    out: dict[str, bytes] = {}
    runs = report.get("runs") or {}
    tests = report.get("tests") or {}
    if runs:
        out["rounds"] = plot_rounds(runs)
    if any(r.get("laxity") is not None for s in tests.values() for r in s["instances"].values() if "error" not in r):
        out["laxity"] = plot_laxity(tests, report["settings"]["tau"])
    if matrix_groups(tests, runs):
        out["matrix"] = plot_matrix(tests, runs)
    if any(r.get("usd") for run in runs.values() for r in run["rounds"]):  # no cost recorded: no empty axes
        out["cost"] = plot_cost(runs)
    if report.get("injection"):
        out["injection"] = plot_injection(report["injection"])
    return out

