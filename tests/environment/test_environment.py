"""Environments: inference on fixture repositories, plans and JSON patches, Dockerfiles, local builds (one real
build from PyPI), smoke tests, refinement with a mock model, and the mock model services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import make_repo
from typer.testing import CliRunner

from coharden.cli import app
from coharden.config import Settings
from coharden.environment.attempt_log import AttemptLog
from coharden.environment.build import BuildResult, LocalBuilder, docker_available, env_key, find_base_python
from coharden.environment.dockerfile import render_dockerfile, workspace_pth
from coharden.environment.inference import infer_plan
from coharden.environment.mockenv import DEFAULT_REPLY, MockServices, loopback_only_settings, mock_environment
from coharden.environment.plan import EnvPlan, EnvTarget, PlanError, apply_json_patch, patch_plan
from coharden.environment.pyversions import admitted, normalize_version, poetry_to_pep440
from coharden.environment.refine import extract_patch, refine_environment
from coharden.environment.smoke import SmokeSample, smoke_test
from coharden.environment.sources import DirSource, GitSource
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_runner import run_pytest
from coharden.execution.pytest_verdicts import verdict_for
from coharden.llm import LLMClient, LLMConfig, MockLLMServer

FIXTURES = Path(__file__).parents[1] / "fixtures" / "env"
KEY_VAR = "COHARDEN_TEST_ENV_LLM_KEY"


def fixture_plan(name: str) -> EnvPlan:
    return infer_plan(DirSource(FIXTURES / name))


def repo_from_fixture(name: str, tmp_path: Path) -> tuple[Path, str]:
    """A git repository holding a copy of a fixture directory (one commit)."""
    root = FIXTURES / name
    files = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()
             and "__pycache__" not in p.parts}
    return make_repo(tmp_path / name, files)


# --- inference ---------------------------------------------------------------------------------------------------
def test_infer_pyproject_only() -> None:
    plan = fixture_plan("pyproject_only")
    assert plan.python == "3.11"  # highest classifier version that requires-python >=3.9 admits
    assert plan.python_requires == ">=3.9"
    assert plan.python_tested == ["3.9", "3.10", "3.11"]
    assert plan.extras == ["test"]
    # the test extra already brings pytest-cov (needed by addopts --cov); the tests use `mocker`
    assert plan.install == ["python -m pip install -e '.[test]'", "python -m pip install pytest pytest-mock"]
    assert plan.source_roots == ["src"]
    assert plan.test_paths == ["tests"]
    assert plan.test_args == []
    assert any(e.source == "pyproject.toml" and e.field == "project.requires-python" for e in plan.evidence)


def test_infer_setup_py_and_requirements() -> None:
    plan = fixture_plan("setup_requirements")
    assert plan.python_requires == ">=3.7, !=3.8.*"
    assert plan.python == "3.12"  # nothing tested: newest admitted release up to the default ceiling
    assert "3.8" not in admitted(plan.python_requires)
    assert plan.requirements == ["requirements.txt", "requirements-test.txt"]  # docs requirements left out
    assert plan.install == [
        "python -m pip install -r requirements.txt",
        "python -m pip install -r requirements-test.txt",
        "python -m pip install -e '.[tests]'",  # extras_require read through a module-level name
        "python -m pip install 'mock>=4'",  # tests_require
        "python -m pip install pytest",
    ]
    assert any("requirements-docs.txt" in note for note in plan.notes)


def test_infer_tox() -> None:
    plan = fixture_plan("tox_project")
    assert plan.python == "3.10"  # highest of py{38,39,310}
    assert plan.python_tested == ["3.8", "3.9", "3.10"]
    assert plan.python_requires == ">=3.8"
    assert plan.extras == ["testing"]
    assert plan.install == [
        "python -m pip install -r requirements/test.txt",
        "python -m pip install -e '.[testing]'",
        "python -m pip install 'pytest>=7' pytest-timeout",
        "python -m pip install pytest",
    ]
    # -v is dropped (verdict runs set their own verbosity); the rest is kept
    assert plan.test_args == ["--timeout=60", "-p", "no:cacheprovider", "-W", "error::DeprecationWarning"]
    assert plan.test_paths == ["tests"]
    assert plan.env == {"PYTHONPATH": ".", "TOXPKG_MODE": "strict"}


def test_infer_ci_workflow() -> None:
    plan = fixture_plan("ci_workflow")
    # YAML reads 3.10 as 3.1; requires-python <3.11 excludes the tested 3.11
    assert plan.python_tested == ["3.8", "3.9", "3.10", "3.11"]
    assert plan.python == "3.10"
    assert plan.install == [
        "python -m pip install -e '.[dev]'",
        "python -m pip install pytest-xdist",
        "python -m pip install pytest",
    ]
    assert plan.extras == ["dev"]
    assert plan.test_args == []  # -n auto, -x and --cov are not for verdict runs
    assert plan.test_paths == ["tests/unit"]


def test_infer_from_git_commit_matches_directory(tmp_path: Path) -> None:
    repo, commit = repo_from_fixture("tox_project", tmp_path)
    source = GitSource(repo, commit)
    from_git = infer_plan(source, repo=str(repo), commit=commit)
    from_dir = fixture_plan("tox_project")
    assert from_git.commit == commit
    assert from_git.install == from_dir.install
    assert from_git.python == from_dir.python


def test_infer_nox_poetry_and_python_version_pin(tmp_path: Path) -> None:
    files = {
        "pyproject.toml": """\
            [tool.poetry]
            name = "poet"
            version = "0.1.0"

            [tool.poetry.dependencies]
            python = "^3.9"

            [tool.poetry.group.test.dependencies]
            pytest = "^7.0"
            respx = "*"

            [build-system]
            requires = ["poetry-core"]
            build-backend = "poetry.core.masonry.api"
            """,
        "noxfile.py": """\
            import nox


            @nox.session(python=["3.9", "3.10", "3.11"])
            def tests(session):
                session.install("-e", ".[test]")
                session.install("freezegun")
                session.run("pytest", "-q", "tests/")
            """,
        "poet/__init__.py": "",
        "tests/test_poet.py": "def test_x():\n    pass\n",
    }
    repo, commit = make_repo(tmp_path / "poet", files)
    plan = infer_plan(GitSource(repo, commit))
    assert plan.python_requires == ">=3.9,<4"
    assert plan.python == "3.11"
    assert "python -m pip install 'pytest>=7.0' respx freezegun" in plan.install
    assert plan.test_paths == ["tests"]
    (repo / ".python-version").write_text("3.10.4\n")
    pinned = infer_plan(DirSource(repo))
    assert pinned.python == "3.10"


def test_python_version_helpers() -> None:
    assert admitted(">=3.8,<3.11") == ["3.8", "3.9", "3.10"]
    assert admitted(">=3.8.1") [0] == "3.8"
    assert admitted("~=3.9") == ["3.9", "3.10", "3.11", "3.12", "3.13"]
    assert admitted("==3.10.*") == ["3.10"]
    assert admitted(">=3.7,!=3.8.*,<3.10") == ["3.7", "3.9"]
    assert admitted(poetry_to_pep440("^3.8")) == ["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"]
    assert admitted(poetry_to_pep440("~3.9")) == ["3.9"]
    assert normalize_version(3.1) == "3.10"
    assert normalize_version("3.12") == "3.12"
    assert normalize_version("pypy-3.9") is None
    assert normalize_version("py311") == "3.11"
    with pytest.raises(ValueError, match="cannot read"):
        admitted(">= three")


# --- plan, JSON patch, Dockerfile --------------------------------------------------------------------------------
def test_plan_round_trip_and_json_patch() -> None:
    plan = fixture_plan("tox_project").model_copy(update={"repo": "r", "commit": "c" * 40})
    again = EnvPlan.from_json(plan.to_json())
    assert again == plan
    assert again.digest() == plan.digest()
    patched = patch_plan(plan, [
        {"op": "add", "path": "/install/-", "value": "python -m pip install responses"},
        {"op": "replace", "path": "/python", "value": "3.9"},
        {"op": "add", "path": "/env/EXTRA", "value": "1"},
        {"op": "remove", "path": "/test_args/0"},
    ])
    assert patched.install[-1] == "python -m pip install responses"
    assert patched.python == "3.9"
    assert patched.env["EXTRA"] == "1"
    assert patched.test_args[0] == "-p"
    assert patched.digest() != plan.digest()
    with pytest.raises(PlanError, match="may not change"):
        patch_plan(plan, [{"op": "replace", "path": "/commit", "value": "d" * 40}])
    with pytest.raises(PlanError, match="not valid"):
        patch_plan(plan, [{"op": "replace", "path": "/python", "value": "three"}])
    with pytest.raises(PlanError, match="out of range"):
        patch_plan(plan, [{"op": "remove", "path": "/install/99"}])
    with pytest.raises(PlanError, match="test failed"):
        apply_json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
    assert apply_json_patch({"a": [1]}, [{"op": "copy", "from": "/a/0", "path": "/b"},
                                         {"op": "move", "from": "/a", "path": "/c"}]) == {"b": 1, "c": [1]}
    assert extract_patch('Here:\n```json\n[{"op": "remove", "path": "/env/X"}]\n```') == [
        {"op": "remove", "path": "/env/X"}]
    with pytest.raises(PlanError):
        extract_patch("no patch here")


def test_dockerfile_from_plan() -> None:
    plan = fixture_plan("pyproject_only")
    text = render_dockerfile(plan)
    lines = text.splitlines()
    assert "FROM python:3.11-slim" in lines
    assert "RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*" \
        in lines
    assert "RUN python -m venv /opt/venv" in lines
    assert "COPY . /testbed" in lines
    assert lines.index("RUN python -m pip install -e '.[test]'") < lines.index(
        "RUN python -m pip install pytest pytest-mock")
    assert any(line.startswith("RUN printf") and "coharden-workspace.pth" in line for line in lines)
    env_plan = fixture_plan("tox_project")
    assert 'ENV PYTHONPATH="." TOXPKG_MODE="strict"' in render_dockerfile(env_plan)


def test_workspace_pth_puts_the_checkout_first(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    code = workspace_pth(["src", "missing"]).strip() + "\nprint(sys.path[0])"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tmp_path / "src")


def test_dockerfile_printf_line_writes_the_pth(tmp_path: Path) -> None:
    """The RUN line that installs the .pth works in a POSIX shell (python here stands in for the image's)."""
    plan = fixture_plan("pyproject_only")
    line = next(x for x in render_dockerfile(plan).splitlines() if x.startswith("RUN printf"))
    site = tmp_path / "site"
    site.mkdir()
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python").write_text(f"#!/bin/sh\necho {site}\n")
    (shim / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["/bin/sh", "-c", line.removeprefix("RUN ")], env=env, check=True)
    assert (site / "coharden-workspace.pth").read_text() == workspace_pth(["src"])


# --- builds ------------------------------------------------------------------------------------------------------
def test_find_base_python_falls_back_to_an_admitted_installed_version() -> None:
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    plan = EnvPlan(python=running, python_requires=f">={running}")
    python, version, warnings = find_base_python(plan)
    assert version.startswith(running + ".")
    assert warnings == []
    missing = EnvPlan(python="3.99", python_requires=f">={running}")  # no such interpreter anywhere
    python2, version2, warnings2 = find_base_python(missing)
    assert python2
    assert version2.startswith("3.")
    assert len(warnings2) == 1
    assert f"python 3.99 is not installed here; built with {version2}" in warnings2[0]


def test_env_key_depends_on_plan_and_commit() -> None:
    plan = EnvPlan(python="3.11")
    other = plan.model_copy(update={"install": ["python -m pip install six"]})
    assert env_key("/x/repo", "a" * 40, plan) != env_key("/x/repo", "a" * 40, other)
    assert env_key("/x/repo", "a" * 40, plan) != env_key("/x/repo", "b" * 40, plan)
    assert env_key("/x/repo", "a" * 40, plan).startswith("repo-aaaaaaaaaaaa-")


@pytest.mark.slow
def test_real_package_from_pypi_builds_and_smoke_passes(tmp_path: Path) -> None:
    """A tiny project depending on a real PyPI package (six): inferred plan, venv built with pip from the
    registry, smoke test through the verdict machinery in a fresh checkout; the second build is reused."""
    files = {
        "pyproject.toml": """\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "tinysix"
            version = "0.1.0"
            requires-python = ">=3.8"
            dependencies = ["six>=1.16"]
            """,
        "src/tinysix/__init__.py": """\
            import six


            def text_type_name():
                return six.text_type.__name__
            """,
        "tests/test_tinysix.py": """\
            import six

            import tinysix


            def test_text_type():
                assert tinysix.text_type_name() == "str"


            def test_six_is_real():
                assert six.__file__.endswith("six.py")


            def test_an_assertion_failure_does_not_count():
                assert tinysix.text_type_name() == "unicode"
            """,
    }
    repo, commit = make_repo(tmp_path / "tinysix", files)
    plan = infer_plan(GitSource(repo, commit), repo=str(repo), commit=commit)
    assert plan.install == ["python -m pip install -e .", "python -m pip install pytest"]
    assert plan.source_roots == ["src"]
    settings = Settings(timeout=120, cache_dir=tmp_path / "cache", store=tmp_path / "store.sqlite")
    builder = LocalBuilder(settings.cache_dir)
    build = builder.build(repo, commit, plan)
    assert build.ok, build.error
    assert Path(build.python).is_relative_to(tmp_path / "cache" / "envs")
    report = smoke_test(EnvTarget(repo, commit, plan), build, settings, sample=SmokeSample(20, 0))
    assert report.ok, report.error_text()
    assert report.collected == 3
    assert report.passed == 2
    assert len(report.test_failures) == 1  # the assertion failure is the code's, not the environment's
    assert report.env_failures == []
    # the tests imported the fresh checkout's code, not the build copy (source root .pth)
    probe = subprocess.run([build.python, "-c", "import tinysix; print(tinysix.__file__)"], cwd=tmp_path / "tinysix",
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == str(tmp_path / "tinysix" / "src" / "tinysix" / "__init__.py")
    again = builder.build(repo, commit, plan)
    assert again.cached
    assert again.python == build.python


@pytest.mark.skipif(not docker_available()[0], reason=f"needs a Docker engine ({docker_available()[1]})")
def test_docker_build_and_smoke(tmp_path: Path) -> None:  # pragma: no cover - needs a Docker engine
    from coharden.environment.build import DockerBuilder

    repo, commit = repo_from_fixture("setup_requirements", tmp_path)
    plan = infer_plan(GitSource(repo, commit), repo=str(repo), commit=commit)
    plan = plan.model_copy(update={"python": "3.11"})
    settings = Settings(timeout=300, cache_dir=tmp_path / "cache", store=tmp_path / "store.sqlite")
    build = DockerBuilder(settings.cache_dir).build(repo, commit, plan)
    assert build.ok, build.error
    report = smoke_test(EnvTarget(repo, commit, plan), build, settings, mock=False)
    assert report.ok, report.error_text()


@pytest.mark.skipif(docker_available()[0], reason="a Docker engine is running (this checks the refusal without one)")
def test_docker_backend_without_an_engine_fails_clearly(tmp_path: Path, settings: Settings) -> None:
    from coharden.environment.build import DockerBuilder

    repo, commit = make_repo(tmp_path / "r", {"tests/test_a.py": "def test_a():\n    pass\n"})
    result = refine_environment(EnvTarget(repo, commit, EnvPlan(python="3.11")), DockerBuilder(tmp_path / "cache"),
                                settings)
    assert not result.ok
    assert result.stop_reason.startswith("cannot build: ")
    assert len(result.attempts) == 1


# --- smoke judging and refinement (the interpreter running these tests stands in for a built environment) -------
def fake_build(tmp_path: Path, ok: bool = True, error: str = "") -> BuildResult:
    return BuildResult(ok=ok, backend="venv", key="fake", env_dir=tmp_path, python=sys.executable if ok else "",
                       error=error)


SMOKE_FILES = {
    "pkg/__init__.py": "def double(x):\n    return 2 * x\n",
    "vendor/helperlib.py": "VALUE = 42\n",
    "tests/test_pkg.py": """\
        from pkg import double


        def test_double():
            assert double(2) == 4


        def test_double_wrong():
            assert double(2) == 5
        """,
    "tests/test_helper.py": """\
        import helperlib


        def test_helper():
            assert helperlib.VALUE == 42
        """,
    "tests/test_fixture.py": """\
        def test_needs_plugin(not_a_fixture_anywhere):
            pass
        """,
}


def test_smoke_counts_environment_failures_only(tmp_path: Path, settings: Settings) -> None:
    repo, commit = make_repo(tmp_path / "smoky", SMOKE_FILES)
    plan = EnvPlan(python="3.11", test_paths=["tests"], mock_services=False)
    report = smoke_test(EnvTarget(repo, commit, plan), fake_build(tmp_path), settings, sample=SmokeSample(20, 1))
    assert not report.ok
    kinds = {(f.kind, f.where.split("::")[0].replace(".", "/")) for f in report.env_failures}
    assert ("missing_dependency", "tests/test_helper") in {(k, w.removesuffix("/py")) for k, w in kinds}
    assert any(f.kind == "missing_fixture" for f in report.env_failures)
    assert report.passed == 1
    assert len(report.test_failures) == 1
    assert report.test_failures[0].startswith("tests/test_pkg.py::test_double_wrong: ")
    fixed = plan.model_copy(update={"env": {"PYTHONPATH": "vendor"}, "test_paths": ["tests/test_pkg.py",
                                                                                       "tests/test_helper.py"]})
    report2 = smoke_test(EnvTarget(repo, commit, fixed), fake_build(tmp_path), settings, sample=SmokeSample(20, 1))
    assert report2.ok, report2.error_text()
    assert report2.collected == 3


def test_smoke_sample_is_seeded(tmp_path: Path, settings: Settings) -> None:
    tests = "\n\n".join(f"def test_{i}():\n    pass" for i in range(30))
    repo, commit = make_repo(tmp_path / "many", {"tests/test_many.py": tests + "\n"})
    plan = EnvPlan(python="3.11", test_paths=["tests"], mock_services=False)
    first = smoke_test(EnvTarget(repo, commit, plan), fake_build(tmp_path), settings, sample=SmokeSample(5, 7))
    second = smoke_test(EnvTarget(repo, commit, plan), fake_build(tmp_path), settings, sample=SmokeSample(5, 7))
    third = smoke_test(EnvTarget(repo, commit, plan), fake_build(tmp_path), settings, sample=SmokeSample(5, 8))
    assert first.ok
    assert first.collected == 30
    assert len(first.sampled) == 5
    assert first.sampled == second.sampled
    assert first.sampled != third.sampled


def test_smoke_reports_a_pytest_usage_error(tmp_path: Path, settings: Settings) -> None:
    repo, commit = make_repo(tmp_path / "usage", {"tests/test_a.py": "def test_a():\n    pass\n"})
    plan = EnvPlan(python="3.11", test_args=["--cov=x"], mock_services=False)  # pytest-cov is not installed
    report = smoke_test(EnvTarget(repo, commit, plan), fake_build(tmp_path), settings)
    assert not report.ok
    assert report.env_failures[0].kind == "pytest_usage"
    assert "--cov" in report.reason


class FakeBuilder:
    """Fails the build while a plan has a command containing 'bad-command'; otherwise 'builds' by reusing the
    interpreter running these tests."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.plans: list[EnvPlan] = []

    def build(self, repo: Path, commit: str, plan: EnvPlan, *, force: bool = False) -> BuildResult:
        self.plans.append(plan)
        bad = [c for c in plan.install if "bad-command" in c]
        if bad:
            return fake_build(self.tmp_path, ok=False, error=f"build step `{bad[0]}` exited with 127:\n"
                                                             f"sh: 1: bad-command: not found")
        return fake_build(self.tmp_path)


def llm_for(server: MockLLMServer, monkeypatch: pytest.MonkeyPatch, **overrides: object) -> LLMClient:
    monkeypatch.setenv(KEY_VAR, "sk-test")
    config = LLMConfig.model_validate({"model": "openai/gpt-4o-mini", "api_base": server.base_url,
                                       "api_key_env": KEY_VAR, "max_tokens": 512, "max_retries": 0,
                                       "timeout": 10, **overrides})
    return LLMClient(config)


def test_refinement_fixes_build_and_smoke_with_model_patches(tmp_path: Path, settings: Settings,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    repo, commit = make_repo(tmp_path / "smoky", {k: v for k, v in SMOKE_FILES.items() if "fixture" not in k})
    plan = EnvPlan(repo=str(repo), commit=commit, python="3.11", install=["bad-command --install"],
                   test_paths=["tests"], mock_services=False)
    rules = [
        {"match": {"contains": "bad-command: not found", "last_user": True},
         "reply": '```json\n[{"op": "remove", "path": "/install/0"}]\n```'},
        {"match": {"contains": "No module named 'helperlib'", "last_user": True},
         "reply": 'The vendored module is not on the path.\n```json\n'
                  '[{"op": "add", "path": "/env/PYTHONPATH", "value": "vendor"}]\n```'},
    ]
    log = tmp_path / "refine.jsonl"
    builder = FakeBuilder(tmp_path)
    with MockLLMServer(rules) as server:
        result = refine_environment(EnvTarget(repo, commit, plan), builder, settings,
                                    llm=llm_for(server, monkeypatch), log=AttemptLog(log))
        assert len(server.requests) == 2
    assert result.ok, result.stop_reason
    assert result.plan.install == []
    assert result.plan.env == {"PYTHONPATH": "vendor"}
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["attempt"] for entry in lines] == [1, 2, 3]
    assert lines[0]["build_ok"] is False
    assert lines[0]["patch"] == [{"op": "remove", "path": "/install/0"}]
    assert lines[1]["build_ok"] is True
    assert lines[1]["smoke"]["ok"] is False
    assert lines[1]["llm_calls"][0]["request_hash"]
    assert lines[2]["stop"] == "ok"
    assert all(entry["plan_digest"] for entry in lines)


def test_refinement_fails_closed_on_a_truncated_reply(tmp_path: Path, settings: Settings,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    repo, commit = make_repo(tmp_path / "r", {"tests/test_a.py": "def test_a():\n    pass\n"})
    plan = EnvPlan(repo=str(repo), commit=commit, python="3.11", install=["bad-command"], mock_services=False)
    log = tmp_path / "refine.jsonl"
    rules = [{"reply": '```json\n[{"op": "remove", "path": "/install/0"}]', "finish_reason": "length"}]
    with MockLLMServer(rules) as server:
        result = refine_environment(EnvTarget(repo, commit, plan), FakeBuilder(tmp_path), settings,
                                    llm=llm_for(server, monkeypatch), log=AttemptLog(log))
    assert not result.ok
    assert "truncated" in result.stop_reason
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == 1
    assert entries[0]["llm_calls"][0]["error"] == "truncated"
    assert entries[0]["patch"] is None


def test_refinement_follows_the_build_section(tmp_path: Path, settings: Settings,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``build.max_attempts`` bounds the plans tried and ``build.smoke=false`` skips the smoke test: the
    section, not the command, decides."""
    repo, commit = make_repo(tmp_path / "r", {"tests/test_a.py": "def test_a():\n    pass\n"})
    plan = EnvPlan(repo=str(repo), commit=commit, python="3.11", install=["bad-command"], mock_services=False)
    one = settings.with_overrides(build={"max_attempts": 1})
    with MockLLMServer([{"reply": '```json\n[{"op": "remove", "path": "/install/0"}]\n```'}]) as server:
        result = refine_environment(EnvTarget(repo, commit, plan), FakeBuilder(tmp_path), one,
                                    llm=llm_for(server, monkeypatch))
        assert not server.requests  # the one attempt was the last: no model asked
    assert result.stop_reason == "failed; 1 attempts used"
    fine = plan.model_copy(update={"install": []})
    unsmoked = refine_environment(EnvTarget(repo, commit, fine), FakeBuilder(tmp_path),
                                  settings.with_overrides(build={"smoke": False}))
    assert unsmoked.ok
    assert unsmoked.smoke is None


def test_refinement_without_a_model_stops_after_one_attempt(tmp_path: Path, settings: Settings) -> None:
    repo, commit = make_repo(tmp_path / "r", {"tests/test_a.py": "def test_a():\n    pass\n"})
    plan = EnvPlan(repo=str(repo), commit=commit, python="3.11", install=["bad-command"], mock_services=False)
    result = refine_environment(EnvTarget(repo, commit, plan), FakeBuilder(tmp_path), settings, llm=None)
    assert not result.ok
    assert len(result.attempts) == 1
    assert "no model" in result.stop_reason


def test_refinement_rejects_patches_that_retarget_the_plan(tmp_path: Path, settings: Settings,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    repo, commit = make_repo(tmp_path / "r", {"tests/test_a.py": "def test_a():\n    pass\n"})
    plan = EnvPlan(repo=str(repo), commit=commit, python="3.11", install=["bad-command"], mock_services=False)
    rules = [{"reply": '```json\n[{"op": "replace", "path": "/commit", "value": "HEAD~1"}]\n```'}]
    with MockLLMServer(rules) as server:
        result = refine_environment(EnvTarget(repo, commit, plan), FakeBuilder(tmp_path), settings,
                                    llm=llm_for(server, monkeypatch))
        assert len(server.requests) == 2  # asked again once, with the reason
        assert "may not change" in server.requests[1].messages[-1]["content"]
    assert not result.ok
    assert "no usable patch" in result.stop_reason


# --- mock model services -----------------------------------------------------------------------------------------
def test_mock_environment_variables() -> None:
    env = mock_environment("http://127.0.0.1:5000/v1")
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:5000/v1"
    assert env["OPENAI_API_BASE"] == "http://127.0.0.1:5000/v1"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:5000"
    assert env["OPENAI_API_KEY"].startswith("sk-coharden")
    assert env["ANTHROPIC_API_KEY"].startswith("sk-coharden")
    assert loopback_only_settings(Settings()).sandbox.network is True


def test_agent_fixture_gets_its_reply_from_the_mock_server(tmp_path: Path, settings: Settings,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's own code (openai.OpenAI() configured by environment variables only) runs unmodified and
    offline: the mock-service variables send its request to the local mock server."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    repo, commit = repo_from_fixture("agent_repo", tmp_path)
    ids = ["tests/check_agent.py::test_ask_gets_a_reply"]  # explicit path: collected whatever its name
    rules = [{"match": {"contains": "What is 2 + 2?"}, "reply": DEFAULT_REPLY}]
    with MockServices(rules) as services:
        run = run_pytest(repo, ids, loopback_only_settings(settings), ProcessOptions(env=services.env))
        requests = services.server.requests
    assert verdict_for(ids, run).passed, run.output[-2000:]
    assert len(requests) == 1
    assert requests[0].body["model"] == "gpt-4o-mini"
    assert requests[0].headers["authorization"] == "Bearer sk-coharden-mock"
    # without the variables the same code cannot run (no key, and no network in the sandbox)
    without = run_pytest(repo, ids, settings)
    assert verdict_for(ids, without).failed


def test_smoke_serves_the_mock_services_by_default(tmp_path: Path, settings: Settings) -> None:
    test = """\
        import os
        import urllib.request


        def test_provider_variables_reach_the_mock():
            assert os.environ["OPENAI_API_KEY"] == "sk-coharden-mock"
            base = os.environ["OPENAI_BASE_URL"]
            request = urllib.request.Request(base + "/chat/completions", method="POST",
                                             data=b'{"messages": [{"role": "user", "content": "hi"}]}')
            with urllib.request.urlopen(request, timeout=10) as reply:
                assert b"coharden mock reply" in reply.read()
        """
    repo, commit = make_repo(tmp_path / "mocked", {"tests/test_mocked.py": test})
    report = smoke_test(EnvTarget(repo, commit, EnvPlan(python="3.11")), fake_build(tmp_path), settings)
    assert report.ok, report.error_text()
    assert report.passed == 1
    off = smoke_test(EnvTarget(repo, commit, EnvPlan(python="3.11", mock_services=False)), fake_build(tmp_path),
                     settings)
    assert off.ok  # a KeyError is the test's failure, not the environment's
    assert off.passed == 0
    assert len(off.test_failures) == 1


def test_mock_guard_refuses_non_loopback_connections(tmp_path: Path, settings: Settings) -> None:
    code = ("import socket\ns = socket.socket()\ns.settimeout(2)\ntry:\n    s.connect(('192.0.2.1', 80))\n"
            "except OSError as exc:\n    print('refused' if 'blocked by coharden' in str(exc) else repr(exc))\n")
    with MockServices() as services:
        env = {**os.environ, **services.env}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "refused"


# --- CLI ---------------------------------------------------------------------------------------------------------
def test_cli_env_infer_and_dockerfile(tmp_path: Path) -> None:
    repo, commit = repo_from_fixture("ci_workflow", tmp_path)
    runner = CliRunner()
    plan_file = tmp_path / "plan.json"
    result = runner.invoke(app, ["env", "infer", str(repo), "--output", str(plan_file), "--dockerfile",
                                 str(tmp_path / "Dockerfile")])
    assert result.exit_code == 0, result.output
    plan = EnvPlan.from_json(plan_file.read_text())
    assert plan.commit == commit
    assert plan.python == "3.10"
    assert (tmp_path / "Dockerfile").read_text().startswith("# generated by coharden env")
    printed = runner.invoke(app, ["env", "dockerfile", str(plan_file)])
    assert printed.exit_code == 0
    assert "FROM python:3.10-slim" in printed.output
    as_json = runner.invoke(app, ["env", "infer", str(repo), "--json"])
    assert json.loads(as_json.output)["test_paths"] == ["tests/unit"]


def test_cli_env_build_takes_a_subdirectory_as_env_infer_does(tmp_path: Path) -> None:
    """Issue 34, item 12: ``env infer sub`` analysed the directory's files, ``env build sub`` refused it; both take
    it now, and the build's checkout holds exactly the files the plan was inferred from (the subdirectory's,
    at its top, without a virtual environment lying there)."""
    repo, _ = make_repo(tmp_path / "r", {"README": "top\n", "sub/tests/test_a.py": "def test_a():\n    pass\n",
                                         "sub/.venv/lib/junk.py": "x = 1\n"})
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(EnvPlan(python="3.11", mock_services=False).to_json())
    env = {"COHARDEN_CACHE": str(tmp_path / "cache"), "COHARDEN_LLM_MODEL": ""}
    runner = CliRunner()
    inferred = runner.invoke(app, ["env", "infer", str(repo / "sub"), "--json"], env=env)
    assert inferred.exit_code == 0, inferred.output
    args = ["env", "build", str(repo / "sub"), "--plan", str(plan_file), "--json", "--no-smoke",
            "--base-python", sys.executable, "--log", str(tmp_path / "log.jsonl")]
    result = runner.invoke(app, args, env=env)
    # built from the snapshot; the plan installs nothing, so the venv lacks pytest (exit 1: does not work)
    assert result.exit_code == 1, result.output
    assert "the environment has no working pytest" in result.stdout
    assert "analysing the files of this directory only" in " ".join(result.stderr.split())
    assert "give the repository's top directory" not in result.output
    (snapshot,) = [p for p in (tmp_path / "cache" / "directories").iterdir() if p.is_dir()]  # beside it: its lock
    tracked = subprocess.run(["git", "ls-files"], cwd=snapshot, capture_output=True, text=True, check=True)
    assert tracked.stdout.split() == ["tests/test_a.py"]
    again = runner.invoke(app, args, env=env)  # the same files: the same snapshot
    assert again.exit_code == 1, again.output
    assert [p.name for p in (tmp_path / "cache" / "directories").iterdir() if p.is_dir()] == [snapshot.name]
    at_commit = runner.invoke(app, [*args, "--commit", "HEAD~1"], env=env)
    assert at_commit.exit_code == 2
    assert "give the repository's top directory" in at_commit.output


def test_cli_env_dockerfile_names_the_bad_field_in_one_line(tmp_path: Path) -> None:
    """Issue 34, item 12: a bad plan printed pydantic's dump (input value, type, a documentation URL)."""
    bad = tmp_path / "plan.json"
    bad.write_text('{"python": "3.11", "colour": "blue"}')
    result = CliRunner().invoke(app, ["env", "dockerfile", str(bad)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {bad}: not a valid environment plan: field colour: Extra inputs " \
                                    "are not permitted"
    bad.write_text("[1]")
    result = CliRunner().invoke(app, ["env", "dockerfile", str(bad)])
    assert result.output.strip() == f"error: {bad}: not a valid environment plan: field <record>: Input should " \
                                    "be an object"


def test_cli_env_build_reports_failure_without_model(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path / "r", {"tests/test_a.py": "def test_a():\n    pass\n"})
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(EnvPlan(python="3.11", mock_services=False).to_json())
    env = {"COHARDEN_CACHE": str(tmp_path / "cache"), "COHARDEN_LLM_MODEL": ""}
    result = CliRunner().invoke(app, ["env", "build", str(repo), "--plan", str(plan_file), "--json",
                                      "--base-python", str(tmp_path / "no-such-python"),
                                      "--log", str(tmp_path / "log.jsonl")], env=env)
    assert result.exit_code == 1, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["ok"] is False
    assert "does not run" in data["build"]["error"]
    assert "no model" in data["stop_reason"]
    logged = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(logged) == 1
    assert logged[0]["build_ok"] is False
