"""Verified reproduction (``coharden reproduce``): F->P checks between a buggy and a patched commit, the
AST mock detector, the run-time import probe, generation with a mock model, and issue mining."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from tests.conftest import make_patch, make_repo, run_git, write_files
from typer.testing import CliRunner

from coharden.cli import app
from coharden.config import Settings
from coharden.environment.attempt_log import AttemptLog
from coharden.environment.mining import changes_code, load_export, mine, write_records
from coharden.environment.mockdetect import ProjectIndex, changed_symbols, find_mocks, module_names
from coharden.environment.reproduce import Expectation, ReproductionJob, check_reproduction
from coharden.environment.reproduce_generate import GenerationRequest, generate_reproduction
from coharden.execution.sandbox import bwrap_path
from coharden.llm import LLMClient, LLMConfig, MockLLMServer

FIXTURES = Path(__file__).parents[1] / "fixtures" / "env"
KEY_VAR = "COHARDEN_TEST_REPRO_LLM_KEY"

BUGGY = {
    "ratios/__init__.py": "",
    "ratios/net.py": """\
        def fetch_rate(currency):
            import urllib.request

            with urllib.request.urlopen(f"https://rates.example/{currency}") as reply:
                return float(reply.read())
        """,
    "ratios/core.py": """\
        from ratios.net import fetch_rate


        def parse_ratio(text):
            left, right = text.split(":")
            return int(left) / int(right)


        def convert(amount, currency):
            return amount * fetch_rate(currency)
        """,
    "tests/__init__.py": "",
    "tests/test_core.py": """\
        from ratios.core import parse_ratio


        def test_half():
            assert parse_ratio("1:2") == 0.5
        """,
}
FIXED_CORE = """\
    from ratios.net import fetch_rate


    def parse_ratio(text):
        left, right = text.split(":")
        if int(right) == 0:
            raise ValueError("denominator must not be zero")
        return int(left) / int(right)


    def convert(amount, currency):
        return amount * fetch_rate(currency)
    """
ISSUE = "parse_ratio('1:0') raises ZeroDivisionError; it should raise a ValueError about the denominator."

GOOD_TEST = """\
    import pytest

    from ratios.core import parse_ratio


    def test_zero_denominator():
        with pytest.raises(ValueError, match="denominator"):
            parse_ratio("1:0")
    """
# F->P, but it replaces the function under test (with a wrapper of the real one): the detector rejects it
MOCKED_TEST = """\
    import pytest

    from ratios import core


    def test_zero_denominator(monkeypatch):
        real = core.parse_ratio
        monkeypatch.setattr(core, "parse_ratio", lambda text: real(text))
        with pytest.raises(ValueError):
            core.parse_ratio("1:0")
    """
# mocks the function under test outright: passes everywhere, and the detector flags it
PATCHED_OUT_TEST = """\
    from unittest import mock

    import pytest

    from ratios import core


    @mock.patch("ratios.core.parse_ratio", side_effect=ValueError("denominator"))
    def test_zero_denominator(_parse):
        with pytest.raises(ValueError):
            core.parse_ratio("1:0")
    """
# mocks only the network boundary: accepted
BOUNDARY_TEST = """\
    import pytest

    from ratios import core


    def test_convert_and_zero(monkeypatch):
        monkeypatch.setattr("ratios.core.fetch_rate", lambda currency: 2.0)
        assert core.convert(3, "EUR") == 6.0
        with pytest.raises(ValueError):
            core.parse_ratio("1:0")
    """


@pytest.fixture
def bug_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """(repo, buggy commit, patched commit); the patched commit also changes a test (left out of the fix)."""
    repo, buggy = make_repo(tmp_path / "ratios", BUGGY)
    write_files(repo, {"ratios/core.py": FIXED_CORE,
                       "tests/test_core.py": BUGGY["tests/test_core.py"] + "\n\ndef test_one():\n"
                                             "    assert parse_ratio('2:2') == 1\n"})
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "--quiet", "--no-gpg-sign", "-m", "fix")
    patched = run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "checkout", "--quiet", buggy)
    return repo, buggy, patched


def repro_patch(repo: Path, body: str, path: str = "tests/test_repro.py") -> str:
    return make_patch(repo, {path: textwrap.dedent(body)})




def check(name: str, report) -> bool:  # type: ignore[no-untyped-def]
    return next(c.ok for c in report.checks if c.name == name)


# --- checks ------------------------------------------------------------------------------------------------------
def test_real_fail_to_pass_test_is_accepted(bug_repo: tuple[Path, str, str], settings: Settings) -> None:
    repo, buggy, patched = bug_repo
    job = ReproductionJob(repo, buggy, patched=patched, expect=Expectation(exception="ZeroDivisionError"))
    report = check_reproduction(job, repro_patch(repo, GOOD_TEST), settings)
    assert report.accepted, report.reasons
    assert report.test_ids == ["tests/test_repro.py::test_zero_denominator"]
    assert report.buggy is not None
    assert report.buggy.failed
    assert report.patched is not None
    assert report.patched.passed
    assert "ratios.core.parse_ratio" in report.imported_project
    assert report.mocks == []
    probe = next(c for c in report.checks if c.name == "imports_real_code_at_run_time")
    assert probe.ok
    assert "ratios.core" in probe.detail


@pytest.mark.skipif(bwrap_path() is None, reason="bwrap cannot build a sandbox here: the probe would run unconfined")
def test_the_import_probe_runs_in_the_sandbox(bug_repo: tuple[Path, str, str], settings: Settings,
                                              tmp_path: Path) -> None:
    """The import probe is a run of the candidate's test on the fix like every other: a test that writes beside
    the repository (outside its worktree) on the fixed code leaves nothing there (it ran unconfined)."""
    repo, buggy, patched = bug_repo
    planted = tmp_path / "planted-by-the-probe"
    plant = f"        try:\n            open({str(planted)!r}, 'w')\n        except OSError:\n            pass\n"
    hostile = GOOD_TEST.replace("        with pytest.raises(", plant + "        with pytest.raises(", 1)
    assert hostile != GOOD_TEST
    report = check_reproduction(ReproductionJob(repo, buggy, patched=patched), repro_patch(repo, hostile), settings)
    assert check("imports_real_code_at_run_time", report), report.reasons
    assert not planted.exists()


def test_test_mocking_the_function_under_test_is_rejected(bug_repo: tuple[Path, str, str],
                                                          settings: Settings) -> None:
    repo, buggy, patched = bug_repo
    report = check_reproduction(ReproductionJob(repo, buggy, patched=patched), repro_patch(repo, MOCKED_TEST), settings)
    assert not report.accepted
    assert check("fails_on_buggy", report)  # it is fail-to-pass ...
    assert check("passes_on_patched", report)
    assert not check("no_mocked_code_under_test", report)  # ... and still rejected
    [finding] = report.mocks
    assert finding.severity == "error"
    assert finding.call == "monkeypatch.setattr"
    assert finding.target == "ratios.core.parse_ratio"
    assert "which the fix changes" in finding.reason


def test_patched_out_function_is_rejected(bug_repo: tuple[Path, str, str], settings: Settings) -> None:
    repo, buggy, patched = bug_repo
    job = ReproductionJob(repo, buggy, patched=patched)
    report = check_reproduction(job, repro_patch(repo, PATCHED_OUT_TEST), settings)
    assert not report.accepted
    assert not check("fails_on_buggy", report)
    assert not check("no_mocked_code_under_test", report)
    assert report.mocks[0].call == "patch"
    assert report.mocks[0].target == "ratios.core.parse_ratio"


def test_mocking_a_network_boundary_is_accepted(bug_repo: tuple[Path, str, str], settings: Settings) -> None:
    repo, buggy, patched = bug_repo
    job = ReproductionJob(repo, buggy, patched=patched)
    report = check_reproduction(job, repro_patch(repo, BOUNDARY_TEST), settings)
    assert report.accepted, report.reasons
    [finding] = report.mocks
    assert finding.severity == "ok"
    assert finding.target == "ratios.core.fetch_rate"


def test_expected_failure_must_match(bug_repo: tuple[Path, str, str], settings: Settings) -> None:
    repo, buggy, patched = bug_repo
    patch = repro_patch(repo, GOOD_TEST)
    wrong = check_reproduction(ReproductionJob(repo, buggy, patched=patched, expect=Expectation(exception="KeyError")),
                               patch, settings)
    assert not wrong.accepted
    assert not check("expected_failure", wrong)
    by_message = check_reproduction(ReproductionJob(repo, buggy, patched=patched,
                                                    expect=Expectation(message="division by zero")), patch, settings)
    assert by_message.accepted, by_message.reasons


# names ValueError (and "denominator") in its own source, raises ZeroDivisionError on the buggy code; a second,
# parametrized test raises a KeyError on one of its cases
NAMING_TEST = """\
    import pytest

    from ratios.core import parse_ratio


    def test_zero_denominator():
        with pytest.raises(ValueError, match="denominator"):
            parse_ratio("1:0")


    @pytest.mark.parametrize("text", ["1:0", "x"])
    def test_lookup(text):
        table = {"1:0": "denominator"}
        with pytest.raises(ValueError):
            if table[text]:
                parse_ratio(text)
    """


def test_expected_exception_is_the_raised_type_not_text_in_the_output(bug_repo: tuple[Path, str, str],
                                                                      settings: Settings) -> None:
    """The type comes from the exception object (the stream plugin), never from a search of the failure text,
    where the test's own ``pytest.raises(ValueError, match="denominator")`` line shows up."""
    repo, buggy, patched = bug_repo
    patch = repro_patch(repo, NAMING_TEST)
    one = ["tests/test_repro.py::test_zero_denominator"]
    job = ReproductionJob(repo, buggy, patched=patched, expect=Expectation(exception="ValueError"))
    named = check_reproduction(job, patch, settings, test_ids=one)
    assert not named.accepted
    assert not check("expected_failure", named)
    detail = next(c.detail for c in named.checks if c.name == "expected_failure")
    assert "raised ZeroDivisionError" in detail
    assert named.buggy is not None
    [raised] = named.buggy.raised[one[0]]
    assert raised.bases[:2] == ["ZeroDivisionError", "ArithmeticError"]
    by_message = check_reproduction(ReproductionJob(repo, buggy, patched=patched,
                                                    expect=Expectation(message="denominator")),
                                    patch, settings, test_ids=one)
    assert not check("expected_failure", by_message)  # in the source, not in the exception's message
    by_base = check_reproduction(ReproductionJob(repo, buggy, patched=patched, expect=Expectation(
        exception="ArithmeticError", message="division by zero")), patch, settings, test_ids=one)
    assert check("expected_failure", by_base), by_base.reasons  # a subclass of the expected type counts
    # every failing case must raise it: test_lookup[x] raises KeyError, test_lookup[1:0] ZeroDivisionError
    both = check_reproduction(ReproductionJob(repo, buggy, patched=patched,
                                              expect=Expectation(exception="ZeroDivisionError")), patch, settings)
    assert not check("expected_failure", both)
    assert both.buggy is not None
    assert {r.type for r in both.buggy.raised["tests/test_repro.py::test_lookup"]} == {"KeyError",
                                                                                       "ZeroDivisionError"}


