"""The evaluation report's plots and tables on small hand-made report documents (no grading): per-system
laxity panels, legends outside the data, titles that fit, integer round axes, no negative axes, per-system
cutoff columns, notes kept whole."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("matplotlib", reason="plots need the report extra")

from coharden.evaluation.report import render_html, render_markdown  # noqa: E402
from coharden.evaluation.report_figures import (  # noqa: E402
    cost_figure,
    laxity_figure,
    matrix_figure,
    matrix_groups,
    rounds_figure,
)


def _round(k: int, matrix: dict[str, int] | None = None, usd: float = 0.0) -> dict[str, Any]:
    return {"round": k, "active": 1, "resolved_rate": None, "fail_to_pass_rate": 1.0, "usd": usd, "mutant_usd": 0.0,
            "cumulative_usd": usd, "matrix": matrix or {"alpha": 0, "beta": 0, "gamma": 0, "delta": 0}}


def _tests(*systems: str) -> dict[str, Any]:
    rows = {"i1": {"test_class": "Rigorous", "laxity": 0.0, "fail_to_pass": True},
            "i2": {"test_class": "Lax", "laxity": 0.5, "fail_to_pass": True}}
    return {name: {"instances": {k: dict(v, laxity=v["laxity"] + 0.1 * i) for k, v in rows.items()},
                   "summary": {"matrix": {"alpha": 1, "beta": 2, "gamma": 3, "delta": 0}}}
            for i, name in enumerate(systems)}


def _draw(fig):  # type: ignore[no-untyped-def]
    """Lay out and draw the figure on an Agg canvas, as the report's PNGs are; return the renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _inside(inner, outer, slack: float = 1.0) -> bool:  # type: ignore[no-untyped-def]
    return (inner.x0 >= outer.x0 - slack and inner.y0 >= outer.y0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y1 <= outer.y1 + slack)


def _legend_covers_nothing(fig) -> None:  # type: ignore[no-untyped-def]
    renderer = _draw(fig)
    assert all(ax.get_legend() is None for ax in fig.axes)  # no legend drawn inside an axes
    assert len(fig.legends) == 1
    box = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent(renderer))
    assert _inside(box, fig.bbox)


def test_one_round_gets_integer_ticks_and_no_negative_usd_axis() -> None:
    runs = {"loop": {"rounds": [_round(1)]}}  # a single round, zero cost: fractional ticks and -0.05 USD before
    for fig in (rounds_figure(runs), cost_figure(runs)):
        _draw(fig)
        for ax in fig.axes:
            assert [float(t) for t in ax.get_xticks()] == [1.0]
        _legend_covers_nothing(fig)
    cost = cost_figure(runs)
    _draw(cost)
    assert all(ax.get_ylim()[0] == 0 for ax in cost.axes)


def test_laxity_histogram_has_one_panel_per_system() -> None:
    fig = laxity_figure(_tests("otter", "coharden"), tau=0.202)
    renderer = _draw(fig)
    assert [ax.get_title() for ax in fig.axes] == ["otter", "coharden"]
    assert fig.axes[0].get_shared_y_axes().joined(fig.axes[0], fig.axes[1])
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["Rigorous", "Lax", "tau = 0.202"]  # each class once, not once per panel
    _legend_covers_nothing(fig)
    assert _inside(fig._suptitle.get_window_extent(renderer), fig.bbox)
    tests = _tests("otter", "one-class")
    del tests["one-class"]["instances"]["i2"]  # a system whose tests are all of one class
    fig = laxity_figure(tests, tau=0.202)
    _draw(fig)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["Rigorous", "Lax", "tau = 0.202"]


def test_matrix_plot_leaves_out_rounds_without_a_matrix_and_its_title_fits() -> None:
    runs = {"loop": {"rounds": [_round(0), _round(1, {"alpha": 1, "beta": 1, "gamma": 2, "delta": 0})]},
            "lax-only": {"rounds": [_round(0)]}}  # a run that never reached the mutant check
    assert [label for label, _ in matrix_groups(_tests("otter"), runs)] == ["tests: otter", "loop r1"]
    fig = matrix_figure(_tests("otter"), runs)
    renderer = _draw(fig)
    (ax,) = fig.axes
    assert _inside(ax.title.get_window_extent(renderer), fig.bbox)
    assert ax.get_ylim()[0] == 0
    _legend_covers_nothing(fig)


