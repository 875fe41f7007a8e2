"""The command line stays small: no command over 15 options (the settings are ``-c`` keys), and the flags that
became keys still read for one release, each with one deprecation line, to the same settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from coharden.cli.command import translate
from coharden.cli.main import app
from coharden.config import load_settings

MAX_OPTIONS = 15
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "boundary_check"


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    if hasattr(command, "commands"):
        return [row for name, sub in command.commands.items() for row in _commands(sub, (*path, name))]
    return [(" ".join(path), command)]


def _options(command: Any) -> list[str]:
    return [p.name for p in command.params if p.param_type_name == "option" and p.name != "help"]


COMMANDS = _commands(typer.main.get_command(app))


def test_every_command_is_walked() -> None:
    names = {name for name, _ in COMMANDS}
    assert {"mpe", "eval", "study real-bugs", "suite run", "config keys", "check"} <= names


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_no_command_has_more_than_fifteen_options(name: str, command: Any) -> None:
    assert len(_options(command)) <= MAX_OPTIONS, (name, _options(command))


def _mpe_context(args: list[str]) -> Any:
    command = dict(COMMANDS)["mpe"]
    return command.make_context("mpe", [str(EXAMPLE), *args])


def test_an_old_flag_still_reads_and_says_its_new_form_once(capsys: pytest.CaptureFixture[str]) -> None:
    ctx = _mpe_context(["--tau", "0.3", "--per-operator", "2", "--timeout", "60", "--no-implied"])
    err = capsys.readouterr().err.splitlines()
    assert err == ["--tau is deprecated; use -c mpe.tau=0.3",
                   "--per-operator is deprecated; use -c mpe.per_operator=2 -c mpe.sequential=false",
                   "--timeout is deprecated; use -c timeout=60",
                   "--no-implied is deprecated; use -c mpe.implied=false"]
    assert ctx.params["config"] == ["mpe.tau=0.3", "mpe.per_operator=2", "mpe.sequential=false", "timeout=60",
                                    "mpe.implied=false"]


def test_the_old_flag_and_its_key_give_the_same_settings(capsys: pytest.CaptureFixture[str]) -> None:
    old = _mpe_context(["--seed", "7", "--llm-mode", "replay", "--store", "/tmp/x.db",
                        "--pass-env", "HOME", "--pass-env", "LANG", "--paper-classes", "--executor", "ray"])
    new = _mpe_context(["-c", "mpe.seed=7", "-c", "llm.mode=replay",
                        "-c", "store=/tmp/x.db", "-c", 'pass_env=["HOME","LANG"]', "-c", "mpe.paper_classes=true",
                        "-c", "mpe.sequential=false", "-c", "engine.executor=ray"])
    assert capsys.readouterr().err.count("deprecated") == 6
    assert load_settings(old.params["config"]) == load_settings(new.params["config"])
    settings = load_settings(old.params["config"])
    assert (settings.mpe.seed, settings.llm.mode, settings.sandbox.pass_env, settings.engine.executor) == \
        (7, "replay", ["HOME", "LANG"], "ray")


def test_an_old_flag_wins_over_an_earlier_config_setting_as_it_did() -> None:
    args, notes, _ = translate(["x", "--tau", "0.2", "-c", "mpe.tau=0.5", "--", "--tau", "9"],
                               _mpe_context([]).command.renamed())
    assert args == ["x", "-c", "mpe.tau=0.5", "-c", "mpe.tau=0.2", "--", "--tau", "9"]
    assert len(notes) == 1


@pytest.mark.parametrize("spec", ["mpe.tua=1", "timout=1", "llm.mood=replay", "engine.executor=slurm"])
def test_a_bad_key_or_value_is_one_error_line(spec: str) -> None:
    result = CliRunner().invoke(app, ["mpe", str(EXAMPLE), "-c", spec])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:"), lines
    assert spec in lines[0]


def test_help_points_to_the_keys_and_config_keys_lists_them() -> None:
    runner = CliRunner()
    help_text = runner.invoke(app, ["mpe", "--help"], env={"COLUMNS": "200"}).stdout
    assert "coharden config keys" in help_text
    assert "--tau" in help_text  # an old flag, named among those still read
    listed = runner.invoke(app, ["config", "keys", "--json"]).stdout
    for key in ("sandbox.timeout", "mpe.tau", "mpe.prefer_exercised", "llm.mode", "engine.executor"):
        assert f'"key": "{key}"' in listed


@pytest.mark.parametrize(("args", "said"), [
    (["--per-operator", "-3"], "Error: Invalid value for '--per-operator': -3 is out of range (allowed: >= 1)"),
    (["--tau", "nan"], "Error: Invalid value for '--tau': nan is not a finite number (allowed: 0 to 1)"),
    (["--llm-mode", "bogus"], "Error: Invalid value for '--llm-mode': 'bogus' (known: auto, record, replay)"),
    (["-c", "mpe.tau=0.1", "-c", "mpe.per_operator=-3"],
     "error: -c mpe.per_operator=-3: invalid setting: mpe.per_operator: Input should be greater than or equal to 1"),
])
def test_a_bad_value_names_what_was_typed_in_one_line(args: list[str], said: str) -> None:
    """An old flag's bad value is refused as the flag's was (its range from the key's own bounds); a bad ``-c``
    names that one setting, not every ``-c`` given."""
    result = CliRunner().invoke(app, ["mpe", str(EXAMPLE), *args])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.lower().startswith("error")]
    assert errors == [said]


def test_a_store_given_as_a_key_is_checked_before_any_work(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["verify", str(EXAMPLE), "--test", "lax", "-c", f"store={tmp_path}"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: store: {tmp_path} is a directory"


def test_the_loops_old_flags_are_loop_keys() -> None:
    command = dict(COMMANDS)["run"]
    ctx = command.make_context("run", [str(EXAMPLE), "--tau", "0.3", "--seed", "4", "--paper-classes",
                                       "--per-operator", "2", "--samples", "5", "--agent-timeout", "30"])
    settings = load_settings(ctx.params["config"])
    assert settings.loop.model_dump() == {"tau": 0.3, "seed": 4, "paper_classes": True, "per_operator": 2,
                                          "samples": 5}
    assert settings.agent.timeout == 30.0
    assert settings.mpe == load_settings([]).mpe  # the loop's settings are not the mpe section's
    bad = CliRunner().invoke(app, ["run", str(EXAMPLE), "--tau", "2"])
    assert bad.exit_code == 2
    assert "--tau" in bad.output


def test_the_agents_old_flags_are_agent_keys() -> None:
    ctx = dict(COMMANDS)["agent"].make_context("agent", [str(EXAMPLE), "--agent-timeout", "30", "--cost-limit", "0",
                                                         "--max-iterations", "2", "--threshold", "0.5"])
    settings = load_settings(ctx.params["config"])
    assert settings.agent.model_dump() == {"timeout": 30.0, "cost_limit": 0.0, "max_iterations": 2, "threshold": 0.5}
    assert load_settings([]).agent.timeout is None  # each command's own default (1800 s agent, 600 s a round)


def _settings_of(name: str, args: list[str]) -> Any:
    ctx = dict(COMMANDS)[name].make_context(name, args)
    return load_settings(ctx.params["config"])


def test_env_builds_old_flags_are_build_keys(tmp_path: Path) -> None:
    specs = tmp_path / "specs.yaml"
    settings = _settings_of("env build", [str(tmp_path), "--docker", "--base-python", "python3.9", "--installer",
                                          "pip", "--no-smoke", "--sample", "7", "--seed", "3", "--max-attempts",
                                          "2", "--specs", str(specs)])
    assert settings.build.model_dump() == {"installer": "pip", "docker": True, "base_python": "python3.9",
                                           "smoke": False, "smoke_sample": 7, "smoke_seed": 3, "max_attempts": 2}
    assert settings.environment.swebench_specs == specs
    assert _settings_of("env build", [str(tmp_path), "--smoke"]).build.smoke is True
    bad = CliRunner().invoke(app, ["env", "build", str(tmp_path), "--installer", "conda"])
    assert bad.exit_code == 2
    assert "--installer" in bad.output
    assert "known: auto, uv, pip" in bad.output


def test_reproduces_docker_flags_are_build_keys(tmp_path: Path) -> None:
    args = [str(tmp_path), "--test", "t.diff", "--buggy", "HEAD", "--docker", "--base-python", "python3.8"]
    assert _settings_of("reproduce check", args).build.docker is True
    assert _settings_of("reproduce check", args).build.base_python == "python3.8"


def test_the_studies_old_flags_are_study_keys(tmp_path: Path) -> None:
    fixes = tmp_path / "wrong.jsonl"
    settings = _settings_of("study real-bugs", ["--data", str(tmp_path), "--split", "dev", "--phases",
                                                "verify,grade", "--no-bytecode", "--wrong-fixes", str(fixes),
                                                "--samples", "4"])
    assert settings.study.split == "dev"
    assert settings.study.phases == ["verify", "grade"]
    assert settings.study.bytecode is False
    assert settings.study.wrong_fixes == fixes
    assert settings.mpe.llm_samples == 4
    for name in ("study table", "study validity"):
        assert _settings_of(name, ["--no-bytecode"]).study.bytecode is False


def test_mpes_report_flags_are_mpe_keys_and_keep_their_message() -> None:
    settings = load_settings(_mpe_context(["--cutoffs", "0.1,0.3", "--show", "2", "--samples", "6"])
                             .params["config"])
    assert (settings.mpe.cutoffs, settings.mpe.show_mutants, settings.mpe.llm_samples) == ([0.1, 0.3], 2, 6)
    assert load_settings(["mpe.cutoffs=0,1"]).mpe.cutoffs == [0.0, 1.0]  # a key's comma-separated text reads too
    for bad in ("abc", "0.1,1.5", "nan"):
        result = CliRunner().invoke(app, ["eval", "--instances", str(EXAMPLE), "--cutoffs", bad])
        assert result.exit_code == 2, result.output
        assert "--cutoffs" in result.output
        assert "allowed: numbers from 0 to 1" in result.output
        assert "Traceback" not in result.output
