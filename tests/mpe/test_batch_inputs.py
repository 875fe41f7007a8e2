"""A batch ``mpe`` given bad input of every kind (issue 52): an empty file, a --repos that does not exist, ids
naming no instance are one error before any work; an instance whose repository is not cloned, a prediction of an
unknown instance, a log folder that cannot be written leave the batch to finish, write every output and exit 1
with each reason on the console. Its outputs read as the SWE-bench harness's (per-instance and run-level
``report.json``), its flags under the harness's names too, and off a terminal it says one line per finished
prediction. Real git, real pytest runs on the bundled examples."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.instances import load_local
from coharden.mpe.batch import stage_times, summarize
from coharden.mpe.logs import harness_report, run_log
from coharden.schema.prediction import Prediction

EX = Path(__file__).resolve().parents[2] / "examples"
BC = "example__boundary_check"
FAST = ["--operators", "behavior_substitution,incomplete_fix", "-c", "mpe.per_operator=1", "-c", "mpe.sequential=false",
        "-c", "timeout=60"]


def _flat(text: str) -> str:
    return "".join(text.split())


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Records of boundary_check and of a repository that is not cloned; predictions: the lax candidate, one for
    the uncloned instance, an empty one, one of an instance the records do not hold."""
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    local = load_local(EX / "boundary_check", tmp_path / "cache")
    missing = {**local.instance.model_dump(mode="json"), "instance_id": "acme__missing-1", "repo": "acme/missing"}
    records = tmp_path / "instances.jsonl"
    records.write_text(json.dumps(local.instance.model_dump(mode="json")) + "\n" + json.dumps(missing) + "\n")
    lax = (EX / "boundary_check/candidates/lax.patch").read_text()
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps(p) + "\n" for p in (
        {"instance_id": BC, "model_name_or_path": "otter", "model_patch": lax},
        {"instance_id": "acme__missing-1", "model_name_or_path": "otter", "model_patch": lax},
        {"instance_id": BC, "model_name_or_path": "empty", "model_patch": ""},
        {"instance_id": "nope__1", "model_name_or_path": "otter", "model_patch": lax})))
    repos = tmp_path / "repos"
    repos.mkdir()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    return {"records": records, "predictions": predictions, "repos": repos, "empty": empty, "root": tmp_path}


def _refused(args: list[str], inputs: dict[str, Path]) -> str:
    out = inputs["root"] / "out"
    result = CliRunner().invoke(app, ["mpe", *args, "--output", str(out), "-c", f"store={inputs['root'] / 's.sqlite'}",
                                      *FAST])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.startswith("error: "), result.output
    assert not (out / "mpe.jsonl.partial").exists()
    assert not (out / "mpe.jsonl").exists()
    return _flat(result.output)


def test_bad_batch_input_is_one_error_before_any_work(inputs: dict[str, Path]) -> None:
    r, p, e = str(inputs["records"]), str(inputs["predictions"]), str(inputs["empty"])
    assert _flat(f"--instances: {e} holds no instance") in _refused(["--instances", e, "--predictions", p], inputs)
    assert _flat(f"--predictions: {e} holds no prediction") in _refused(["--instances", r, "--predictions", e],
                                                                       inputs)
    gone = inputs["root"] / "no-such-dir"
    assert _flat(f"--repos: {gone} does not exist") in _refused(
        ["--instances", r, "--predictions", p, "--repos", str(gone)], inputs)
    assert _flat("no instance with id zzz__9") in _refused(
        ["--instances", r, "--predictions", p, "--instance_ids", f"{BC},zzz__9"], inputs)
    unknown = inputs["root"] / "unknown.jsonl"
    unknown.write_text(json.dumps({"instance_id": "nope__1", "model_name_or_path": "x", "model_patch": ""}) + "\n")
    assert _flat("none of the predictions names an instance") in _refused(
        ["--instances", r, "--predictions", str(unknown)], inputs)
    # the harness's `--instance_ids a b`: the second id would be taken for the INSTANCE argument
    assert _flat("an INSTANCE argument (b) and --instances") in _refused(
        ["--instances", r, "--predictions", p, "--instance_ids", "a", "b"], inputs)