def test_matrix_bars_are_shares_of_each_group_with_its_n() -> None:
    """Groups over pools of different sizes compare by share (stacked raw counts showed the pool sizes)."""
    runs = {"loop": {"rounds": [_round(1, {"alpha": 1, "beta": 1, "gamma": 2, "delta": 0})]}}
    tests = _tests("otter")
    tests["otter"]["summary"]["matrix"] = {"alpha": 30, "beta": 60, "gamma": 90, "delta": 20}
    fig = matrix_figure(tests, runs)
    _draw(fig)
    (ax,) = fig.axes
    tops: dict[float, float] = {}
    for bar in ax.patches:
        x = round(bar.get_x(), 6)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert [round(t, 9) for t in tops.values()] == [1.0, 1.0]
    assert sorted(t.get_text() for t in ax.texts) == ["n=200", "n=4"]
    _legend_covers_nothing(fig)


def test_a_legend_names_each_series_once() -> None:
    runs = {"loop": {"rounds": [_round(1, usd=0.5)]}}
    for fig in (rounds_figure({**runs, "again": runs["loop"]}), cost_figure(runs)):
        _draw(fig)
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert len(labels) == len(set(labels))
    # the same run name on both panels' series, as two runs with one label would draw it
    fig = rounds_figure({"loop": runs["loop"]})
    fig.axes[1].plot([1], [1], label="loop: Resolved")
    from coharden.evaluation.report_figures import _legend_below

    fig.legends.clear()
    _legend_below(fig, *fig.axes)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels.count("loop: Resolved") == 1


def test_a_report_without_any_cost_has_no_cost_plot() -> None:
    from coharden.evaluation.report_figures import plots

    report = {"runs": {"loop": {"rounds": [_round(0), _round(1, {"alpha": 1, "beta": 0, "gamma": 1, "delta": 0})]}},
              "tests": {}, "settings": {"tau": 0.202}}
    assert "cost" not in plots(report)  # offline runs spend nothing: empty axes said nothing
    report["runs"]["loop"]["rounds"][1]["usd"] = 0.25
    assert "cost" in plots(report)


def _report(tests: dict[str, Any], note: str) -> dict[str, Any]:
    """The smallest report document the renderers take, with a cutoff table of the given systems."""
    for section in tests.values():
        section["source"] = "preds.jsonl"
        section["summary"].update(fail_to_pass_instances=2, total_instances=2, fail_to_pass_rate=1.0,
                                  mean_laxity=0.25)
        section["instances"]["i2"]["reason"] = note
    by_system = {name: {"Rigorous": 1, "Lax": 1} for name in tests}
    return {"settings": {"tau": 0.202, "operators": ["incomplete_fix"], "per_operator": 3, "seed": 0},
            "instances": {"total": 2, "errors": {}, "fix_errors": {}}, "comparison": [], "fixes": {},
            "tests": tests, "coupling": {}, "overfitting": {}, "refinement": {}, "injection": None, "runs": {},
            "cutoffs": {"cutoffs": [0.202], "injection": None,
                        "tests": [{"cutoff": 0.202, "Rigorous": 2 * len(tests), "Lax": 2 * len(tests) - len(tests),
                                   "by_system": by_system}]},
            "definitions": {}}


def test_cutoff_table_has_columns_per_system_and_notes_are_whole() -> None:
    note = "the reference test does not apply: " + " ".join(f"word{i}" for i in range(60)) + " END"
    markdown = render_markdown(_report(_tests("otter", "coharden"), note))
    assert "| cutoff | Rigorous (all) | Lax (all) | otter: Rigorous | otter: Lax | coharden: Rigorous | " \
           "coharden: Lax |" in markdown
    assert "| 0.202 | 4 | 2 | 1 | 1 | 1 | 1 |" in markdown
    assert note in markdown  # the whole note, not cut at 120 characters
    page = render_html(_report(_tests("otter", "coharden"), note), figures={})
    assert note in page
    assert "overflow-wrap: break-word" in page  # long notes wrap in their cell
    single = render_markdown(_report(_tests("otter"), note))
    assert "| cutoff | Rigorous | Lax |" in single  # one system: its counts are the totals, no extra columns