def test_test_passing_on_buggy_code_is_rejected(bug_repo: tuple[Path, str, str], settings: Settings) -> None:
    repo, buggy, patched = bug_repo
    body = "from ratios.core import parse_ratio\n\n\ndef test_third():\n    assert parse_ratio('1:4') == 0.25\n"
    report = check_reproduction(ReproductionJob(repo, buggy, patched=patched), repro_patch(repo, body), settings)
    assert not report.accepted
    assert not check("fails_on_buggy", report)
    assert check("passes_on_patched", report)


def test_stubbed_module_is_rejected_statically_and_at_run_time(bug_repo: tuple[Path, str, str],
                                                               settings: Settings) -> None:
    """A test that replaces the module under test in sys.modules: the detector flags it, and the import probe
    sees a stub instead of the real module."""
    repo, buggy, patched = bug_repo
    body = """\
        import sys
        import types

        import pytest

        import ratios.core as real_core

        stub = types.ModuleType("ratios.core")


        def _parse(text):
            left, right = text.split(":")
            if int(right) == 0:
                raise ValueError("denominator")
            return real_core.parse_ratio(text)


        stub.parse_ratio = _parse
        sys.modules["ratios.core"] = stub


        def test_zero():
            from ratios.core import parse_ratio

            with pytest.raises(ValueError):
                parse_ratio("1:0")
        """
    report = check_reproduction(ReproductionJob(repo, buggy, patched=patched), repro_patch(repo, body), settings)
    assert not report.accepted
    assert any(m.target == "sys.modules['ratios.core']" and m.severity == "error" for m in report.mocks)


