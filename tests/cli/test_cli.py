"""The command line: ``coharden verify`` output and errors, Ctrl-C in the middle of a run, and the CLI's shape
(shared options, range-checked numbers, help, messages, progress, unwrapped output; issues 16 and 21)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from tests.conftest import CALC_FIX, GOOD_TEST, calc_test_file, default_sigint, make_patch
from typer.testing import CliRunner

from coharden.cli import app
from coharden.cli.common import cli_errors

COHARDEN = [sys.executable, "-m", "coharden"]  # works without the installed console script


def _flat(text: str) -> str:
    """Text without whitespace: rich wraps (and folds) long error lines."""
    return "".join(text.split())


@pytest.fixture
def instance_dir(calc_repo, tmp_path, monkeypatch) -> Path:  # type: ignore[no-untyped-def]
    """A local instance directory whose manifest points at the calc git repository."""
    repo, base = calc_repo
    directory = tmp_path / "instance"
    directory.mkdir()
    (directory / "fix.diff").write_text(make_patch(repo, CALC_FIX))
    (directory / "golden.diff").write_text(make_patch(repo, calc_test_file(GOOD_TEST)))
    (directory / "instance.yaml").write_text(
        f"instance_id: calc-1\nrepo: {repo}\nbase_commit: {base}\npatch: fix.diff\ntest_patch: golden.diff\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    return directory


def test_verify_json_for_a_good_test(instance_dir, calc_repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    repo, _ = calc_repo
    candidate = tmp_path / "cand.diff"
    candidate.write_text(make_patch(repo, calc_test_file("def test_add_small():\n    assert add(1, 2) == 3")))
    store = tmp_path / "cli-store.sqlite"
    result = CliRunner().invoke(app, ["verify", str(instance_dir), "--test", str(candidate), "--json",
                                      "--store", str(store), "--timeout", "30"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["instance_id"] == "calc-1"
    assert data["test"] == "cand"
    assert data["test_ids"] == ["tests/test_calc.py::test_add_small"]
    assert data["buggy"]["outcome"] == "FAIL"
    assert data["fixed"]["outcome"] == "PASS"
    assert data["fail_to_pass"] is True
    assert store.is_file()


def test_verify_test_file_named_golden_is_the_file(instance_dir, calc_repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    repo, _ = calc_repo
    other = tmp_path / "other"
    other.mkdir()
    lax = other / "golden.diff"  # a file that happens to be called golden.diff is still that file
    lax.write_text(make_patch(repo, calc_test_file("def test_lax():\n    assert add(0, 0) == 0")))
    result = CliRunner().invoke(app, ["verify", str(instance_dir), "--test", str(lax), "--json",
                                      "--store", str(tmp_path / "s.sqlite"), "--timeout", "30"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["test_ids"] == ["tests/test_calc.py::test_lax"]
    assert data["fail_to_pass"] is False


def test_nonexistent_instance_path_is_a_clear_error(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "no-such-instance"
    result = CliRunner().invoke(app, ["verify", str(missing), "--json"])
    assert result.exit_code == 2
    assert "error:" in result.stderr
    assert _flat(f"{missing}: file not found") in _flat(result.stderr)
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_not_a_git_repository_is_a_clear_error(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    plain = tmp_path / "plain-repo"
    plain.mkdir()
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"instance_id": "x", "repo": str(plain), "base_commit": "abc"}) + "\n")
    result = CliRunner().invoke(app, ["verify", str(records), "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2
    assert _flat(f"{plain}: not a git repository") in _flat(result.stderr)
    assert "Traceback" not in result.output


def test_malformed_jsonl_is_a_clear_error(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    records = tmp_path / "records.jsonl"
    records.write_text('{"instance_id": "a", "repo": "o/n", "base_commit": "c"}\n{oops\n')
    result = CliRunner().invoke(app, ["verify", str(records)])
    assert result.exit_code == 2
    assert _flat(f"{records}:2: malformed JSON line") in _flat(result.stderr)


def test_ctrl_c_mid_run_exits_promptly_and_cleans_up(instance_dir, calc_repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the test can only write its worktree (the sandbox); its processes carry the run's marker variable
    hanging, scratch = _hanging_test(calc_repo[0], tmp_path)
    mark = f"COHARDEN_CTRLC_MARK={os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "TMPDIR": str(scratch), mark.split("=")[0]: mark.split("=")[1]}
    proc = subprocess.Popen(
        [*COHARDEN, "verify", str(instance_dir), "--test", str(hanging), "--timeout", "120",
         "--store", str(tmp_path / "ctrlc.sqlite")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )
    err = _interrupt_once_started(proc, scratch, 60, check=lambda: _processes_with_env(mark))
    assert proc.returncode != 0
    assert "Traceback" not in err
    assert [p.name for p in scratch.iterdir() if p.name.startswith("coharden-")] == []  # no workspace, no junit dir
    # every process of the run (the pytest process, any helper) is gone: find them by their TMPDIR
    deadline = time.monotonic() + 5
    while (left := _processes_with_env(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []


def test_ctrl_c_in_a_single_mpe_says_what_it_kept_and_sigusr1_its_stacks(instance_dir, calc_repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    hanging, scratch = _hanging_test(calc_repo[0], tmp_path)
    store = tmp_path / "kept.sqlite"
    proc = subprocess.Popen(
        [*COHARDEN, "mpe", str(instance_dir), "--test", str(hanging), "--timeout", "120", "--store", str(store)],
        cwd=tmp_path, env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_sigint,
    )

    def ask_for_stacks() -> bool:  # kill -USR1: every thread's stack on stderr, and the run goes on
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        return proc.poll() is None

    err = _interrupt_once_started(proc, scratch, 120, ask_for_stacks)
    assert proc.returncode == 130, err
    assert "Current thread" in err  # faulthandler's dump
    assert "Traceback" not in err
    said = " ".join(err.split())
    assert "interrupted: no class was computed; the " in said
    assert f"kept in {store}, so the same command again starts from them" in said


def _hanging_test(repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(a test patch whose test writes ``started`` in its worktree and then never ends, an empty directory for
    the run's TMPDIR)."""
    hanging = tmp_path / "hang.diff"
    hanging.write_text(make_patch(repo, calc_test_file(
        "def test_hangs():\n"
        "    import os, time\n"
        "    open('started', 'w').write(str(os.getpid()))\n"
        "    while True:\n"
        "        time.sleep(0.05)\n"
    )))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return hanging, scratch


