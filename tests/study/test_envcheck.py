"""study envcheck: golden tests of SWE-bench records in their spec environments, failures sorted by cause."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.conftest import make_patch, make_repo
from typer.testing import CliRunner

from coharden.cli.main import app
from coharden.environment.build import BuildError
from coharden.environment.interpreters import find_interpreter
from coharden.execution.testids import harness_ids, runnable_id
from coharden.schema.verdict import Outcome, TestStatus, Verdict
from coharden.study.envcheck import EnvCheckRow, _judge, render_table, summarize


def test_truncated_harness_ids_run_as_their_base_test() -> None:
    assert runnable_id("tests/t.py::test_a[a") == "tests/t.py::test_a"
    assert runnable_id("tests/t.py::test_a[a b]") == "tests/t.py::test_a[a b]"
    assert runnable_id("test_x (m.C)") == "test_x (m.C)"
    assert runnable_id("t.py::test_f[list[int]") == "t.py::test_f"  # cut inside a nested bracket
    assert runnable_id("t.py::test_f[list[int]]") == "t.py::test_f[list[int]]"
    assert runnable_id("t.py::C::test_u[/test_utils.py]") == "t.py::C::test_u"  # a shortened path
    assert runnable_id("t.py::test_e[http://fe80::1-InvalidURL]") == "t.py::test_e"  # '::' in a parameter
    assert harness_ids(["[100%]", "t.py::a", "t.py::a", "t.py::b[x"]) == ["t.py::a", "t.py::b[x"]


def _v(outcome: Outcome, tests: dict | None = None, reason: str = "") -> Verdict:  # type: ignore[type-arg]
    return Verdict(outcome=outcome, tests=tests or {}, reason=reason)


def _row() -> EnvCheckRow:
    return EnvCheckRow("x-1", "acme/widget", "1.0", False)


def test_judge_sorts_failures_by_cause() -> None:
    ok = _v(Outcome.PASS, {"a": [TestStatus.PASSED], "b": [TestStatus.PASSED]})
    failing = _v(Outcome.FAIL, {"a": [TestStatus.FAILED]}, "a: boom")
    row = _row()
    assert not _judge(row, ["a"], ["b"], failing, ok)
    row = _row()
    assert _judge(row, ["a"], ["b"], ok, ok)
    assert row.category == "tests"
    assert "passes on the buggy code" in row.reason
    row = _row()
    net = _v(Outcome.FAIL, {"a": [TestStatus.FAILED], "b": [TestStatus.PASSED]},
             "a: OSError: [Errno 101] Network is unreachable")
    assert _judge(row, ["a"], ["b"], failing, net)
    assert row.category == "network"
    assert row.failing == ["a"]
    row = _row()
    kept = _v(Outcome.FAIL, {"a": [TestStatus.PASSED], "b": [TestStatus.PASSED], "c": [TestStatus.ERROR]}, "c: e")
    assert _judge(row, ["a"], ["b", "c"], failing, kept)
    assert row.category == "tests"
    assert row.failing == ["c"]
    assert "1 PASS_TO_PASS" in row.reason
    row = _row()
    assert _judge(row, ["a"], [], failing, _v(Outcome.HARNESS_ERROR, reason="no output"))
    assert row.category == "tests"
    assert "HARNESS_ERROR" in row.reason
    row = _row()
    broken = _v(Outcome.HARNESS_ERROR, reason="pytest produced no results")
    broken.output_tail = "ModuleNotFoundError: No module named 'importlib_metadata'"
    assert _judge(row, ["a"], [], broken, broken)
    assert row.category == "import"
    assert "importlib_metadata" in row.reason
    row = _row()
    assert _judge(row, ["a"], [], failing, _v(Outcome.TIMEOUT, reason="killed"))
    assert row.category == "timeout"


def test_offline_data_and_https_stand_ins_count_as_network() -> None:
    failing = _v(Outcome.FAIL, {"a": [TestStatus.FAILED]}, "a: boom")
    stale = _v(Outcome.FAIL, {"a": [TestStatus.PASSED], "b": [TestStatus.FAILED]},
               "b: astropy.utils.exceptions.AstropyWarning: leap-second auto-update failed due to the following "
               "exception: IERSStaleWarning('leap-second file is expired.')")
    row = _row()
    assert _judge(row, ["a"], ["b"], failing, stale)
    assert row.category == "network"
    assert row.reason.startswith("data the tests download is stale or missing")
    tls = _v(Outcome.FAIL, {"a": [TestStatus.PASSED], "b": [TestStatus.FAILED]},
             "b: requests.exceptions.SSLError: [SSL: WRONG_VERSION_NUMBER] wrong version number")
    row = _row()
    assert _judge(row, ["a"], ["b"], failing, tls)
    assert row.category == "network"


def test_wanted_tests_skipped_for_an_optional_module_name_it() -> None:
    failing = _v(Outcome.FAIL, {"a": [TestStatus.FAILED]}, "a: boom")
    skipped = _v(Outcome.FAIL, {"a": [TestStatus.PASSED], "b": [TestStatus.SKIPPED], "c": [TestStatus.SKIPPED]},
                 "b: requires cdms2; c: requires cdms2")
    row = _row()
    assert _judge(row, ["a"], ["b", "c"], failing, skipped)
    assert row.category == "import"
    assert "2 wanted tests are skipped" in row.reason
    assert "cdms2 (a conda-only package" in row.reason
    mixed = _v(Outcome.FAIL, {"a": [TestStatus.FAILED], "b": [TestStatus.SKIPPED]}, "b: requires cdms2; a: boom")
    row = _row()
    assert _judge(row, ["a"], ["b"], failing, mixed)
    assert row.category == "tests"  # a real failure is not explained by the skip


def test_a_surprise_in_one_instance_becomes_its_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected exception while building or running one instance is that instance's row, not the batch's
    end."""
    import coharden.environment.derived as derived
    from coharden.config import Settings
    from coharden.schema.instance import Instance
    from coharden.study.envcheck import check_instance

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("IERS table missing")

    monkeypatch.setattr(derived, "instance_environment", boom)
    instance = Instance(instance_id="astropy__astropy-1", repo="astropy/astropy", base_commit="HEAD", version="5.0",
                        environment_setup_commit="HEAD", FAIL_TO_PASS=["t.py::test_a"])
    row = check_instance(instance, tmp_path, Settings(cache_dir=tmp_path / "cache"))
    assert not row.verified
    assert row.category == "install"
    assert "RuntimeError: IERS table missing" in row.reason