def test_run_time_probe_sees_a_stub_module(bug_repo: tuple[Path, str, str], settings: Settings) -> None:
    repo, buggy, patched = bug_repo
    body = """\
        import sys
        from unittest.mock import MagicMock

        import pytest

        import ratios.core


        def test_zero():
            with pytest.raises(ValueError):
                ratios.core.parse_ratio("1:0")
            sys.modules.update({"ratios.core": MagicMock()})
        """
    report = check_reproduction(ReproductionJob(repo, buggy, patched=patched), repro_patch(repo, body), settings)
    assert not report.accepted
    assert check("no_mocked_code_under_test", report)  # dynamic replacement: invisible to the AST detector
    probe = next(c for c in report.checks if c.name == "imports_real_code_at_run_time")
    assert not probe.ok
    assert "not a real module" in probe.detail


def test_test_patch_must_touch_tests_only(bug_repo: tuple[Path, str, str], settings: Settings) -> None:
    repo, buggy, patched = bug_repo
    patch = make_patch(repo, {"tests/test_repro.py": textwrap.dedent(GOOD_TEST), "ratios/extra.py": "X = 1\n"})
    report = check_reproduction(ReproductionJob(repo, buggy, patched=patched), patch, settings)
    assert not report.accepted
    assert not check("test_only", report)