def _interrupt_once_started(proc: subprocess.Popen, scratch: Path, start_within: float,
                            check: Callable[[], object] = lambda: True) -> str:
    """Ctrl-C ``proc`` once its hanging test has started (and ``check()`` holds then); its stderr. A hang guard,
    not a measurement: without the Ctrl-C the hanging test would run for its 120 s timeout."""
    try:
        deadline = time.monotonic() + start_within
        while not any(p.read_text() for p in scratch.glob("coharden-ws-*/repo/started")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the hanging test never started"
            time.sleep(0.05)
        assert check()  # the detector works
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:  # say what it waits for: every thread's stack (coharden's SIGUSR1)
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"still running 90 s after Ctrl-C; its threads:\n{err}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err


def _processes_with_env(entry: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ``entry``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if entry.encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
        except OSError:
            continue
        found.append(int(proc.name))
    return found


# --- the CLI's shape and messages -----------------------------------------------------------------------------

def _commands(group: Any = None, path: str = "") -> Iterator[tuple[str, Any]]:
    """(name, click command) of every command; typer vendors click, hence the duck typing."""
    group = group or typer.main.get_command(app)
    for name, command in getattr(group, "commands", {}).items():
        if hasattr(command, "commands"):
            yield from _commands(command, f"{path}{name} ")
        else:
            yield f"{path}{name}", command


def _one_error_line(result) -> str:  # type: ignore[no-untyped-def]
    """The error line of a failed invocation, checking there is exactly one and no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.lower().startswith("error")]
    assert len(lines) == 1, result.output
    return lines[0]


# --- item 1: every shared option defined once, one error boundary ---------------------------------------------

def test_every_command_has_the_error_boundary_and_shared_options_agree() -> None:
    commands = dict(_commands())
    assert {"verify", "mpe", "run", "eval", "agent", "suite run", "overfit refine", "env build"} <= set(commands)
    helps: dict[str, set[str]] = {}
    for name, command in commands.items():
        if name in ("mock-llm", "env run"):
            continue  # no domain errors: the server and a pass-through command
        assert getattr(command.callback, "__wrapped__", None) is not None, f"{name} has no error boundary"
        for param in command.params:
            if param.param_type_name == "option" and param.opts[-1] in ("--llm-mode", "--llm-store", "--store",
                                                                       "--json", "--config", "--python"):
                helps.setdefault(param.opts[-1], set()).add(param.help or "")
    assert all(len(texts) == 1 for texts in helps.values()), helps  # one definition, one help text


def test_the_error_boundary_prints_one_line_for_a_domain_error(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["mpe", str(tmp_path), "--config", str(tmp_path / "missing.yaml")])
    assert "missing.yaml: config file not found" in _one_error_line(result)

    @cli_errors
    def raises_bytes() -> None:
        b"\xff\xfe".decode()

    with pytest.raises(typer.Exit):
        raises_bytes()


# --- item 2: numeric flags are range-checked at the command line ----------------------------------------------

@pytest.mark.parametrize(("args", "flag", "allowed"), [
    (["mpe", "x", "--per-operator", "-3"], "--per-operator", ">= 1"),
    (["mpe", "x", "--per-operator", "0"], "--per-operator", ">= 1"),
    (["mpe", "x", "--workers", "0"], "--workers", ">= 1"),
    (["mpe", "x", "--tau", "1.5"], "--tau", "0 to 1"),
    (["verify", "x", "--timeout", "-1"], "--timeout", "more than 0, at most 604800"),
    (["run", "x", "--rounds", "-1"], "--rounds", ">= 1"),
    (["eval", "--instances", "x", "--seed", "-2"], "--seed", ">= 0"),
    (["suite", "mutants", "m.py", "--workers", "0"], "--workers", ">= 1"),
    (["overfit", "refine", "--instances", "x", "--fixes", "gold", "--tests", "t", "--max-iterations", "16"],
     "--max-iterations", "0 to 15"),
])
def test_bad_numeric_flags_are_one_line(args, flag, allowed, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    line = _one_error_line(CliRunner().invoke(app, args))
    assert f"'{flag}'" in line
    assert f"(allowed: {allowed})" in line


def test_every_numeric_option_is_range_checked() -> None:
    unchecked = [f"{name} {param.opts[-1]}" for name, command in _commands() for param in command.params
                 if param.param_type_name == "option" and not param.is_flag
                 and getattr(param, "type_descriptor", None) is not None
                 and param.type_descriptor.annotation in (int, float) and param.callback is None]
    assert unchecked == []
    checked = [p for _, c in _commands() for p in c.params if p.param_type_name == "option" and p.callback]
    assert len(checked) > 40  # the walk does see the options


# --- item 3: help and --version -------------------------------------------------------------------------------

def test_version_and_help_texts() -> None:
    from coharden import __version__
    from coharden.schema.mutant import BUILTIN

    runner = CliRunner()
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0
    assert version.stdout.strip() == f"coharden {__version__}"
    for name, _ in [("", None), *_commands()]:
        shown = runner.invoke(app, [*name.split(), "--help"], terminal_width=200)
        assert shown.exit_code == 0, name
        assert "<bool>" not in shown.stdout, name  # flags take no value
    flat = " ".join(runner.invoke(app, ["mpe", "--help"], terminal_width=200).stdout.split())
    assert all(op in flat for op in BUILTIN)  # --operators names every operator
    assert "--tau" in flat  # an old flag: named among those still read, its cutoff is a key
    tau = runner.invoke(app, ["config", "keys", "mpe.tau", "--json"]).stdout
    assert '"default": 0.202' in tau
    assert "Laxity cutoff" in tau
    run_help = " ".join(runner.invoke(app, ["run", "--help"], terminal_width=200).stdout.split())
    assert "--tau" in run_help  # read for one release, as -c loop.tau
    loop_tau = runner.invoke(app, ["config", "keys", "loop.tau", "--json"]).stdout
    assert "0.2, the CoHarden loop's threshold" in loop_tau
    assert "Seed of the loop's samplers" in runner.invoke(app, ["config", "keys", "loop.seed", "--json"]).stdout


# --- item 4: precise messages ---------------------------------------------------------------------------------

def test_patch_and_flag_messages(instance_dir, calc_repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    repo, _ = calc_repo
    runner = CliRunner()
    store = ["-c", f"store={tmp_path / 's.sqlite'}", "-c", "timeout=30"]

    def error(*args: str) -> str:
        return _one_error_line(runner.invoke(app, [*args, *store]))

    broken = tmp_path / "broken.diff"
    broken.write_text(make_patch(repo, calc_test_file("def test_broken(:\n    pass")))
    assert "broken: the test patch leaves tests/test_calc.py with a syntax error (line" in \
        error("verify", str(instance_dir), "--test", str(broken))
    prose = tmp_path / "notes.txt"
    prose.write_text("just some notes\n")
    assert error("verify", str(instance_dir), "--test", str(prose)) == \
        f"error: --test: {prose} is not a unified diff (no file changes in it)"
    empty = tmp_path / "empty.diff"
    empty.write_text("")
    assert error("verify", str(instance_dir), "--fix", str(empty)) == f"error: --fix: {empty} is empty"
    test_only = tmp_path / "test-only.diff"
    test_only.write_text(make_patch(repo, calc_test_file(GOOD_TEST)))
    assert "--fix: the patch changes no source file (only tests: give it as --test)" in \
        error("verify", str(instance_dir), "--fix", str(test_only))
    binary = tmp_path / "latin1.diff"
    binary.write_bytes(make_patch(repo, CALC_FIX).encode() + b"# caf\xe9\n")
    assert f"--test: {binary} is not UTF-8 text" in error("verify", str(instance_dir), "--test", str(binary))
    records = tmp_path / "records.jsonl"
    records.write_bytes(b'{"instance_id": "caf\xe9", "repo": "o/n", "base_commit": "c"}\n')
    assert f"{records}: not UTF-8 text" in error("verify", str(records))
    assert "Invalid value for '--executor': 'foo' (known: local, ray)" in error("mpe", str(instance_dir),
                                                                                "--executor", "foo")
    assert "--method: 'bogus' (known: coharden, fix-only," in error("run", str(instance_dir), "--method", "bogus")


def test_env_infer_on_a_directory_inside_a_repository_analyses_that_directory() -> None:
    project = Path(__file__).resolve().parents[2] / "examples" / "boundary_check" / "project"
    result = CliRunner().invoke(app, ["env", "infer", str(project)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["repo"] == str(project)
    assert "analysing the files of this directory only" in " ".join(result.stderr.split())
    at_commit = CliRunner().invoke(app, ["env", "infer", str(project), "--commit", "HEAD~1"])
    assert "give the repository's top directory" in _one_error_line(at_commit)


def test_an_unclassified_mpe_says_so_once(instance_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(app, [
        "mpe", str(instance_dir), "--mutator", "llm", "--model", "openai/gpt-4o-mini", "--api-base",
        "http://127.0.0.1:9/v1", "--budget-usd", "0", "--samples", "1", "--store", str(tmp_path / "s.sqlite"),
        "--timeout", "30", "-w", "1"])
    assert result.exit_code == 1, result.output
    assert "Inconclusive" not in result.output
    assert result.output.count("no classification") == 1
    assert result.output.count("LLM pool incomplete") == 1


# --- item 5: progress on stderr, output never wrapped ---------------------------------------------------------

@pytest.mark.slow
def test_single_mpe_shows_mutant_progress_on_a_terminal_only(instance_dir, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import io

    from rich.console import Console

    import coharden.cli.common as common

    args = ["mpe", str(instance_dir), "--store", str(tmp_path / "s.sqlite"), "--timeout", "30", "-w", "1"]
    screen = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=screen, force_terminal=True, width=160))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    total = sum(row["total"] for row in json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
                ["per_operator"].values())
    assert total > 0
    assert f"{total}/{total}" in screen.getvalue()
    assert "mutants" in screen.getvalue()
    quiet = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=quiet, force_terminal=True, width=160))
    assert CliRunner().invoke(app, [*args, "--json"]).exit_code == 0
    assert quiet.getvalue() == ""  # --json: no bar
    piped = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=piped, width=160))
    assert CliRunner().invoke(app, args).exit_code == 0
    assert piped.getvalue() == ""  # stderr not a terminal: no bar


@pytest.mark.slow
def test_printed_mutant_diffs_are_not_wrapped(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    example = Path(__file__).resolve().parents[2] / "examples" / "boundary_check"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    args = ["mpe", str(example), "--test", "lax", "--store", str(tmp_path / "s.sqlite"), "--show", "50"]
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    from coharden.mutation.diff_view import folded

    firsts: dict[str, str] = {}  # one wrong fix shown per behaviour let through, as its change to the fixed code
    for m in data["mutants"]:
        if m["cell"] == "beta":
            firsts.setdefault(m["behaviour"], folded(m["mutant"]["change"] or m["mutant"]["patch"]))
    lax = list(firsts.values())
    assert lax, "the lax example lets some mutant through"
    assert max(len(line) for patch in lax for line in patch.splitlines()) > 30
    shown = CliRunner().invoke(app, args, env={"COLUMNS": "30"})
    assert shown.exit_code == 0, shown.output
    for patch in lax:
        assert patch.rstrip("\n") in shown.stdout  # verbatim: narrow or piped output does not break the diff


# --- item 6: a relative patch path of the README resolves against the instance directory ----------------------

def test_relative_patch_paths_fall_back_to_the_instance_directory(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    example = Path(__file__).resolve().parents[2] / "examples" / "boundary_check"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    args = ["verify", str(example), "--store", str(tmp_path / "s.sqlite"), "--json"]
    found = CliRunner().invoke(app, [*args, "--test", "candidates/lax.patch"])  # the README's example
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["test"] == "lax"
    local = tmp_path / "candidates" / "lax.patch"  # a file of that name in the current directory comes first
    local.parent.mkdir()
    local.write_text("not a diff\n")
    assert "is not a unified diff" in _one_error_line(CliRunner().invoke(app, [*args, "--test",
                                                                                "candidates/lax.patch"]))
    missing = CliRunner().invoke(app, [*args, "--test", "candidates/none.patch"])
    assert "'candidates/none.patch' is neither a patch file nor a known name" in _one_error_line(missing)


# --- the run options, spelled once (@run_options) --------------------------------------------------------------

def test_run_options_keep_their_place_and_reach_the_settings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from coharden.cli.common import RunOptions

    for command in (["verify"], ["mpe"], ["run"], ["eval"], ["overfit", "reward"]):
        lines = [line.strip().removeprefix("-c, ") for line in CliRunner().invoke(app, [*command, "--help"]).output
                 .splitlines()]
        flags = [line.split()[0] for line in lines if line.startswith("--")]
        at = flags.index("--repos")
        assert flags[at:at + 2] == ["--repos", "--config"], command  # the time limit, python, store: -c keys
    settings = RunOptions(repos=tmp_path, timeout=7.0, python="python3.11", store=tmp_path / "s.sqlite").settings(
        mpe={"seed": 3})
    assert (settings.repos_dir, settings.sandbox.timeout, settings.environment.python, settings.store,
            settings.mpe.seed) == (tmp_path, 7.0, "python3.11", tmp_path / "s.sqlite", 3)


# --- Ctrl-C in a batch (issue 34) ----------------------------------------------------------------------------------
BATCH_EXAMPLES = ("boundary_check", "printer_brackets", "warn_or_raise", "json_display")


def _batch_inputs(tmp_path: Path) -> tuple[Path, Path]:
    """Instance records and one prediction (a lax or misaligned candidate) for each of four bundled examples."""
    from coharden.instances import load_local

    examples = Path(__file__).resolve().parents[2] / "examples"
    local = [load_local(examples / name, tmp_path / "cache") for name in BATCH_EXAMPLES]
    records = tmp_path / "instances.jsonl"
    records.write_text("".join(json.dumps(x.instance.model_dump(mode="json")) + "\n" for x in local))
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": x.instance.instance_id, "model_name_or_path": "sys",
                                               "model_patch": x.candidates[0].patch}) + "\n" for x in local))
    return records, predictions


def _interrupt_batch(tmp_path: Path, signals: int) -> tuple[int, list[tuple[int, str]], int, Path]:
    """Start a batch `mpe` in a subprocess, SIGINT it (``signals`` times) once its first row is in, and return
    (exit status, stderr lines each with the rows finished when it was read, the rows finished at the first
    signal, out). Rows, not seconds: what was done before and after a signal, whatever the machine's load (the
    seconds are benchmarks/kill_latency.py's)."""
    import threading

    records, predictions = _batch_inputs(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*COHARDEN, "mpe", "--instances", str(records), "--predictions", str(predictions), "--workers", "1",
         "--output", str(out), "--store", str(tmp_path / "batch.sqlite"), "--timeout", "60"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )
    partial = out / "mpe.jsonl.partial"

    def rows() -> int:
        return len(partial.read_text().splitlines()) if partial.is_file() else 0

    lines: list[tuple[int, str]] = []
    reader = threading.Thread(target=lambda: [lines.append((rows(), line.rstrip())) for line in proc.stderr or []],
                              daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not rows():
            assert proc.poll() is None, "the batch ended before it was interrupted"
            assert time.monotonic() < deadline, "no row arrived"
            time.sleep(0.1)
        at_signal = rows()
        for n in range(signals):
            if n:
                # as a user does: press again once the first press was answered - two signals that arrive
                # before Python's handler ran (the main thread blocked in a wait) are one call of it
                while not any(line.startswith("interrupted: finishing") for _, line in lines):
                    assert proc.poll() is None, "the batch ended before the second Ctrl-C"
                    time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)  # a hang guard: the whole batch takes longer
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    return proc.returncode, lines, at_signal, out


def _stored_rows(store: Path) -> int:
    import sqlite3

    with sqlite3.connect(store) as conn:
        return conn.execute("SELECT COUNT(*) FROM records WHERE kind = 'mpe'").fetchone()[0]


@pytest.mark.slow
def test_ctrl_c_in_a_batch_says_so_stops_new_work_and_keeps_the_finished_rows(tmp_path: Path) -> None:
    status, lines, at_signal, out = _interrupt_batch(tmp_path, signals=1)
    assert status == 130
    said = [(done, line) for done, line in lines if line.startswith("interrupted: finishing")]
    assert said, lines
    done, line = said[0]
    assert line == "interrupted: finishing 1 running job (Ctrl-C again to stop now)"
    assert done == at_signal  # at once, not when the running job is done
    assert not any("Traceback" in line for _, line in lines)
    finished = [json.loads(x) for x in (out / "mpe.jsonl.partial").read_text().splitlines()]
    assert 1 <= len(finished) < len(BATCH_EXAMPLES)  # no new job after the Ctrl-C
    assert _stored_rows(tmp_path / "batch.sqlite") == len([r for r in finished if "error" not in r]) >= 1


@pytest.mark.slow
def test_a_second_ctrl_c_stops_a_batch_now(tmp_path: Path) -> None:
    status, lines, at_signal, out = _interrupt_batch(tmp_path, signals=2)
    assert status == 130
    assert any(line.startswith("interrupted: finishing") for _, line in lines)
    assert any(line == "stopped" for _, line in lines), lines
    # now: the running job is abandoned, not finished
    assert len((out / "mpe.jsonl.partial").read_text().splitlines()) == at_signal


# --- unwritable outputs and non-finite numbers: one error line before any work (issue 34) ---------------------------
EX = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Path]:
    """A directory nothing can be written in: a read-only one for a normal user; for root (whom permissions do
    not stop) /sys, where the kernel refuses new entries."""
    from coharden.cli.options import unwritable

    if os.geteuid() != 0:
        directory = tmp_path / "locked"
        directory.mkdir()
        directory.chmod(0o555)
        yield directory
        directory.chmod(0o755)
        return
    if unwritable(Path("/sys"), directory=True) is None:
        pytest.skip("/sys is writable here")
    yield Path("/sys")


def _predictions(tmp_path: Path) -> Path:
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps({"instance_id": "example__boundary_check", "model_name_or_path": "x",
                                "model_patch": (EX / "boundary_check/candidates/lax.patch").read_text()}) + "\n")
    return path


