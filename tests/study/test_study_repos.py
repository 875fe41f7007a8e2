"""The real-bugs study beyond sympy: instances chosen by an envcheck output, each run in its spec environment."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.study.test_study import _study_data_dir, _write_jsonl

from coharden.config import Settings
from coharden.environment.build import BuildError
from coharden.environment.interpreters import find_interpreter
from coharden.execution.store import Store
from coharden.schema.mpe_config import MPEConfig
from coharden.study.data import StudyError, StudySource, load_data
from coharden.study.real_bugs import RealBugsStudy, StudyConfig
from coharden.study.report import write_report

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"

# the study's plumbing on a toy pool: the paper's point rule (N per operator) decides classes the honest interval
# over so few distinct behaviours cannot (issue 50; that rule is checked in tests/test_plausible_pool.py)
PAPER_RULE = MPEConfig(paper_classes=True)


def _spec_data(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """The offline study data of test_study, its records turned into SWE-bench records of two repositories'
    versions (one with a spec, one without), an envcheck output verifying both, and a spec file."""
    repos = tmp_path / "repos"
    repos.mkdir()
    data = _study_data_dir(tmp_path, repos)
    (record,) = [json.loads(line) for line in (data / "swebench_verified_sympy.jsonl").read_text().splitlines()]
    record["environment_setup_commit"] = record["base_commit"]
    other = {**record, "instance_id": "example__throttle-2", "version": "9.9"}  # no spec for this version
    records = tmp_path / "records.jsonl"
    _write_jsonl(records, [record, other])
    (data / "swtbench_verified_ids.txt").write_text("example__throttle-1\nexample__throttle-2\n")
    envcheck = tmp_path / "envcheck"
    _write_jsonl(envcheck / "envcheck.jsonl", [
        {"instance_id": "example__throttle-1", "repo": "example/throttle", "version": "1.0", "verified": True},
        {"instance_id": "example__throttle-2", "repo": "example/throttle", "version": "9.9", "verified": True},
        {"instance_id": "example__throttle-3", "repo": "example/throttle", "version": "1.0", "verified": False,
         "category": "network", "reason": "needs httpbin"}])
    specs = tmp_path / "specs.yaml"
    specs.write_text("repos:\n  example/throttle:\n    log_parser: pytest\n    versions:\n"
                     f"      '1.0': {{python: '{HERE}', pip_packages: [pytest], test_cmd: 'pytest -rA'}}\n")
    return data, records, envcheck, specs


def test_envcheck_output_chooses_the_instances_and_bad_files_are_refused(tmp_path: Path) -> None:
    data, records, envcheck, _ = _spec_data(tmp_path)
    source = StudySource(data, records=records, envcheck=envcheck)
    loaded = load_data(source, ["tests/"])
    assert loaded.spec_envs
    assert loaded.env_field == "verified"
    assert loaded.env_source == "envcheck/envcheck.jsonl"  # outside the data directory: no machine path
    assert loaded.study_ids == ["example__throttle-1", "example__throttle-2"]
    narrowed = load_data(StudySource(data, records=records, envcheck=envcheck, only_repos=["acme/other"]),
                         ["tests/"])
    assert narrowed.study_ids == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1}) + "\n")
    with pytest.raises(StudyError, match="not an envcheck output"):
        load_data(StudySource(data, records=records, envcheck=bad), ["tests/"])
    with pytest.raises(StudyError, match="--envcheck"):
        load_data(StudySource(data), ["tests/"])


@pytest.mark.slow
@pytest.mark.timeout(900)  # builds a spec environment (pytest from the package index) first
def test_study_runs_each_instance_in_its_spec_environment(tmp_path: Path) -> None:
    try:
        find_interpreter(HERE)
    except BuildError:
        pytest.skip(f"python {HERE} not installed under pyenv or on PATH")
    data, records, envcheck, specs = _spec_data(tmp_path)
    settings = Settings(repos_dir=tmp_path / "repos", store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache",
                        timeout=120, workers=1, swebench_specs=specs)
    loaded = load_data(StudySource(data, records=records, envcheck=envcheck), settings.tests.test_patterns)
    config = StudyConfig(workers=1, bytecode=[], mpe=PAPER_RULE)
    with RealBugsStudy(loaded, settings, Store(settings.store), config) as study:
        rows = study.run(phases=("verify", "golden", "grade"))
        env_id = study.settings_for(loaded.instances["example__throttle-1"])[1]
    assert "/envs/spec-throttle-1.0-" in env_id  # the spec environment's interpreter, not this one
    verified = {r["instance_id"]: r for r in rows["verify"]}
    assert verified["example__throttle-1"]["fail_to_pass"]
    assert verified["example__throttle-1"]["agree"]
    # the version without a spec: the row says why and the study went on (nothing stored: a rerun retries)
    failed = verified["example__throttle-2"]
    assert failed["environment_error"]
    assert "no spec for example/throttle version '9.9'" in failed["error"]
    classes = {r["system"]: r["test_class"] for r in rows["mpe"]}
    assert classes == {"Otter": "Lax", "Otter++": "Rigorous", "AssertFlip": "Misaligned"}
    (golden,) = rows["golden"]
    assert golden["mpe"]["matrix_counts"]["beta"] == golden["mpe"]["matrix_counts"]["gamma"] == 0
    write_report(study, rows, tmp_path / "out")
    report = (tmp_path / "out" / "real_bugs_report.md").read_text()
    assert "spec environments" in report
    assert str(tmp_path) not in report  # relative names only
