"""SWE-bench datasets by name (issue 34, item 13): ``princeton-nlp/SWE-bench_Verified``, the harness's aliases
and ``NAME:SPLIT`` resolve to a local copy under ``$COHARDEN_DATASETS`` or the cache, never the network; a
missing copy is one error line that says where to put it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import CALC_FILES, CALC_FIX, GOOD_TEST, calc_test_file, make_patch, make_repo
from typer.testing import CliRunner

from coharden.cli import app
from coharden.datasets import parse_name, resolve_records
from coharden.errors import InstanceError
from coharden.instances import load_instances, load_records


def _record(instance_id: str, **fields: str) -> str:
    return json.dumps({"instance_id": instance_id, "repo": "acme/calc", "base_commit": "c0ffee", **fields}) + "\n"


def test_names_aliases_and_splits_parse_as_the_harness_names_them() -> None:
    assert parse_name("princeton-nlp/SWE-bench_Verified") == ("princeton-nlp", "SWE-bench_Verified", "test")
    assert parse_name("SWE-bench/SWE-bench_Lite:dev") == ("SWE-bench", "SWE-bench_Lite", "dev")
    assert parse_name("lite") == ("SWE-bench", "SWE-bench_Lite", "test")
    assert parse_name("SWEbench") == ("SWE-bench", "SWE-bench", "test")
    assert parse_name("verified:test") == ("SWE-bench", "SWE-bench_Verified", "test")
    assert parse_name("records") is None
    assert parse_name("a/b/c") is None


def test_a_dataset_name_loads_the_local_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    (data / "princeton-nlp__SWE-bench_Verified").mkdir(parents=True)
    (data / "princeton-nlp__SWE-bench_Verified" / "test.jsonl").write_text(_record("acme__calc-1") +
                                                                         _record("acme__calc-2"))
    (data / "SWE-bench" / "SWE-bench_Lite").mkdir(parents=True)
    (data / "SWE-bench" / "SWE-bench_Lite" / "dev.json").write_text("[" + _record("acme__calc-3") + "]")
    monkeypatch.setenv("COHARDEN_DATASETS", f"{tmp_path / 'empty'}:{data}")
    ids = [i.instance_id for i in load_records(Path("princeton-nlp/SWE-bench_Verified"))]
    assert ids == ["acme__calc-1", "acme__calc-2"]
    # the datasets' other owner and the harness's alias name the same copy
    assert [i.instance_id for i in load_records(Path("SWE-bench/SWE-bench_Verified"))] == ids
    assert [i.instance_id for i in load_records(Path("verified"))] == ids
    assert [i.instance_id for i in load_records(Path("lite:dev"))] == ["acme__calc-3"]
    chosen = load_instances(Path("verified"), tmp_path / "cache", ["acme__calc-2"])
    assert [li.instance.instance_id for li in chosen] == ["acme__calc-2"]
    # a path that exists wins over a dataset of the same name
    local = tmp_path / "SWE-bench"
    local.mkdir()
    (local / "SWE-bench_Verified").write_text(_record("mine-1"))
    monkeypatch.chdir(tmp_path)
    assert [i.instance_id for i in load_records(Path("SWE-bench/SWE-bench_Verified"))] == ["mine-1"]


def test_no_local_copy_is_one_error_line_that_says_where_to_put_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COHARDEN_DATASETS", raising=False)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InstanceError, match="save its records as JSON Lines at .*cache/datasets/princeton-nlp__"
                                            "SWE-bench_Verified/test.jsonl"):
        resolve_records(Path("princeton-nlp/SWE-bench_Verified"))
    result = CliRunner().invoke(app, ["verify", "princeton-nlp/SWE-bench_Verified", "--id", "x"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: princeton-nlp/SWE-bench_Verified: no such file")
    assert "Traceback" not in result.output
    missing = CliRunner().invoke(app, ["verify", "data/records.jsonl"])  # a missing records file stays that
    assert missing.output.strip() == "error: data/records.jsonl: file not found"


def test_verify_by_dataset_name_runs_the_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, base = make_repo(tmp_path / "repos" / "acme__calc", CALC_FILES)
    record = _record("acme__calc-1", base_commit=base, patch=make_patch(repo, CALC_FIX),
                     test_patch=make_patch(repo, calc_test_file(GOOD_TEST)))
    data = tmp_path / "data" / "SWE-bench__SWE-bench_Verified"
    data.mkdir(parents=True)
    (data / "test.jsonl").write_text(record)
    monkeypatch.setenv("COHARDEN_DATASETS", str(tmp_path / "data"))
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["verify", "princeton-nlp/SWE-bench_Verified", "--id", "acme__calc-1",
                                      "--repos", str(tmp_path / "repos"), "--test", "golden", "--json",
                                      "--store", str(tmp_path / "s.sqlite"), "--timeout", "60"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["instance_id"] == "acme__calc-1"
    assert verdict["fail_to_pass"] is True