UNWRITABLE_CASES = {
    "mpe --output": lambda t, d: ["mpe", "--instances", str(EX / "boundary_check"), "--predictions",
                                  str(_predictions(t)), "--output", str(d / "out"), "--store", str(t / "s.sqlite")],
    "mpe --store": lambda t, d: ["mpe", str(EX / "boundary_check"), "--test", "lax", "--store", str(d / "s.sqlite")],
    "eval -o": lambda t, d: ["eval", "--instances", str(EX / "boundary_check"), "--tests", str(_predictions(t)),
                             "-o", str(d / "ev"), "--store", str(t / "s.sqlite")],
    "suite run -o": lambda t, d: ["suite", "run", str(EX / "suite/intervals.py"), "--tests",
                                  str(EX / "suite/test_intervals.py"), "-o", str(d / "su")],
    "env infer -o": lambda t, d: ["env", "infer", str(EX / "boundary_check/project"), "-o", str(d / "plan.json")],
    "run -o": lambda t, d: ["run", str(EX / "boundary_check"), "--model", "openai/x", "-o", str(d / "run")],
    "examples check --store": lambda t, d: ["examples", "check", "--dir", str(EX), "--store", str(d / "s.sqlite")],
}


@pytest.mark.parametrize("case", sorted(UNWRITABLE_CASES))
def test_an_unwritable_output_is_one_error_before_any_work(case: str, tmp_path: Path, locked: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from coharden.execution import sandbox

    started: list[list[str]] = []  # every process coharden starts goes through sandbox.spawn
    monkeypatch.setattr(sandbox, "spawn", lambda cmd, *args, **kwargs: started.append(cmd))
    result = CliRunner().invoke(app, UNWRITABLE_CASES[case](tmp_path, locked))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert _flat(f"cannot write in {locked}") in _flat(result.output)
    assert started == []  # refused when parsed: not a test process ran


def test_verify_with_a_read_only_cache_names_it(tmp_path: Path, locked: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The default store is CACHE/store.sqlite (issue 52; it was ./.coharden/ wherever the command ran): a cache
    directory nothing can be written in is one error naming it and the way out, never a traceback."""
    monkeypatch.chdir(locked)
    monkeypatch.setenv("COHARDEN_CACHE", str(locked))
    result = CliRunner().invoke(app, ["verify", str(EX / "json_display"), "--test", "lax"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    said = _flat(result.output)
    assert _flat(f"error: cannot write in the cache directory {locked}") in said
    assert _flat("set COHARDEN_CACHE (or -c cache_dir=DIR) to a writable directory") in said


def test_the_default_store_is_in_the_cache_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coharden.config import Settings, load_settings

    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert Settings().store == tmp_path / "cache" / "store.sqlite"
    assert load_settings(["cache_dir=/elsewhere"]).store == Path("/elsewhere/store.sqlite")
    assert load_settings(["store=s.sqlite"]).store == Path("s.sqlite")  # a store given stays where it is


def test_a_store_that_is_a_directory_or_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for store in (tmp_path, tmp_path / "file" / "s.sqlite"):
        result = CliRunner().invoke(app, ["verify", str(EX / "json_display"), "--test", "lax", "--store", str(store)])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert _flat("Invalid value for '--store'") in _flat(result.output)


@pytest.mark.parametrize(("flag", "value"), [("--tau", "nan"), ("--timeout", "nan"), ("--timeout", "inf"),
                                        ("--timeout", "-inf"), ("--timeout", "1e308"), ("--tau", "inf")])
def test_non_finite_or_huge_numbers_are_refused(flag: str, value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["mpe", str(EX / "boundary_check"), "--test", "lax", flag, value,
                                      "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    said = _flat(result.output)
    assert _flat(f"Invalid value for '{flag}'") in said
    assert _flat("not a finite number") in said or _flat("out of range") in said


def test_a_config_file_with_a_non_finite_timeout_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("timeout: .nan\n")
    result = CliRunner().invoke(app, ["mpe", str(EX / "boundary_check"), "--test", "lax", "--config", str(config),
                                      "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2, result.output
    assert _flat("invalid setting: sandbox.timeout") in _flat(result.output)


def test_tables_use_the_full_width_when_not_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped output (CliRunner's is not a terminal) is not cut at rich's default 80 columns; COLUMNS still wins."""
    monkeypatch.delenv("COLUMNS", raising=False)
    args = ["verify", str(EX / "json_display"), "--test", "lax", "--store", str(tmp_path / "s.sqlite")]
    piped = CliRunner().invoke(app, args)
    assert piped.exit_code == 0, piped.output
    [row] = [line for line in piped.stdout.splitlines() if line.startswith("│ buggy")]
    assert "tests/test_repro.py::test_repro_json_field_uses_json_quotes: AssertionError: assert" in row  # one line
    assert len(row) > 80
    narrow = CliRunner().invoke(app, args, env={"COLUMNS": "60"})
    assert max(len(line) for line in narrow.stdout.splitlines() if line[:1] in "┏┃┡│└") <= 60  # the table's lines


def test_operator_names_stay_whole_in_a_100_column_mpe_table(tmp_path: Path) -> None:
    """The per-operator table has ten columns: at 100 columns rich cut the operator names (typed back into
    --operators); the inadmissible reasons fold instead."""
    args = ["mpe", str(EX / "boundary_check"), "--test", "lax", "--operators",
            "behavior_substitution,input_specific_shortcut", "--per-operator", "1", "--store",
            str(tmp_path / "s.sqlite"), "-w", "1"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "100", "COHARDEN_CACHE": str(tmp_path / "cache")})
    assert result.exit_code in (0, 1), result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ ") and "_" in line]
    assert any("behavior_substitution" in line for line in rows), result.stdout
    assert any("input_specific_shortcut" in line for line in rows), result.stdout
    assert max(len(line) for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└") <= 100  # tables' lines


def test_verify_names_the_fix_it_graded(tmp_path: Path) -> None:
    fix = tmp_path / "my_fix.patch"
    fix.write_text((EX / "json_display" / "fix.patch").read_text())
    args = ["verify", str(EX / "json_display"), "--test", "golden", "--fix", str(fix), "--store",
            str(tmp_path / "s.sqlite")]
    shown = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "test 'golden', fix 'my_fix'" in shown.stdout
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert json.loads(as_json.stdout)["fix"] == "my_fix"


def test_python_that_is_no_interpreter_or_lacks_pytest_says_so(tmp_path: Path) -> None:
    import venv

    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a real interpreter without pytest
    for python, said in (("/bin/ls", "is not a Python interpreter"),
                         (str(bare / "bin" / "python"), "cannot import pytest (ModuleNotFoundError: No module "
                                                         "named 'pytest'): install pytest into it")):
        result = CliRunner().invoke(app, ["verify", str(EX / "json_display"), "--test", "lax", "--python", python,
                                          "--store", str(tmp_path / "s.sqlite")], env={"COLUMNS": "300"})
        assert result.exit_code == 2, result.output
        assert _flat(said) in _flat(result.output)
        assert "Traceback" not in result.output
