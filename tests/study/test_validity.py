"""Validity against real wrong fixes, at scale (issue 50): the fix predictions of five systems unified, the
instances selected, every graded test run on every wrong and correct fix (real git, real pytest, the bundled
boundary_check example), the statistics against hand-computed values, the report from the dataset alone, and
bad inputs named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from coharden.analysis import stats
from coharden.patches import make_patch
from coharden.study.data import StudyError
from coharden.study.split import split_of
from coharden.study.validity import fix_status
from coharden.study.validity_data import FixSystem, load_fixes
from coharden.study.validity_summary import figures

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = EXAMPLES / "boundary_check"
PATTERNS = ["test_*.py", "*_test.py", "tests/", "testing/"]
LIMITER = (EXAMPLE / "project" / "throttle" / "limiter.py").read_text()
FIX = (EXAMPLE / "fix.patch").read_text()


def _write_jsonl(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _source_patch(new: str) -> str:
    return make_patch([("throttle/limiter.py", LIMITER, new)])


#: only ``is_allowed`` fixed: the lax test (4th request refused) passes, the golden and rigorous tests fail
PARTIAL = _source_patch(LIMITER.replace("return len(recent_hits(history, now, window)) <= limit",
                                        "return len(recent_hits(history, now, window)) < limit"))
#: the golden fix with a comment more: a "wrong" fix (by its harness flag) that the golden test accepts
FIXED = LIMITER.replace("t >= cutoff", "t > cutoff").replace(
    "return len(recent_hits(history, now, window)) <= limit", "return len(recent_hits(history, now, window)) < limit"
).replace("    if len(recent) <= limit:\n        return 0\n    return recent[-limit - 1] + window - now",
          "    if len(recent) < limit:\n        return 0\n    return recent[-limit] + window - now")
GOLDEN_LIKE = _source_patch(FIXED + "# done\n")
NO_APPLY = ("diff --git a/throttle/limiter.py b/throttle/limiter.py\n--- a/throttle/limiter.py\n"
            "+++ b/throttle/limiter.py\n@@ -1,2 +1,2 @@\n-this line is not there\n+nor this one\n context\n")
TEST_ONLY = make_patch([("tests/test_extra.py", "", "def test_x():\n    pass\n")])


# --- the fix predictions, unified ------------------------------------------------------------------------------

def _fix_files(root: Path) -> dict[str, FixSystem]:
    _write_jsonl(root / "a.jsonl", [
        {"instance_id": "i-1", "model_name_or_path": "acr/acr-run-1/gpt", "model_patch": PARTIAL, "resolved": False,
         "patch_applied": True},
        {"instance_id": "i-1", "model_name_or_path": "acr/acr-run-2/gpt", "model_patch": PARTIAL + TEST_ONLY,
         "resolved": False, "patch_applied": True},  # the same source change: merged
        {"instance_id": "i-1", "model_name_or_path": "acr/acr-run-3/gpt", "model_patch": NO_APPLY,
         "resolved": False, "patch_applied": False},  # the harness could not apply it: no plausible fix
        {"instance_id": "i-2", "model_name_or_path": "acr/acr-run-1/gpt", "model_patch": "", "resolved": False},
        {"instance_id": "i-2", "model_name_or_path": "acr/acr-run-2/gpt", "model_patch": TEST_ONLY,
         "resolved": False},
        {"instance_id": "i-2", "model_name_or_path": "acr/acr-run-3/gpt", "model_patch": PARTIAL, "resolved": None},
    ])
    _write_jsonl(root / "b.jsonl", [
        {"instance_id": "i-1", "model_name_or_path": "other", "model_patch": GOLDEN_LIKE, "resolved": "False"},
        {"instance_id": "i-1", "model_name_or_path": "other", "model_patch": FIX, "resolved": True}])
    _write_jsonl(root / "c.jsonl", [{"instance_id": "i-1", "model_name_or_path": "m1", "model_patch": FIX},
                                    {"instance_id": "i-1", "model_name_or_path": "m2", "model_patch": FIX}])
    return {"AutoCodeRover": FixSystem(str(root / "a.jsonl")), "Other": FixSystem(str(root / "b.jsonl")),
            "moatless": FixSystem(str(root / "c.jsonl"), correct_only=True)}


def test_the_five_systems_fixes_are_unified_and_every_skip_is_counted(tmp_path: Path) -> None:
    fixes = load_fixes(tmp_path, PATTERNS, systems=_fix_files(tmp_path))
    wrong = fixes.wrong["i-1"]
    assert [(f.fix_id, f.system, f.run) for f in wrong] == [
        ("AutoCodeRover:acr-run-1:i-1", "AutoCodeRover", "acr-run-1"), ("Other:other:i-1", "Other", "other")]
    assert wrong[0].also_by == ["AutoCodeRover:acr-run-2"]  # identical source change, test file dropped
    assert wrong[0].patch == PARTIAL
    assert "i-2" not in fixes.wrong  # empty, test-only, resolved unknown
    # the correct alternative fixes are moatless's; a repair system's resolved fix is counted, not kept
    correct = fixes.correct["i-1"]
    assert [(f.fix_id, f.also_by) for f in correct] == [("moatless:m1:i-1", ["moatless:m2"])]
    assert fixes.counts["Other"] == {"rows": 2, "wrong": 1, "resolved": 1}
    assert fixes.counts["AutoCodeRover"] == {"rows": 6, "wrong": 2, "wrong_duplicate": 1, "not_applied": 1,
                                             "empty": 1, "no_source_change": 1, "resolved_unknown": 1}
    notes = " ".join(fixes.notes)
    assert "1 fixes skipped: patch_applied false" in notes
    assert "resolved unknown (no harness log)" in notes
    assert "merged (also_by)" in notes
    only = load_fixes(tmp_path, PATTERNS, systems=_fix_files(tmp_path), instances={"i-2"})
    assert not only.wrong
    assert only.counts["AutoCodeRover"]["rows"] == 3


def test_a_malformed_prediction_line_names_its_file_and_line(tmp_path: Path) -> None:
    systems = _fix_files(tmp_path)
    lines = (tmp_path / "b.jsonl").read_text().splitlines()
    (tmp_path / "b.jsonl").write_text(lines[0] + "\n{not json\n")
    with pytest.raises(StudyError, match=r"b\.jsonl:2: malformed JSON line"):
        load_fixes(tmp_path, PATTERNS, systems=systems)
    (tmp_path / "b.jsonl").write_text(lines[0] + "\n" + json.dumps(["no", "object"]) + "\n")
    with pytest.raises(StudyError, match=r"b\.jsonl:2: not a fix prediction"):
        load_fixes(tmp_path, PATTERNS, systems=systems)
    with pytest.raises(StudyError, match="file not found"):
        load_fixes(tmp_path, PATTERNS, systems={"X": FixSystem(str(tmp_path / "none.jsonl"))})


@pytest.mark.parametrize(("kind", "outcomes", "status"), [
    ("wrong", {"golden": ("FAIL", ""), "Otter": ("PASS", "")}, "counted"),
    ("wrong", {"golden": ("PASS", ""), "Otter": ("PASS", "")}, "golden_accepts"),
    ("wrong", {"golden": ("TIMEOUT", "time limit"), "Otter": ("PASS", "")}, "golden_inadmissible"),
    # the fix breaks pytest's session (pytest-5692): the golden test does not pass on it, so it rejects it
    ("wrong", {"golden": ("COLLECTION_ERROR", "the code under test broke pytest's session"),
               "Otter": ("COLLECTION_ERROR", "")}, "counted"),
    ("wrong", {"golden": ("APPLY_ERROR", "source patch: hunk 1 does not apply"),
               "Otter": ("APPLY_ERROR", "source patch: hunk 1 does not apply")}, "does_not_apply"),
    # the test's own patch not applying on top of the fix is that test's problem, not the fix's
    ("wrong", {"golden": ("FAIL", ""), "Otter": ("APPLY_ERROR", "test patch: conflict")}, "counted"),
    ("correct", {"golden": ("PASS", ""), "Otter": ("FAIL", "")}, "ran"),
])
def test_what_a_fix_s_verdicts_make_of_it(kind: str, outcomes: dict[str, tuple[str, str]], status: str) -> None:
    assert fix_status(kind, {n: {"outcome": o, "reason": r} for n, (o, r) in outcomes.items()}) == status


# --- the statistics, against hand-computed values --------------------------------------------------------------

def _t(iid: str, cls: str, laxity: float | None, accepted: int, wrong: int, **extra: Any) -> dict[str, Any]:
    return {"instance_id": iid, "split": "dev", "system": extra.pop("system", cls), "class": cls, "laxity": laxity,
            "interval": None, "wrong": wrong, "accepted": accepted, "share": accepted / wrong if wrong else None,
            "inadmissible": 0, "some_wrong": extra.pop("some_wrong", wrong), "some_accepted": accepted,
            "some_share": extra.pop("some_share", accepted / wrong if wrong else None),
            "accepts": accepted > 0 if wrong else None, "correct": extra.pop("correct", 0),
            "correct_rejected": extra.pop("correct_rejected", 0), **extra}


def test_auc_fisher_and_votes_match_hand_computed_values() -> None:
    tests = [
        _t("i1", "Lax", 0.5, 1, 2, system="A"), _t("i1", "Rigorous", 0.0, 0, 2, system="B", correct=2,
                                                   correct_rejected=1),
        _t("i2", "Lax", 0.3, 1, 1, system="A"), _t("i2", "Rigorous", 0.1, 1, 2, system="B"),
        _t("i3", "Lax", 0.4, 0, 2, system="A"), _t("i3", "Rigorous", 0.05, 0, 1, system="B"),
        _t("i4", "Rigorous", 0.0, 0, 3, system="B", correct=1),
        _t("i4", "Inconclusive", None, 1, 3, system="C"),
        _t("i5", "Lax", 0.9, 0, 0, system="A"),  # every verdict inadmissible: left out
    ]
    fig = figures(tests)
    # AUC: positives (0.5, 0.3, 0.1) against negatives (0.4, 0.0, 0.05, 0.0): 4 + 3 + 3 wins of 12 pairs
    assert fig["auc"]["auc"] == pytest.approx(10 / 12)
    assert (fig["auc"]["positives"], fig["auc"]["negatives"]) == (3, 4)
    low, high = fig["auc"]["interval"]
    assert 0.0 <= low <= 10 / 12 <= high <= 1.0
    # Fisher, Lax 2 of 3 vs Rigorous 1 of 4: tables with a = 0, 2, 3 are no likelier than the observed one,
    # (4 + 12 + 1) / 35 under the hypergeometric C(3, a) C(4, 3 - a) / C(7, 3)
    assert fig["fisher_tests"] == pytest.approx(17 / 35)
    assert stats.fisher_exact(2, 1, 1, 3) == pytest.approx(17 / 35)
    lax, rig = fig["per_class"]["Lax"], fig["per_class"]["Rigorous"]
    assert (lax["tests"]["hits"], lax["tests"]["total"], rig["tests"]["hits"], rig["tests"]["total"]) == (2, 3, 1, 4)
    # one vote per instance and class: Lax i1 yes, i2 yes, i3 no; Rigorous only i2 yes
    assert (lax["instances"]["hits"], lax["instances"]["total"]) == (2, 3)
    assert (rig["instances"]["hits"], rig["instances"]["total"]) == (1, 4)
    assert fig["fisher_instances"] == pytest.approx(17 / 35)
    assert (lax["fixes"]["hits"], lax["fixes"]["total"]) == (2, 5)
    assert fig["per_class"]["Inconclusive"]["tests"]["hits"] == 1
    assert fig["ranked"] == {"tests": 7, "instances": 4, "accepting": 3}  # Inconclusive has no laxity
    laxities = [0.5, 0.0, 0.3, 0.1, 0.4, 0.05, 0.0]
    shares = [0.5, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0]
    assert fig["spearman"]["rho"] == pytest.approx(stats.spearman(laxities, shares))
    assert (rig["correct_tests"]["hits"], rig["correct_tests"]["total"]) == (1, 2)
    assert (rig["correct_pairs"]["hits"], rig["correct_pairs"]["total"]) == (1, 3)
    assert figures([])["auc"]["auc"] is None


def test_the_bootstrap_resamples_whole_clusters() -> None:
    # clusters [1, 1] and [0]: two drawn clusters give a mean of 1, 2/3 or 0, never an item-level 1/2
    low, high = stats.cluster_bootstrap([[1.0, 1.0], [0.0]], stats.mean, n_boot=400, seed=1)
    assert (low, high) == (0.0, 1.0)
    assert stats.cluster_bootstrap([[2.0], [2.0]], stats.mean, n_boot=50) == (2.0, 2.0)
    assert stats.cluster_bootstrap([], stats.mean) is None
    assert stats.bootstrap_interval(3, lambda idx: None) is None
    assert stats.percentile([0.1, 0.2, 0.3, 0.4], 0.5) == pytest.approx(0.25)


# --- end to end: real git, real pytest -------------------------------------------------------------------------

def validity_inputs(root: Path) -> dict[str, Path]:
    """A data directory in the shared layout, clones, an envcheck and a laxity table:

    - ``example__throttle-1``: Otter's test lax, Otter++'s rigorous (both F->P in the table); wrong fixes: one
      only the lax test accepts (by AutoCodeRover, twice), one the golden test accepts, one that does not apply;
      the golden fix as the correct alternative;
    - ``example__throttle-2``: its only unresolved fix is accepted by the golden test (no wrong fix counts);
    - ``example__throttle-3``: no unresolved fix (not a candidate);
    - ``gone__gone-1``: F->P in the table and a wrong fix, but no clone."""
    from coharden.instances import materialize_directory

    repos = root / "repos"
    repos.mkdir(parents=True)
    built, commit = materialize_directory(EXAMPLE / "project", root / "cache")
    shutil.copytree(built, repos / "example__throttle")
    manifest_f2p = json.dumps(["tests/test_limiter.py::test_limit_and_window_boundaries"])

    def record(iid: str, repo: str) -> dict[str, Any]:
        return {"repo": repo, "instance_id": iid, "base_commit": commit, "version": "1.0", "patch": FIX,
                "test_patch": (EXAMPLE / "test.patch").read_text(), "FAIL_TO_PASS": manifest_f2p,
                "PASS_TO_PASS": "[]"}

    ids = ["example__throttle-1", "example__throttle-2", "example__throttle-3"]
    data = root / "data"
    _write_jsonl(data / "swebench_verified.jsonl", [*(record(i, "example/throttle") for i in ids),
                                                    record("gone__gone-1", "gone/gone")])
    (data / "swtbench_verified_ids.txt").write_text("".join(f"{i}\n" for i in [*ids, "gone__gone-1"]))
    preds = data / "brt_predictions"
    lax = (EXAMPLE / "candidates" / "lax.patch").read_text()
    rigorous = (EXAMPLE / "candidates" / "rigorous.patch").read_text()

    def pred(iid: str, patch: str) -> dict[str, str]:
        return {"instance_id": iid, "model_name_or_path": "m", "model_patch": patch}

    everywhere = [*ids, "gone__gone-1"]
    _write_jsonl(preds / "otter_gpt4o_tddbench_verified.jsonl", [pred(i, lax) for i in everywhere])
    _write_jsonl(preds / "otter_plus_gpt4o_tddbench_verified.jsonl", [pred(i, rigorous) for i in everywhere])
    for name in ("assertflip_gpt4o_swtbench_verified.jsonl", "assertflip_gpt4o_swtbench_lite188.jsonl",
                 "devstral_testgen_swtbench_lite.jsonl"):
        _write_jsonl(preds / name, [])
    fixes = data / "fix_predictions"

    def fix(iid: str, model: str, patch: str, resolved: bool | None, **extra: Any) -> dict[str, Any]:
        return {"instance_id": iid, "model_name_or_path": model, "model_patch": patch, "resolved": resolved, **extra}

    _write_jsonl(fixes / "autocoderover_gpt4_swebench_lite.jsonl", [
        fix("example__throttle-1", "acr/acr-run-1/gpt", PARTIAL, False, patch_applied=True),
        fix("example__throttle-1", "acr/acr-run-2/gpt", PARTIAL, False, patch_applied=True),
        fix("example__throttle-1", "acr/acr-run-3/gpt", PARTIAL, False, patch_applied=False),
        fix("gone__gone-1", "acr/acr-run-1/gpt", PARTIAL, False, patch_applied=True)])
    _write_jsonl(fixes / "coder_gpt4_swebench_lite.jsonl", [
        fix("example__throttle-1", "coder", NO_APPLY, False, patch_applied=True),
        fix("example__throttle-1", "coder", PARTIAL, None, patch_applied=None)])
    _write_jsonl(fixes / "mini-swe-agent_gemini-3-pro_swebench_verified.jsonl", [
        fix("example__throttle-1", "mini", GOLDEN_LIKE, False), fix("example__throttle-2", "mini", GOLDEN_LIKE, False),
        fix("example__throttle-3", "mini", FIX, True)])
    _write_jsonl(fixes / "orcaloca_agentless_claude_swebench_verified50.jsonl", [])
    _write_jsonl(fixes / "moatless_resolved_by_swebench_verified.jsonl", [
        fix("example__throttle-1", "moatless-a", FIX, True), fix("example__throttle-2", "moatless-a", FIX, True)])
    envcheck = root / "envcheck.jsonl"
    _write_jsonl(envcheck, [{"instance_id": i, "verified": True} for i in everywhere])

    def graded(iid: str, system: str, cls: str, laxity: float) -> dict[str, Any]:
        return {"instance_id": iid, "system": system, "status": "graded", "fail_to_pass": True, "class": cls,
                "laxity": laxity, "interval": [max(0.0, laxity - 0.2), min(1.0, laxity + 0.3)],
                "config": {"key": "k"}}

    table = root / "table.jsonl"
    _write_jsonl(table, [row for i in everywhere for row in (graded(i, "Otter", "Lax", 0.5),
                                                             graded(i, "Otter++", "Rigorous", 0.0))])
    return {"data": data, "repos": repos, "envcheck": envcheck, "table": table, "cache": root / "cache"}


def _cli(inputs: dict[str, Path], output: Path, store: Path, *extra: str) -> Any:
    from typer.testing import CliRunner

    from coharden.cli import app

    args = ["study", "validity", "--data", str(inputs["data"]), "--repos", str(inputs["repos"]), "--envcheck",
            str(inputs["envcheck"]), "--table", str(inputs["table"]), "--store", str(store), "-o", str(output),
            "--no-bytecode", "--timeout", "60", *extra]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COHARDEN_CACHE", str(inputs["cache"]))
        return CliRunner().invoke(app, args)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("validity")
    inputs = validity_inputs(root)
    result = _cli(inputs, root / "out", root / "s.sqlite")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (root / "out" / "validity.jsonl").read_text().splitlines()]
    return {"root": root, "inputs": inputs, "output": result.output, "out": root / "out", "rows": rows,
            "store": root / "s.sqlite"}


@pytest.mark.slow
def test_instances_are_selected_and_every_test_runs_on_every_fix(study: dict[str, Any]) -> None:
    rows = study["rows"]
    heads = {r["instance_id"]: r for r in rows if r["row"] == "instance"}
    assert {i: h["status"] for i, h in heads.items()} == {
        "example__throttle-1": "ran", "example__throttle-2": "no_wrong_fix", "gone__gone-1": "unreachable"}
    assert "no clone of gone/gone" in heads["gone__gone-1"]["reason"]
    assert heads["example__throttle-1"]["tests"]["Otter"]["class"] == "Lax"
    assert heads["example__throttle-1"]["split"] == split_of("example__throttle-1")
    fixes = {(r["instance_id"], r["fix_id"]): r for r in rows if r["row"] == "fix"}
    partial = fixes[("example__throttle-1", "AutoCodeRover:acr-run-1:example__throttle-1")]
    assert partial["status"] == "counted"
    assert partial["outcomes"] == {"golden": "FAIL", "Otter": "PASS", "Otter++": "FAIL"}  # only the lax test accepts
    assert partial["also_by"] == ["AutoCodeRover:acr-run-2"]
    not_applying = fixes[("example__throttle-1", "CodeR:coder:example__throttle-1")]
    assert not_applying["status"] == "does_not_apply"
    assert set(not_applying["outcomes"].values()) == {"APPLY_ERROR"}  # not accepted by any test
    assert not_applying["reason"].startswith("source patch")
    assert fixes[("example__throttle-1", "mini-swe-agent:mini:example__throttle-1")]["status"] == "golden_accepts"
    correct = fixes[("example__throttle-1", "moatless:moatless-a:example__throttle-1")]
    assert (correct["kind"], correct["status"], correct["outcomes"]) == (
        "correct", "ran", {"golden": "PASS", "Otter": "PASS", "Otter++": "PASS"})
    # no wrong fix counts on throttle-2: its correct fixes are not run
    assert [r["fix_id"] for r in rows if r["row"] == "fix" and r["instance_id"] == "example__throttle-2"] == [
        "mini-swe-agent:mini:example__throttle-2"]
    run = rows[0]
    assert run["row"] == "run"
    assert any("patch_applied false" in n for n in run["notes"])
    assert any("resolved unknown" in n for n in run["notes"])

    summary = json.loads((study["out"] / "validity_summary.json").read_text())
    tests = {t["system"]: t for t in summary["tests"]}
    assert (tests["Otter"]["accepted"], tests["Otter"]["wrong"], tests["Otter"]["share"]) == (1, 1, 1.0)
    assert (tests["Otter++"]["accepted"], tests["Otter++"]["wrong"]) == (0, 1)
    everything = summary["splits"]["all"]
    assert everything["auc"]["auc"] == 1.0
    assert everything["per_class"]["Lax"]["tests"]["hits"] == 1
    assert everything["per_class"]["Rigorous"]["tests"]["hits"] == 0
    assert summary["coverage"]["golden_accepts"][0]["fix_id"] == "mini-swe-agent:mini:example__throttle-1"
    report = (study["out"] / "validity_report.md").read_text()
    assert report.index("## Development split") < report.index("## Held-out split")
    assert "## Wrong fixes the golden test accepts (not counted as wrong)" in report
    assert "## Fixes that do not apply here" in report
    assert "- gone__gone-1: unreachable - no clone of gone/gone" in report
    assert "time limit per test process: 60 s (2 instances)" in report  # the instances that ran


@pytest.mark.slow
def test_a_rerun_resumes_from_the_store_and_the_report_needs_only_the_dataset(study: dict[str, Any],
                                                                              tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from coharden.cli import app

    # every final instance is kept: nothing runs
    again = _cli(study["inputs"], study["out"], study["store"])
    assert again.exit_code == 0, again.output
    assert "0 instances run, 2 kept from earlier runs" in again.output.replace("\n", " ")
    # named again with --id: run again, every verdict from the store, the same rows
    fresh = tmp_path / "fresh"
    named = _cli(study["inputs"], fresh, study["store"], "--id", "example__throttle-1")
    assert named.exit_code == 0, named.output
    assert "1 instances run, 0 kept from earlier runs, 1 left" in named.output.replace("\n", " ")
    mine = [json.loads(line) for line in (fresh / "validity.jsonl").read_text().splitlines()]
    assert [r for r in mine if r.get("instance_id") == "example__throttle-1"] == \
        [r for r in study["rows"] if r.get("instance_id") == "example__throttle-1"]
    pending = [r for r in mine if r["row"] == "instance" and r["instance_id"] == "example__throttle-2"]
    assert pending[0]["status"] == "pending"

    (study["out"] / "validity_report.md").unlink()
    only = CliRunner().invoke(app, ["study", "validity", "--report-only", "-o", str(study["out"])])
    assert only.exit_code == 0, only.output
    assert "# Validity of laxity against real wrong fixes" in (study["out"] / "validity_report.md").read_text()
    empty = CliRunner().invoke(app, ["study", "validity", "--report-only", "-o", str(tmp_path / "none")])
    assert empty.exit_code != 0
    assert "no dataset to report on" in empty.output.replace("\n", " ")
    assert "Traceback" not in empty.output


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from coharden.cli import app

    runner = CliRunner()
    no_data = runner.invoke(app, ["study", "validity", "-o", str(tmp_path / "o")])
    assert no_data.exit_code != 0
    assert "--data and --repos are needed" in no_data.output.replace("\n", " ")
    no_table = runner.invoke(app, ["study", "validity", "--data", str(tmp_path), "--repos", str(tmp_path),
                                   "--table", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "o")])
    assert no_table.exit_code != 0
    assert "no laxity table" in no_table.output.replace("\n", " ")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "validity.jsonl").write_text('{"row": "run"}\n{oops\n')
    broken = runner.invoke(app, ["study", "validity", "--report-only", "-o", str(bad)])
    assert broken.exit_code != 0
    assert "validity.jsonl:2: malformed JSON line" in broken.output.replace("\n", "")
    assert "Traceback" not in no_data.output + no_table.output + broken.output


def test_per_test_shares_from_dataset_rows() -> None:
    """A pass accepts; a failure or a broken collection rejects; a time-out decides nothing. *Some*: the wrong
    fixes some graded test accepts."""
    from coharden.study.validity_summary import per_test

    head = {"row": "instance", "instance_id": "i-1", "repo": "a/b", "split": "dev", "status": "ran",
            "tests": {"L": {"class": "Lax", "laxity": 0.5, "interval": [0.3, 0.7]},
                      "R": {"class": "Rigorous", "laxity": 0.0, "interval": [0.0, 0.1]}}}

    def fix(fix_id: str, kind: str, status: str, **outcomes: str) -> dict[str, Any]:
        return {"row": "fix", "instance_id": "i-1", "fix_id": fix_id, "kind": kind, "status": status,
                "outcomes": {"golden": "FAIL" if kind == "wrong" else "PASS", **outcomes}}

    rows = [head, fix("w1", "wrong", "counted", L="PASS", R="FAIL"),
            fix("w2", "wrong", "counted", L="COLLECTION_ERROR", R="COLLECTION_ERROR"),
            fix("w3", "wrong", "counted", L="TIMEOUT", R="FAIL"),
            fix("w4", "wrong", "golden_accepts", L="PASS", R="PASS"),
            fix("c1", "correct", "ran", L="PASS", R="FAIL")]
    tests = {t["system"]: t for t in per_test(rows)}
    assert (tests["L"]["accepted"], tests["L"]["wrong"], tests["L"]["inadmissible"]) == (1, 2, 1)
    assert (tests["R"]["accepted"], tests["R"]["wrong"], tests["R"]["collection_rejects"]) == (0, 3, 1)
    assert (tests["L"]["some_accepted"], tests["L"]["some_wrong"]) == (1, 1)  # only w1 is accepted by a test
    assert (tests["R"]["some_accepted"], tests["R"]["some_wrong"]) == (0, 1)
    assert (tests["R"]["correct_rejected"], tests["L"]["correct_rejected"]) == (1, 0)
    assert tests["L"]["accepts"] is True
    assert tests["R"]["accepts"] is False


def test_a_golden_test_that_times_out_is_checked_again_by_the_next_run(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """sympy-18057's golden test took 124 s in the table's run and exceeded 120 s here: the verify record is not
    stored (a run with a larger --timeout checks again) and the instance says so, not 'golden_not_f2p'."""
    import sys
    from types import SimpleNamespace

    from coharden.config import Settings
    from coharden.execution.store import Store
    from coharden.schema.instance import Instance
    from coharden.schema.verdict import Outcome, Verdict
    from coharden.study import real_bugs
    from coharden.study.data import StudyData
    from coharden.study.real_bugs import RealBugsStudy, StudyConfig

    inst = Instance(repo="a/b", instance_id="a__b-1", base_commit="c", patch=FIX, test_patch="t", version="1")
    data = StudyData(data_dir=tmp_path, instances={"a__b-1": inst}, env_check={}, env_field="verified",
                     swt_ids=set(), study_ids=["a__b-1"], predictions={}, assertflip_resolved={}, wrong_fixes={},
                     correct_fixes={})
    outcomes = {"fixed": Outcome.TIMEOUT}
    monkeypatch.setattr(real_bugs, "fail_to_pass", lambda ex, golden, fix: SimpleNamespace(
        buggy=Verdict(outcome=Outcome.FAIL), fixed=Verdict(outcome=outcomes["fixed"]),
        fail_to_pass=outcomes["fixed"] is Outcome.PASS))
    store = Store(tmp_path / "s.sqlite")
    study = RealBugsStudy(data, Settings(python=sys.executable, store=tmp_path / "s.sqlite"), store,
                          StudyConfig(workers=1, bytecode=[]))
    monkeypatch.setattr(study, "executor", lambda inst: SimpleNamespace(golden_test=lambda: SimpleNamespace(ids=[])))
    try:
        first = study.verify("a__b-1")
        assert first is not None
        assert (first["fixed"]["outcome"], first["resumed"]) == ("TIMEOUT", False)
        outcomes["fixed"] = Outcome.PASS  # a larger limit
        second = study.verify("a__b-1")
        assert second is not None
        assert (second["fail_to_pass"], second["resumed"]) == (True, False)  # checked again, not the time-out
        assert study.verify("a__b-1")["resumed"] is True  # type: ignore[index]
    finally:
        study.close()
        store.close()


# --- another table's classes joined with the fixes' runs (--report-only --table) --------------------------------

def _table_row(iid: str, system: str, cls: str, laxity: float, interval: list[float], matrix: dict[str, int],
               **extra: Any) -> dict[str, Any]:
    return {"instance_id": iid, "system": system, "status": "graded", "fail_to_pass": True, "class": cls,
            "laxity": laxity, "interval": interval, "confidence": 0.95, "counted": "behaviours", "matrix": matrix,
            "config": {"key": "new", "tau": 0.202, "paper_classes": False}, **extra}


def test_the_per_mutant_unit_counts_every_plausible_admissible_mutant_once() -> None:
    """0 of 17 behaviours is Rigorous; the same run's 2 of 20 mutants is Borderline ([0.012, 0.317] holds tau);
    0 of 20 mutants is Rigorous (upper end 0.168); a row that counted mutants already keeps its figures."""
    from coharden.study.validity_data import f2p_tests, per_mutant

    row = _table_row("i-1", "T", "Rigorous", 0.0, [0.0, 0.195], {"alpha": 0, "beta": 2, "gamma": 0, "delta": 18})
    mine = per_mutant(row)
    assert mine["class"] == "Borderline"
    assert mine["laxity"] == pytest.approx(0.1)
    assert mine["interval"] == pytest.approx([0.01235, 0.31698], abs=1e-4)
    clean = per_mutant({**row, "matrix": {"alpha": 0, "beta": 0, "gamma": 0, "delta": 20}})
    assert clean["class"] == "Rigorous"
    assert clean["interval"][1] == pytest.approx(1 - 0.025 ** (1 / 20))
    old = {**row, "counted": "mutants"}
    assert per_mutant(old) == {"class": "Rigorous", "laxity": 0.0, "interval": [0.0, 0.195]}
    assert f2p_tests([row])["i-1"]["T"]["class"] == "Rigorous"
    assert f2p_tests([row], "mutants")["i-1"]["T"]["class"] == "Borderline"
    with pytest.raises(StudyError, match="unknown unit"):
        f2p_tests([row], "tests")


def _joinable(tmp_path: Path) -> tuple[Path, Path]:
    """A dataset of three instances (two ran, one had no wrong fix) and a new table that grades one of them."""
    def fix(iid: str, fix_id: str, **outcomes: str) -> dict[str, Any]:
        return {"row": "fix", "instance_id": iid, "fix_id": fix_id, "kind": "wrong", "status": "counted",
                "split": "dev", "outcomes": {"golden": "FAIL", **outcomes}}

    def head(iid: str, status: str, tests: dict[str, Any]) -> dict[str, Any]:
        return {"row": "instance", "instance_id": iid, "repo": "a/b", "split": "dev", "status": status,
                "reason": None, "tests": tests}

    old = {"class": "Lax", "laxity": 0.5, "interval": [0.3, 0.7]}
    dataset = tmp_path / "out" / "validity.jsonl"
    _write_jsonl(dataset, [
        {"row": "run", "table": "table.jsonl", "notes": ["an old note"]},
        head("i-1", "ran", {"L": old, "R": old}), fix("i-1", "w1", L="PASS", R="FAIL"),
        fix("i-1", "w2", L="FAIL", R="FAIL"),
        head("i-2", "ran", {"L": old}), fix("i-2", "w3", L="PASS"),
        head("i-3", "no_wrong_fix", {"L": old})])
    table = tmp_path / "table_new.jsonl"
    _write_jsonl(table, [
        _table_row("i-1", "L", "Rigorous", 0.0, [0.0, 0.16], {"alpha": 0, "beta": 1, "gamma": 0, "delta": 19}),
        {**_table_row("i-1", "R", "Lax", 0.5, [0.3, 0.7], {}), "fail_to_pass": False, "class": "Misaligned"},
        _table_row("i-1", "S", "Lax", 0.4, [0.3, 0.5], {"alpha": 0, "beta": 4, "gamma": 0, "delta": 6})])
    return dataset, table


def test_another_table_s_classes_join_the_stored_fix_runs(tmp_path: Path) -> None:
    """The fixes' outcomes stay; the classes are the new table's; a test the new table does not grade F->P, or
    one no fix ran, is left out with a note; an instance with none left is out of every figure."""
    from coharden.study.validity import join_table, read_dataset
    from coharden.study.validity_summary import per_test

    dataset, table = _joinable(tmp_path)
    rows = read_dataset(dataset)
    joined = join_table(rows, table)
    heads = {r["instance_id"]: r for r in joined if r["row"] == "instance"}
    assert heads["i-1"]["tests"] == {"L": {"class": "Rigorous", "laxity": 0.0, "interval": [0.0, 0.16]}}
    assert heads["i-2"]["status"] == "not_in_table"
    assert "has no row of it" in heads["i-2"]["reason"]
    assert heads["i-3"] == next(r for r in rows if r.get("instance_id") == "i-3" and r["row"] == "instance")
    assert [r for r in joined if r["row"] == "fix"] == [r for r in rows if r["row"] == "fix"]
    run = joined[0]
    assert (run["table"], run["unit"]) == ("table_new.jsonl", "behaviours")
    assert run["notes"][0] == "an old note"
    assert "i-1: R's test is no graded F->P test of table_new.jsonl: left out" in run["notes"]
    assert "i-1: table_new.jsonl grades S's test F->P, which no fix ran: left out" in run["notes"]
    tests = per_test(joined)
    assert [(t["instance_id"], t["system"], t["class"], t["accepted"], t["wrong"]) for t in tests] == \
        [("i-1", "L", "Rigorous", 1, 2)]
    by_mutant = {r["instance_id"]: r for r in join_table(rows, table, "mutants") if r["row"] == "instance"}
    assert by_mutant["i-1"]["tests"]["L"]["class"] == "Borderline"  # 1 of 20 mutants: [0.001, 0.249]


def test_report_only_with_a_table_rewrites_the_dataset_with_its_classes(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from coharden.cli import app

    dataset, table = _joinable(tmp_path)
    runner = CliRunner()
    done = runner.invoke(app, ["study", "validity", "--report-only", "--table", str(table), "--unit", "mutants",
                               "-o", str(dataset.parent)])
    assert done.exit_code == 0, done.output
    report = (dataset.parent / "validity_report.md").read_text()
    assert "the laxity table `table_new.jsonl`, laxity counted over mutants" in report
    assert "| dev | i-1 | L | Borderline | 0.05 [0.00, 0.25] | 1/2 (50%) |" in report
    assert "- i-2: not_in_table - the table table_new.jsonl has no row of it" in report
    head = next(json.loads(line) for line in dataset.read_text().splitlines() if '"i-1"' in line)
    assert head["tests"]["L"]["class"] == "Borderline"  # the dataset now carries the joined classes
    unit_alone = runner.invoke(app, ["study", "validity", "--report-only", "--unit", "mutants",
                                     "-o", str(dataset.parent)])
    assert unit_alone.exit_code != 0
    assert "needs the --table" in unit_alone.output.replace("\n", " ")
    bad_unit = runner.invoke(app, ["study", "validity", "--report-only", "--unit", "tests", "-o", str(tmp_path)])
    assert bad_unit.exit_code != 0
    assert "one of behaviours, mutants" in bad_unit.output.replace("\n", " ")
    no_table = runner.invoke(app, ["study", "validity", "--report-only", "--table", str(tmp_path / "none.jsonl"),
                                   "-o", str(dataset.parent)])
    assert no_table.exit_code != 0
    assert "no laxity table" in no_table.output.replace("\n", " ")
    assert "Traceback" not in unit_alone.output + bad_unit.output + no_table.output