def test_fix_patch_instead_of_patched_commit(bug_repo: tuple[Path, str, str], settings: Settings) -> None:
    repo, buggy, _ = bug_repo
    fix = make_patch(repo, {"ratios/core.py": textwrap.dedent(FIXED_CORE)})
    report = check_reproduction(ReproductionJob(repo, buggy, fix=fix), repro_patch(repo, GOOD_TEST), settings)
    assert report.accepted, report.reasons


# --- the detector --------------------------------------------------------------------------------------------------
def index() -> ProjectIndex:
    idx = ProjectIndex(modules={"ratios", "ratios.core", "ratios.net", "ratios.agent"},
                       changed_modules={"ratios.core"})
    before = "def parse_ratio(t):\n    return 1\n\n\nclass Parser:\n    def run(self):\n        return 1\n\n" \
             "    def other(self):\n        return 2\n"
    after = before.replace("return 1\n\n\nclass", "return 2\n\n\nclass").replace(
        "    def run(self):\n        return 1", "    def run(self):\n        return 3")
    idx.changed_symbols = {f"ratios.core.{s}" for s in changed_symbols(before, after)}
    return idx


def test_changed_symbols() -> None:
    assert index().changed_symbols == {"ratios.core.parse_ratio", "ratios.core.Parser", "ratios.core.Parser.run"}
    assert changed_symbols("def f():\n    return 1\n", "def f():\n    # comment\n    return 1\n") == set()
    assert module_names("src/pkg/mod.py") == ["pkg.mod", "src.pkg.mod"]
    assert module_names("pkg/__init__.py") == ["pkg"]