def test_table_counts_per_repository() -> None:
    rows = [EnvCheckRow("a-1", "o/a", "1", True), EnvCheckRow("a-2", "o/a", "1", False, "network"),
            EnvCheckRow("b-1", "o/b", "2", False, "install", "pin does not resolve")]
    assert summarize(rows) == {"o/a": {"instances": 2, "verified": 1, "network": 1},
                               "o/b": {"instances": 1, "install": 1}}
    table = render_table(rows)
    assert "| o/a | 2 | 1 | 0 | 0 | 0 | 1 |" in table
    assert "| **all** | 3 | 1 |" in table


HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
FILES = {
    "setup.py": "from setuptools import setup\nsetup(name='widget', version='1.0', packages=['widget'])\n",
    "widget/__init__.py": "def double(x):\n    return x + x + 1\n",
    "tests/__init__.py": "",
    "tests/test_widget.py": "from widget import double\n\ndef test_zero():\n    assert double(0) in (0, 1)\n",
}


@pytest.mark.slow
def test_envcheck_end_to_end_with_a_user_spec(tmp_path: Path) -> None:
    """Two records of a repository the user describes in a specs file: one verifies, one needs the network; a
    third names a version no spec has. The batch goes on and the table says why."""
    try:
        find_interpreter(HERE)
    except BuildError:
        pytest.skip(f"python {HERE} not installed")
    repos = tmp_path / "repos"
    repo, commit = make_repo(repos / "acme__widget", FILES)
    fix = make_patch(repo, {"widget/__init__.py": "def double(x):\n    return x + x\n"})
    good = make_patch(repo, {"tests/test_widget.py": FILES["tests/test_widget.py"]
                             + "\ndef test_two():\n    assert double(2) == 4\n"})
    net = make_patch(repo, {"tests/test_widget.py": FILES["tests/test_widget.py"]
                            + "\ndef test_net():\n    import socket\n    assert double(1) == 2\n"
                            "    socket.create_connection(('192.0.2.1', 80), timeout=5)\n"})
    base = {"repo": "acme/widget", "base_commit": commit, "patch": fix, "version": "1.0",
            "environment_setup_commit": commit, "PASS_TO_PASS": json.dumps(["tests/test_widget.py::test_zero"])}
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(json.dumps(r) for r in [
        {**base, "instance_id": "acme__widget-1", "test_patch": good,
         "FAIL_TO_PASS": json.dumps(["tests/test_widget.py::test_two"]),
         # a line of a pytester run the harness's parser took for a test: no such file here, not run
         "PASS_TO_PASS": json.dumps(["tests/test_widget.py::test_zero", "test_hello.py::test_hello"])},
        {**base, "instance_id": "acme__widget-2", "test_patch": net,
         "FAIL_TO_PASS": json.dumps(["tests/test_widget.py::test_net"])},
        {**base, "instance_id": "acme__widget-3", "test_patch": good, "version": "7.7",
         "FAIL_TO_PASS": json.dumps(["tests/test_widget.py::test_two"])},
    ]) + "\n")
    specs = tmp_path / "specs.yaml"
    specs.write_text(f"repos:\n  acme/widget:\n    log_parser: pytest\n    versions:\n      '1.0':\n"
                     f"        python: '{HERE}'\n        pip_packages: [pytest]\n"
                     f"        install: python -m pip install --no-build-isolation -e .\n"
                     f"        pre_install: ['apt-get install -y libwidget-dev']\n"
                     f"        test_cmd: pytest -rA\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["study", "envcheck", "--records", str(records), "--repos", str(repos),
                                      "--specs", str(specs), "-o", str(out), "--json"],
                                env={"COHARDEN_CACHE": str(tmp_path / "cache")})
    assert result.exit_code == 0, result.output
    rows = {r["instance_id"]: r for r in map(json.loads, (out / "envcheck.jsonl").read_text().splitlines())}
    assert rows["acme__widget-1"]["verified"], rows["acme__widget-1"]
    assert rows["acme__widget-2"]["category"] == "network"
    assert "coharden env system acme/widget --run" in rows["acme__widget-2"]["reason"]  # the skipped apt-get
    assert rows["acme__widget-3"]["category"] == "install"
    assert "known: 1.0" in rows["acme__widget-3"]["reason"]
    assert rows["acme__widget-1"]["absent"] == 1
    assert "| acme/widget | 3 | 1 |" in (out / "envcheck.md").read_text()
    assert "- `acme__widget-1`: 1" in (out / "envcheck.md").read_text()


