"""The README's offline command examples on the bundled examples, run as written: docs that do not work fail.

Commands are taken from the README's ```bash blocks: lines (with their backslash continuations) that start
with ``coharden``, name a bundled example (``examples/...``; ``demo loop`` and ``examples check`` default to
them) and need no model, key, network or data outside the repository. They run in a scratch directory
holding a link to ``examples/``, so their default outputs (store, runs) stay out of the checkout."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coharden.cli import app

ROOT = Path(__file__).resolve().parents[1]
#: Commands on the bundled examples that name no path (their defaults are the bundled examples).
#: (`coharden examples check` is one too; tests/test_examples.py runs it, so it is not run a second time here.)
ON_BUNDLED = (["demo", "loop"],)
#: Markers of a command that is not offline or not on bundled data.
NOT_OFFLINE = ("--model", "--command", "--arm", "--api-base", "~/", "RECORDS", "REPO", "recs.jsonl", "swebench",
               "--instances", "&", "$", "...", "round0.py", "my_skill")


def readme_commands(text: str) -> list[str]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            command = shlex.join(words)
            bundled = "examples/" in command or words[1:3] in ON_BUNDLED
            if words[:1] == ["coharden"] and bundled and not any(m in command for m in NOT_OFFLINE):
                commands.append(command)
    return commands


COMMANDS = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_readme_has_offline_examples() -> None:
    """The extraction finds the commands (a README rewrite that hides them from it fails here, not silently)."""
    assert len(COMMANDS) >= 5, COMMANDS
    assert "coharden demo loop" in COMMANDS


def test_extraction_rules() -> None:
    text = ("```bash\n# comment\ncoharden mpe examples/a --test lax --show 3   # trailing comment\n"
            "coharden mpe examples/a --per-operator 5 \\\n    --json\ncoharden run examples/a --model m\n"
            "coharden eval --instances x.jsonl\n```\n")
    assert readme_commands(text) == ["coharden mpe examples/a --test lax --show 3",
                                     "coharden mpe examples/a --per-operator 5 --json"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # `examples check` runs every candidate of every example (minutes on a busy machine)
@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs_as_written(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if command.startswith("coharden demo loop"):
        pytest.importorskip("minisweagent", reason="the loop demo runs the default agent (the agent extra)")
        monkeypatch.setenv("COHARDEN_DEMO_KEY", "sk-coharden-demo")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, f"{command}\nexit {result.exit_code}\n{result.output}"
    # no error line from the CLI (the output itself may quote test failures, e.g. an IndexError of a mutant)
    assert not any(line.lower().startswith("error:") for line in result.output.splitlines()), result.output
