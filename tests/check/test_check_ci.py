"""The CI examples in examples/ci/ hold a working command: the ``coharden check`` line of each (marked by a
``coharden-command`` comment) is run, as written, on a scratch repository with a bug-fix commit (no network)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from tests.check.test_check import bug_fix_repo, state
from tests.conftest import run_git
from typer.testing import CliRunner

from coharden.cli.main import app

CI = Path(__file__).parents[2] / "examples" / "ci"


def _commands() -> list[tuple[str, str]]:
    """(file, command) for every command the examples mark as the one they run."""
    found = []
    for path in sorted(CI.glob("*.y*ml")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines[:-1]):
            if "coharden-command" in line:
                text = lines[i + 1].strip()
                _, _, value = text.partition(":")
                found.append((path.name, value.strip()))
    return found


def test_every_ci_example_is_valid_yaml_and_marks_its_command() -> None:
    names = {name for name, _ in _commands()}
    assert {"coharden-check.yml", ".pre-commit-hooks.yaml", "pre-commit-config.yaml"} <= names
    for path in CI.glob("*.y*ml"):
        assert yaml.safe_load(path.read_text())


@pytest.mark.parametrize(("name", "command"), _commands())
def test_the_command_of_each_ci_example_runs_on_a_scratch_repository(tmp_path, monkeypatch, name, command) -> None:
    repo = bug_fix_repo(tmp_path)
    base = run_git(repo, "rev-parse", "HEAD~1").strip()
    monkeypatch.setenv("BASE", base)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(repo)
    argv = shlex.split(command.replace('"$BASE..HEAD"', f"{base}..HEAD"))
    assert Path(argv[0]).name == "coharden"
    assert argv[1] == "check"
    argv = [a.replace(".coharden-store.sqlite", str(tmp_path / "store.sqlite")) for a in argv[1:]]
    before = state(repo)
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output  # the scratch test is Borderline at most: --fail-on lax passes
    report = Path(argv[argv.index("--output") + 1]) if "--output" in argv else None
    after = state(repo)
    assert after[1] == before[1]  # HEAD
    assert after[0].replace(f"?? {report}\n", "") == before[0]  # nothing but the report written
    if report is not None:
        assert "<details>" in report.read_text()