@pytest.mark.parametrize(("source", "target", "severity"), [
    ('from unittest import mock\n@mock.patch("ratios.core.parse_ratio")\ndef test_a(m): pass\n',
     "ratios.core.parse_ratio", "error"),
    ('from unittest.mock import patch\nfrom ratios import core\n'
     'def test_a():\n    with patch.object(core, "parse_ratio"): pass\n', "ratios.core.parse_ratio", "error"),
    ('def test_a(mocker):\n    mocker.patch("ratios.core.Parser")\n', "ratios.core.Parser", "error"),
    ('from ratios.core import Parser\ndef test_a(mocker):\n    mocker.patch.object(Parser, "run")\n',
     "ratios.core.Parser.run", "error"),
    ('from ratios.core import Parser\ndef test_a(mocker):\n    mocker.patch.object(Parser, "other")\n',
     "ratios.core.Parser.other", "warning"),
    ('def test_a(monkeypatch):\n    monkeypatch.setattr("ratios.core.parse_ratio", len)\n',
     "ratios.core.parse_ratio", "error"),
    ('import ratios.core as rc\ndef test_a(monkeypatch):\n    monkeypatch.delattr(rc, "parse_ratio")\n',
     "ratios.core.parse_ratio", "error"),
    ('from ratios import core\ndef test_a():\n    core.parse_ratio = len\n', "ratios.core.parse_ratio", "error"),
    ('from unittest import mock\n@mock.patch("ratios.parse_ratio")\ndef test_a(m): pass\n',
     "ratios.parse_ratio", "error"),  # re-exported by the package
    ('from ratios.core import parse_ratio\nfrom unittest import mock\n'
     '@mock.patch("tests.test_x.parse_ratio")\ndef test_a(m): pass\n', "tests.test_x.parse_ratio", "error"),
    ('import sys\nfrom unittest import mock\n'
     'def test_a():\n    with mock.patch.dict(sys.modules, {"ratios.core": None}): pass\n',
     "sys.modules['ratios.core']", "error"),
    ('from unittest import mock\n@mock.patch("openai.OpenAI")\ndef test_a(m): pass\n', "openai.OpenAI", "ok"),
    ('def test_a(mocker):\n    mocker.patch("httpx.Client.send")\n', "httpx.Client.send", "ok"),
    ('def test_a(mocker):\n    mocker.patch("ratios.agent.call_llm")\n', "ratios.agent.call_llm", "ok"),
    ('def test_a(mocker):\n    mocker.patch("ratios.agent.plan_steps")\n', "ratios.agent.plan_steps", "warning"),
    ('def test_a(mocker):\n    mocker.patch("time.sleep")\n', "time.sleep", "warning"),
    ('from unittest import mock\ndef test_a():\n    with mock.patch.multiple("ratios.core", parse_ratio=len): pass\n',
     "ratios.core.parse_ratio", "error"),
])
def test_mock_detector(source: str, target: str, severity: str) -> None:
    findings = find_mocks("tests/test_x.py", source, index())
    assert [(f.target, f.severity) for f in findings] == [(target, severity)]


def test_detector_ignores_unrelated_calls() -> None:
    source = "import pytest\ndef test_a(tmp_path):\n    p = tmp_path / 'x'\n    p.write_text('patch')\n" \
             "    obj = object()\n    obj.attr = 1\n"
    assert find_mocks("tests/test_x.py", source, index()) == []


# --- generation with a model ---------------------------------------------------------------------------------------
def llm_for(server: MockLLMServer, monkeypatch: pytest.MonkeyPatch) -> LLMClient:
    monkeypatch.setenv(KEY_VAR, "sk-test")
    return LLMClient(LLMConfig(model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env=KEY_VAR,
                               max_tokens=1024, max_retries=0, timeout=10))


def fenced(body: str) -> str:
    return "```python\n" + textwrap.dedent(body) + "```\n"


def test_generation_refines_from_execution_results(bug_repo: tuple[Path, str, str], settings: Settings,
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    repo, buggy, patched = bug_repo
    rules = [
        {"match": {"contains": "The test was rejected", "last_user": True}, "reply": fenced(GOOD_TEST)},
        {"match": {"contains": "Issue:", "last_user": True}, "reply": fenced(MOCKED_TEST)},
    ]
    log = tmp_path / "gen.jsonl"
    with MockLLMServer(rules) as server:
        job = ReproductionJob(repo, buggy, patched=patched, expect=Expectation(exception="ZeroDivisionError"))
        result = generate_reproduction(job, GenerationRequest(ISSUE), settings, llm_for(server, monkeypatch),
                                       log=AttemptLog(log))
        first_prompt = json.dumps(server.requests[0].messages)
        second_prompt = server.requests[1].messages[-1]["content"]
    assert result.accepted, result.stop_reason
    assert len(result.attempts) == 2
    assert "no_mocked_code_under_test" in second_prompt  # the rejection reasons were fed back
    assert "denominator must not be zero" not in first_prompt  # the model never sees the fix
    assert "def parse_ratio" in first_prompt  # but it sees the buggy code
    assert "tests/test_coharden_reproduction.py" in result.test_patch
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["accepted"] for e in entries] == [False, True]
    assert entries[0]["request_hash"]


