"""Loading instances: SWE-bench records (JSON / JSONL), local instance directories, repository resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import CALC_FILES, CALC_FIX, calc_test_file, make_patch, write_files

from coharden.errors import InstanceError, RepoError
from coharden.instances import load_instances, load_local, load_records, resolve_repo
from coharden.schema.instance import Instance


def _record(**overrides: object) -> dict:
    record = {
        "instance_id": "o__n-1",
        "repo": "owner/name",
        "base_commit": "abc123",
        "problem_statement": "add() subtracts",
        "patch": "",
        "test_patch": "",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
        "PASS_TO_PASS": json.dumps([]),
        "version": 1.2,
    }
    record.update(overrides)
    return record


def test_jsonl_records_with_json_string_lists(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    second = _record(instance_id="o__n-2", FAIL_TO_PASS='["a.py::test_x", "a.py::test_y"]', PASS_TO_PASS="")
    path.write_text(json.dumps(_record()) + "\n\n" + json.dumps(second) + "\n")
    first, other = load_records(path)
    assert first.FAIL_TO_PASS == ["tests/test_calc.py::test_add"]
    assert first.PASS_TO_PASS == []
    assert first.version == "1.2"
    assert other.FAIL_TO_PASS == ["a.py::test_x", "a.py::test_y"]
    assert other.PASS_TO_PASS == []
    # plain lists load too, and a JSON file holding a list
    as_json = tmp_path / "records.json"
    as_json.write_text(json.dumps([_record(FAIL_TO_PASS=["t.py::test_z"])]))
    assert load_records(as_json)[0].FAIL_TO_PASS == ["t.py::test_z"]


def test_malformed_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(_record()) + "\n" + '{"instance_id": "broken", \n' + json.dumps(_record()) + "\n")
    with pytest.raises(InstanceError) as info:
        load_records(path)
    assert f"{path}:2:" in str(info.value)
    assert "malformed JSON line" in str(info.value)


def test_record_missing_base_commit_names_the_field(tmp_path: Path) -> None:
    record = _record()
    del record["base_commit"]
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(_record(instance_id="ok")) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(InstanceError) as info:
        load_records(path)
    message = str(info.value)
    assert f"{path}:2:" in message
    assert "base_commit" in message


def test_bad_fail_to_pass_string_is_an_instance_error(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(_record(FAIL_TO_PASS="[not json")) + "\n")
    with pytest.raises(InstanceError, match=r"records\.jsonl:1: .*FAIL_TO_PASS"):
        load_records(path)


def test_duplicate_ids_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(_record()) + "\n" + json.dumps(_record()) + "\n")
    with pytest.raises(InstanceError, match="duplicate instance_id"):
        load_records(path)
    with pytest.raises(InstanceError, match="file not found"):
        load_records(tmp_path / "nope.jsonl")


def test_owner_name_resolved_under_repos_dir(tmp_path: Path, repo_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    repos = tmp_path / "repos"
    repo, _ = repo_factory({"a.py": "x = 1\n"}, name="repos/owner__name")
    instance = Instance.model_validate(_record())
    assert resolve_repo(instance, repos) == repo.resolve()
    with pytest.raises(RepoError, match="--repos"):
        resolve_repo(instance, None)
    with pytest.raises(RepoError, match="not found"):
        resolve_repo(instance, tmp_path / "elsewhere")


def test_not_a_git_repository_is_repo_error(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("x = 1\n")
    instance = Instance.model_validate(_record(repo=str(plain)))
    with pytest.raises(RepoError, match="not a git repository"):
        resolve_repo(instance, None)
    missing = Instance.model_validate(_record(repo=str(tmp_path / "missing")))
    with pytest.raises(RepoError, match="does not exist"):
        resolve_repo(missing, None)


def _local_instance_dir(root: Path) -> Path:
    """An instance directory with a manifest, patch files and a plain (non-git) project directory."""
    directory = root / "calc-bug"
    write_files(directory / "project", CALC_FILES)
    # patches are made in a scratch git copy of the project
    from tests.conftest import make_repo

    scratch, _ = make_repo(root / "scratch", CALC_FILES)
    (directory / "fix.diff").write_text(make_patch(scratch, CALC_FIX))
    for name, check in (("test", "add(2, 3) == 5"), ("weak", "add(0, 0) == 0")):
        patch = make_patch(scratch, calc_test_file(f"def test_add():\n    assert {check}"))
        (directory / f"{name}.diff").write_text(patch)
    (directory / "issue.md").write_text("add() subtracts\n")
    (directory / "instance.yaml").write_text(
        "repo: project\n"
        "problem_statement: issue.md\n"
        "patch: fix.diff\n"
        "test_patch: test.diff\n"
        "FAIL_TO_PASS: ['tests/test_calc.py::test_add']\n"
        "candidates:\n"
        "  - {name: weak, patch: weak.diff, label: lax}\n"
    )
    return directory


def test_local_instance_directory_is_materialized_deterministically(tmp_path: Path) -> None:
    directory = _local_instance_dir(tmp_path)
    local = load_local(directory, tmp_path / "cache1")
    inst = local.instance
    assert inst.instance_id == "calc-bug"
    assert inst.problem_statement == "add() subtracts\n"
    assert inst.patch == (directory / "fix.diff").read_text()
    assert inst.test_patch == (directory / "test.diff").read_text()
    assert inst.FAIL_TO_PASS == ["tests/test_calc.py::test_add"]
    assert [(c.name, c.label) for c in local.candidates] == [("weak", "lax")]
    repo = Path(inst.repo)
    assert (repo / ".git").is_dir()
    assert str(repo).startswith(str(tmp_path / "cache1"))
    assert resolve_repo(inst, None) == repo
    # the project directory itself is not turned into a repository
    assert not (directory / "project" / ".git").exists()
    # same content -> same commit, even in a fresh cache; loading again reuses the cached repository
    again = load_local(directory, tmp_path / "cache1").instance
    assert again.base_commit == inst.base_commit
    assert again.repo == inst.repo
    fresh = load_local(directory, tmp_path / "cache2").instance
    assert fresh.base_commit == inst.base_commit
    assert fresh.repo != inst.repo
    # different content -> a different commit
    (directory / "project" / "calc" / "extra.py").write_text("y = 2\n")
    changed = load_local(directory, tmp_path / "cache1").instance
    assert changed.base_commit != inst.base_commit
    # load_instances picks the directory form
    assert load_instances(directory, tmp_path / "cache2")[0].instance.base_commit == changed.base_commit


def test_local_instance_errors_name_the_manifest_field(tmp_path: Path) -> None:
    directory = _local_instance_dir(tmp_path)
    manifest = directory / "instance.yaml"
    manifest.write_text(manifest.read_text().replace("test_patch: test.diff", "test_patch: missing.diff"))
    with pytest.raises(InstanceError, match=r"instance\.yaml: field test_patch: file 'missing\.diff' not found"):
        load_local(directory, tmp_path / "cache")
    with pytest.raises(InstanceError, match="no instance manifest"):
        load_local(tmp_path, tmp_path / "cache")
