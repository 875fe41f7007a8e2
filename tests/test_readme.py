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
NOT_OFFLINE = ("--model", "--live", "--command", "--arm", "--api-base", "~/", "RECORDS", "REPO", "recs.jsonl",
               "swebench", "--instances", "&", "$", "...", "round0.py", "my_skill")


def _store(words: list[str]) -> str | None:
    return words[words.index("--store") + 1] if "--store" in words[:-1] else None


def readme_commands(text: str) -> list[str]:
    """The offline commands on bundled data, one per test; a command that reads what earlier commands of its
    block kept in a store (``coharden mutants ... --store S``) runs after them, as lines of one test."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        kept: dict[str, list[str]] = {}  # store -> the commands of this block that wrote it
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            command = shlex.join(words)
            bundled = "examples/" in command or words[1:3] in ON_BUNDLED
            offline = not any(m in command for m in NOT_OFFLINE)
            store = _store(words)
            if words[:2] == ["coharden", "mutants"] and offline and store in kept:
                commands.append("\n".join([*kept[store], command]))
            elif words[:1] == ["coharden"] and bundled and offline:
                commands.append(command)
                if store is not None:
                    kept.setdefault(store, []).append(command)
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
    kept = ("```bash\ncoharden mpe examples/a --store s.sqlite\ncoharden mpe examples/b\n"
            "coharden mutants list --store s.sqlite\ncoharden mutants list --store other.sqlite\n```\n")
    assert readme_commands(kept) == ["coharden mpe examples/a --store s.sqlite", "coharden mpe examples/b",
                                     "coharden mpe examples/a --store s.sqlite\ncoharden mutants list --store s.sqlite"]


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
    for line in command.splitlines():  # several lines: commands that share a store, in order
        result = CliRunner().invoke(app, shlex.split(line)[1:])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert result.exit_code == 0, f"{line}\nexit {result.exit_code}\n{result.output}"
        # no error line from the CLI (the output itself may quote test failures, e.g. an IndexError of a mutant)
        assert not any(out.lower().startswith("error:") for out in result.output.splitlines()), result.output
