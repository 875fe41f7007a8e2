"""The ``mock-llm`` command: mounted like the main CLI will mount it, and run as a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import typer
from tests.conftest import default_sigint
from typer.testing import CliRunner

import coharden
from coharden.cli import llm as llm_cli


def _mounted_as_subapp() -> typer.Typer:
    main = typer.Typer()

    @main.command()
    def other() -> None:  # the main app has other commands
        pass

    main.add_typer(llm_cli.app, name="mock-llm")
    return main


def _mounted_as_command() -> typer.Typer:
    main = typer.Typer()

    @main.command()
    def other() -> None:
        pass

    main.command("mock-llm")(llm_cli.mock_llm)
    return main


@pytest.mark.parametrize("make_app", [_mounted_as_subapp, _mounted_as_command])
def test_help_and_malformed_rules(tmp_path: Path, make_app: Callable[[], typer.Typer]) -> None:
    app = make_app()
    runner = CliRunner()
    help_result = runner.invoke(app, ["mock-llm", "--help"])
    assert help_result.exit_code == 0
    assert "--rules" in help_result.output
    assert "--port" in help_result.output

    bad = tmp_path / "rules.yaml"
    bad.write_text("- match: {regex: '[a-'}\n  reply: x\n")
    result = runner.invoke(app, ["mock-llm", "--rules", str(bad)])
    assert result.exit_code == 2
    assert "rules[0].match.regex" in result.output
    assert "rules.yaml" in result.output


def test_serves_until_interrupted(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("- match: ping\n  reply: pong\n")
    src = str(Path(coharden.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "coharden.cli.llm", "--rules", str(rules), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_sigint,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/v1")
        response = httpx.post(
            url + "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "ping"}]},
            timeout=5,
        )
        assert response.json()["choices"][0]["message"]["content"] == "pong"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