def test_generation_fails_closed_on_truncation(bug_repo: tuple[Path, str, str], settings: Settings,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    repo, buggy, patched = bug_repo
    rules = [{"reply": fenced(GOOD_TEST), "finish_reason": "length"}]
    with MockLLMServer(rules) as server:
        result = generate_reproduction(ReproductionJob(repo, buggy, patched=patched), GenerationRequest(ISSUE),
                                       settings, llm_for(server, monkeypatch))
        assert len(server.requests) == 1
    assert not result.accepted
    assert "truncated" in result.stop_reason
    assert result.report is None  # nothing was run from a truncated reply


# --- issue mining --------------------------------------------------------------------------------------------------
def test_mining_keeps_one_to_one_merged_code_changing_pairs(tmp_path: Path) -> None:
    result = mine(load_export([FIXTURES / "mining_export.json"]))
    assert [r.instance_id for r in result.records] == ["acme__agentkit-10", "acme__agentkit-16"]
    assert result.dropped == {"pull not merged": 1, "pull changes no code": 1, "pull closes no exported issue": 1,
                              "issue closed by several pulls": 2, "pull closes several issues": 1}
    first, second = result.records
    assert (first.base_commit, first.patched_commit, first.issue_numbers) == ("1" * 40, "2" * 40, [1])
    assert "calc/core.py" in first.patch
    assert "tests/test_core.py" not in first.patch
    assert "tests/test_core.py" in first.test_patch
    assert first.problem_statement.startswith("ratio() divides by zero")
    assert second.issue_numbers == [7]  # "closes acme/agentkit#7"
    # the diff rebuilt from the pulls/{n}/files entries applies to the buggy code
    repo, _ = make_repo(tmp_path / "agentkit", {
        "agentkit/client.py": 'def base_url(env):\n    return "https://api.openai.com/v1"\n'})
    run_git(repo, "apply", "--check", "-", input=second.patch + second.test_patch)
    out = tmp_path / "records.jsonl"
    write_records(result.records, out)
    from coharden.instances import load_records

    loaded = load_records(out)
    assert [i.instance_id for i in loaded] == ["acme__agentkit-10", "acme__agentkit-16"]
    assert not changes_code("diff --git a/README.md b/README.md\n", ["tests/"])


def test_mining_labels_with_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    export = load_export([FIXTURES / "mining_export.json"])
    rules = [
        {"match": "OPENAI_BASE_URL", "reply": '```json\n{"agent_harness": true, "components": '
                                              '["provider_integration"], "rationale": "client base URL"}\n```'},
        {"match": "ratio", "reply": "not json", "finish_reason": "length"},
    ]
    with MockLLMServer(rules) as server:
        result = mine(export, llm=llm_for(server, monkeypatch))
    first, second = result.records
    assert first.harness_label is None
    assert first.label_error.startswith("the model's reply was truncated")  # fail closed: no label from a cut reply
    assert second.harness_label is not None
    assert second.harness_label["components"] == ["provider_integration"]
    assert result.counts["labelled"] == 1
    assert result.counts["label_errors"] == 1


# --- CLI -----------------------------------------------------------------------------------------------------------
def test_cli_reproduce_check_and_mine(bug_repo: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, buggy, patched = bug_repo
    good = tmp_path / "good.patch"
    good.write_text(repro_patch(repo, GOOD_TEST))
    bad = tmp_path / "bad.patch"
    bad.write_text(repro_patch(repo, MOCKED_TEST))
    runner = CliRunner()
    common = ["reproduce", "check", str(repo), "--buggy", buggy, "--patched", patched, "--timeout", "60"]
    accepted = runner.invoke(app, [*common, "--test", str(good), "--expect-exception", "ZeroDivisionError",
                                   "--json"])
    assert accepted.exit_code == 0, accepted.output
    assert json.loads(accepted.stdout)["accepted"] is True
    rejected = runner.invoke(app, [*common, "--test", str(bad)])
    assert rejected.exit_code == 1
    assert "rejected" in rejected.output
    # its source says ValueError, the buggy code raises ZeroDivisionError
    named = runner.invoke(app, [*common, "--test", str(good), "--expect-exception", "ValueError", "--json"])
    assert named.exit_code == 1, named.output
    assert any(r.startswith("expected_failure:") for r in json.loads(named.stdout)["reasons"])
    out = tmp_path / "mined.jsonl"
    mined = runner.invoke(app, ["reproduce", "mine", str(FIXTURES / "mining_export.json"), "-o", str(out),
                                "--json"], env={"COHARDEN_LLM_MODEL": ""})
    assert mined.exit_code == 0, mined.output
    assert json.loads(mined.stdout)["records"] == 2
    assert len(out.read_text().splitlines()) == 2