def test_a_batch_with_unrunnable_instances_finishes_says_why_and_exits_1(inputs: dict[str, Path]) -> None:
    root = inputs["root"]
    out = root / "results" / "otter-run"
    args = ["mpe", "--dataset_name", str(inputs["records"]), "--predictions_path", str(inputs["predictions"]),
            "--repos", str(inputs["repos"]), "--output", str(out), "--max_workers", "1", *FAST]
    result = CliRunner().invoke(app, args)  # stderr is no terminal here: the run log says each finished one
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    err = result.stderr
    # every reason on the console, one line each
    assert _flat("error: acme__missing-1 (otter): repository not found at") in _flat(err)
    assert _flat("1 of the predictions names an instance id that is not in the instances file (not graded): "
                 "nope__1") in _flat(err)
    # one line per finished prediction, and where the store and logs are, said at the start
    finished = [line for line in err.splitlines() if line.startswith("[")]
    assert len(finished) == 4, err
    assert any(f"{BC} (otter): " in line and "laxity" in line for line in finished)
    assert any(f"{BC} (empty): Invalid" in line for line in finished)
    assert any("nope__1 (otter): not graded" in line for line in finished)
    store = root / "cache" / "store.sqlite"  # the default store is in the cache directory, not ./.coharden/
    assert store.is_file()
    assert not (root / ".coharden").exists()
    assert f"store {store}" in " ".join(err.split())
    # every output written
    rows = [json.loads(line) for line in (out / "mpe.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["total"] == 3  # the unknown instance's prediction is not graded, not an Error
    assert summary["classes"]["Error"] == 1
    assert summary["classes"]["Invalid"] == 1
    assert summary["not_graded"] == ["nope__1 (otter)"]
    assert list(summary["errors"]) == ["acme__missing-1 (otter)"]
    # the run-level report in the harness's shape, ids per class, per system
    report = json.loads((out / "report.json").read_text())
    otter = report["models"]["otter"]
    assert otter["total_instances"] == 2
    assert otter["submitted_instances"] == 3
    assert otter["completed_instances"] == 1
    assert otter["error_instances"] == 1
    assert otter["error_ids"] == otter["Error_ids"] == ["acme__missing-1"]
    assert otter["not_graded_ids"] == ["nope__1"]
    lax_class = rows[0]["test_class"]
    assert otter[f"{lax_class}_ids"] == [BC]
    assert report["models"]["empty"]["empty_patch_ids"] == [BC] == report["models"]["empty"]["Invalid_ids"]
    assert report["run_id"] == "otter-run"
    # per-instance folders inside --output by default: the harness's report.json beside coharden's record
    folder = out / "logs" / "otter-run" / "otter" / BC
    assert sorted(p.name for p in folder.iterdir()) == [".coharden-name", "mpe.json", "patch.diff", "report.json",
                                                        "run_instance.log"]
    assert json.loads((folder / "mpe.json").read_text()) == rows[0]
    entry = json.loads((folder / "report.json").read_text())[BC]
    assert {"patch_is_None", "patch_exists", "patch_successfully_applied", "resolved", "tests_status"} <= set(entry)
    assert entry["patch_exists"] is entry["patch_successfully_applied"] is True
    assert entry["resolved"] is rows[0]["fail_to_pass"] is True
    assert entry["tests_status"]["FAIL_TO_PASS"]["success"] == rows[0]["test_ids"]
    assert set(entry["tests_status"]) == {"FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL"}
    assert entry["test_class"] == lax_class
    empty = json.loads((out / "logs" / "otter-run" / "empty" / BC / "report.json").read_text())[BC]
    assert (empty["patch_exists"], empty["patch_successfully_applied"], empty["resolved"]) == (False, False, False)

    # --instance_ids (and --id) pick instances in a batch: only the runnable one, served from the store, exit 0
    again = CliRunner().invoke(app, [*args, "--instance_ids", BC, "--run_id", "picked"])
    assert again.exit_code == 0, again.output
    picked = [json.loads(line) for line in (out / "mpe.jsonl").read_text().splitlines()]
    assert [(r["instance_id"], r["model_name_or_path"]) for r in picked] == [(BC, "otter"), (BC, "empty")]
    assert (out / "logs" / "picked" / "otter" / BC / "report.json").is_file()


def test_a_log_folder_that_cannot_be_written_is_that_instance_s_error(inputs: dict[str, Path]) -> None:
    root = inputs["root"]
    preds = root / "one.jsonl"
    preds.write_text(inputs["predictions"].read_text().splitlines()[0] + "\n")
    out = root / "out"
    blocker = out / "logs" / "out" / "otter" / BC  # a file where the instance's folder goes
    blocker.parent.mkdir(parents=True)
    blocker.write_text("")
    result = CliRunner().invoke(app, ["mpe", "--instances", str(inputs["records"]), "--predictions", str(preds),
                                      "--output", str(out), "-w", "1", *FAST])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert _flat(f"error: {BC}: its log folder was not written") in _flat(result.stderr)
    [row] = [json.loads(line) for line in (out / "mpe.jsonl").read_text().splitlines()]
    assert row["test_class"] not in ("Error", None)  # the verdict stands; the batch wrote its outputs
    summary = json.loads((out / "summary.json").read_text())
    assert "its log folder was not written" in summary["errors"][BC]


def test_no_field_formatted_as_a_number_crashes_the_log_or_the_summary() -> None:
    """A row from an older store or a mutant that could not be graded holds None (or no number) where the log
    formats a number: time, laxity, interval, counts."""
    row = {"instance_id": "i", "model_name_or_path": "m", "test_class": "Lax", "laxity": 0.25,
           "interval": [None, 0.5], "matrix_counts": {"alpha": None, "beta": "3"}, "stop": None,
           "timings": {"total": None, "mutants": None, "f2p": 1.5}, "test_ids": ["t::a"],
           "candidate_buggy": {"outcome": "FAIL", "tests": {"t::a": ["FAILED"]}},
           "candidate_fixed": None, "mutants": [{"cell": None, "mutant": None}, "junk"]}
    text = run_log(row)
    assert "laxity: 0.250 [-, 0.500]; matrix alpha/beta/gamma/delta -/3/0/0; stop: -" in text
    assert stage_times([row]) == {"f2p": 1.5}
    assert summarize([row, {**row, "laxity": None}], [0.1])["cutoffs"] == [{"cutoff": 0.1, "Rigorous": 0, "Lax": 0}]
    report = harness_report(Prediction(instance_id="i", model_name_or_path="m", model_patch=None), row)["i"]
    assert report["patch_is_None"] is True
    assert report["resolved"] is False
    assert report["tests_status"]["FAIL_TO_PASS"]["failure"] == ["t::a"]  # no verdict on the fixed code
    assert report["tests_status"]["FAIL_TO_FAIL"]["success"] == []


def test_eval_without_matplotlib_says_so_before_any_grading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: its import fails
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": BC, "model_name_or_path": "x",
                                 "model_patch": (EX / "boundary_check/candidates/lax.patch").read_text()}) + "\n")
    result = CliRunner().invoke(app, ["eval", "--instances", str(EX / "boundary_check"), "--tests", str(preds),
                                      "-o", str(tmp_path / "ev"), "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2, result.output
    said = _flat(result.output)
    assert _flat("report.html needs matplotlib") in said
    assert _flat("pip install 'coharden[report]'") in said
    assert "--no-html" in said
    assert not (tmp_path / "ev" / "report.json").exists()


def test_eval_of_an_empty_records_file_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": BC, "model_name_or_path": "x", "model_patch": ""}) + "\n")
    result = CliRunner().invoke(app, ["eval", "--dataset_name", str(empty), "--tests", str(preds), "--no-html",
                                      "-o", str(tmp_path / "ev"), "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2, result.output
    assert _flat(f"error: --instances: {empty} holds no instance") in _flat(result.output)