def _system(*spec: tuple[str, float, int]) -> dict[str, Any]:
    """A test system's section: ``n`` tests of class ``cls`` at laxity ``lax`` per spec entry."""
    rows = {f"i{cls}{k}": {"test_class": cls, "laxity": lax, "fail_to_pass": True}
            for cls, lax, n in spec for k in range(n)}
    return {"instances": rows, "summary": {"matrix": {"alpha": 1, "beta": 2, "gamma": 3, "delta": 0}}}


def test_laxity_panels_hold_the_tallest_bar_of_any_panel() -> None:
    """Issue 34, item 10: the first panel's one test fixed the shared axis at 1 and cut the 4- and 5-test bars
    of the next panels; every bar now ends below the top of its axes, and Borderline is a class of its own."""
    tests = {"otter": _system(("Rigorous", 0.0, 1)),
             "coharden": _system(("Rigorous", 0.02, 4), ("Borderline", 0.2, 3), ("Lax", 0.6, 5))}
    fig = laxity_figure(tests, tau=0.202)
    _draw(fig)
    for ax in fig.axes:
        bottom, top = ax.get_ylim()
        assert bottom == 0
        assert max(p.get_y() + p.get_height() for p in ax.patches) < top
    assert fig.axes[0].get_ylim()[1] >= 5
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["Rigorous", "Borderline", "Lax", "tau = 0.202"]
    hatched = {p.get_hatch() for p in fig.axes[1].patches if p.get_height() > 0 and p.get_x() == 0.2}
    assert hatched == {"///"}  # the Borderline bars: told from Lax by more than a shade of orange


def test_injection_plot_keeps_labels_inside_and_legend_below() -> None:
    from coharden.evaluation.report_figures import injection_figure

    def cell(n: int, delta: float) -> dict[str, Any]:
        return {"n": n, "delta": delta}

    by_class = {"Rigorous": cell(4, 0.25), "Borderline": cell(2, 0.0), "Lax": cell(4, -0.25)}
    inj = {"overall": {"overall": cell(10, 0.1), "by_class": by_class},
           "sources": {"otter": {"overall": cell(10, 0.1), "by_class": by_class}}}
    fig = injection_figure(inj)
    renderer = _draw(fig)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["all", "Rigorous", "Borderline", "Lax"]
    box = ax.get_window_extent(renderer)
    for text in ax.texts:  # the n= labels
        assert _inside(text.get_window_extent(renderer), box)
    _legend_covers_nothing(fig)


def test_comparison_table_has_a_column_per_system_and_wide_tables_scroll() -> None:
    """Issue 34, item 10: nineteen measures as columns ran off a 1300 px page; the systems are the columns."""
    report = _report(_tests("otter", "coharden"), "note")
    keys = ("fixes_submitted", "resolved", "resolved_rate", "apply_failed", "tests_submitted", "fail_to_pass",
            "fail_to_pass_rate", "Rigorous", "Borderline", "Lax", "Misaligned", "NotReproducing", "Invalid",
            "Inconclusive", "Error", "mean_laxity", "coupling_factor", "overfit_rate")
    report["comparison"] = [{"system": name, **dict.fromkeys(keys, 1)} for name in ("otter", "coharden")]
    markdown = render_markdown(report)
    assert "| measure | otter | coharden |" in markdown
    assert "| Borderline | 1 | 1 |" in markdown
    page = render_html(report, figures={})
    assert page.count('<div class="wide"><table>') == page.count("<table>") > 0
    assert ".wide { max-width: 100%; overflow-x: auto; }" in page


def test_study_laxity_plot_colours_points_by_class(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from coharden.study.report import _points_by_class, plots

    summary = {"tau": 0.202, "wrong": {"rows": []}, "systems": {
        "golden": {"laxities": [0.0, 0.2, 0.5], "laxity_classes": ["Rigorous", "Borderline", "Lax"]},
        "mini": {"laxities": [0.25, 0.9], "laxity_classes": ["Borderline", "Lax"]}}}
    series = _points_by_class(summary, ["golden", "mini"])
    assert [(name, ys) for name, _, ys in series] == [("Rigorous", [0.0]), ("Borderline", [0.2, 0.25]),
                                                       ("Lax", [0.5, 0.9])]
    assert plots(summary, tmp_path, ["golden", "mini"]) == {"laxity": "real_bugs_laxity.png"}
    assert (tmp_path / "real_bugs_laxity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