def test_agreement_with_the_harness_resolved_and_per_test(tmp_path: Path) -> None:
    from coharden.errors import CoHardenError
    from coharden.study.agreement import compare, load_predictions, render

    def status(f2p_ok: list[str], f2p_bad: list[str], p2p_ok: list[str]) -> dict:  # type: ignore[type-arg]
        return {"FAIL_TO_PASS": {"success": f2p_ok, "failure": f2p_bad},
                "PASS_TO_PASS": {"success": p2p_ok, "failure": []}}

    harness = tmp_path / "preds.jsonl"
    harness.write_text("\n".join(json.dumps(r) for r in [
        {"instance_id": "o__a-1", "resolved": True,
         "tests_status": status(["t1"], [], ["p1", "p2[x", "f.py::p3[a", "test_bare"])},
        {"instance_id": "o__a-2", "resolved": False, "tests_status": status([], ["t2"], ["p1"])},
        {"instance_id": "o__b-3", "resolved": True, "tests_status": status(["t3"], [], [])},
    ]) + "\n")
    report = {"instances": {"errors": {"o__b-3": "environment failed"}, "fix_errors": {}},
              "fixes": {"mini": {"instances": {
                  "o__a-1": {"resolved": True,
                             "tests_status": status(["t1"], [], ["p1", "f.py::p3", "g.py::test_bare"])},
                  "o__a-2": {"resolved": True, "outcome": "PASS", "tests_status": status(["t2"], [], ["p1"])},
                  "o__b-3": {"error": "environment failed"}}}}}
    result = compare(report, load_predictions(harness))
    assert (result.compared, result.resolved_agree) == (2, 1)
    assert (result.tests_compared, result.tests_agree, result.tests_unreported) == (6, 5, 1)
    assert [d.instance_id for d in result.disagreements] == ["o__a-2"]
    assert result.disagreements[0].tests == ["t2"]
    assert "o__b-3" in result.not_graded
    assert "resolved: 1 / 2 agree (50.0 %)" in render(result)
    with pytest.raises(CoHardenError, match="no fix system 'other'"):
        compare(report, load_predictions(harness), "other")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "x"}\n')
    with pytest.raises(CoHardenError, match="no 'resolved' field"):
        load_predictions(bad)


def test_binary_stub_diffs_are_dropped_like_the_harness_does() -> None:
    from coharden.patches import drop_binary_stubs, touched_files

    text = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
            "diff --git a/plot.png b/plot.png\nnew file mode 100644\nindex 00000000..50466939\n"
            "Binary files /dev/null and b/plot.png differ\n")
    kept, dropped = drop_binary_stubs(text)
    assert dropped == ["plot.png"]
    assert touched_files(kept) == ["m.py"]
    assert drop_binary_stubs("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x\n+y\n")[1] == []
