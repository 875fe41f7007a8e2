"""The command line: ``coharden verify`` output and errors, and Ctrl-C in the middle of a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from conftest import CALC_FIX, GOOD_TEST, calc_test_file, make_patch

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
    repo, _ = calc_repo
    started = tmp_path / "started"
    hanging = tmp_path / "hang.diff"
    hanging.write_text(make_patch(repo, calc_test_file(
        f"def test_hangs():\n"
        f"    import os, time\n"
        f"    open({str(started)!r}, 'w').write(str(os.getpid()))\n"
        f"    while True:\n"
        f"        time.sleep(0.05)\n"
    )))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen(
        [*COHARDEN, "verify", str(instance_dir), "--test", str(hanging), "--timeout", "120",
         "--store", str(tmp_path / "ctrlc.sqlite")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists() or not started.read_text():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the hanging test never started"
            time.sleep(0.05)
        assert any(p.name.startswith("coharden-ws-") for p in scratch.iterdir())
        assert int(started.read_text()) in _processes_with_env(f"TMPDIR={scratch}")  # the detector works
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=20)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert elapsed < 10
    assert "Traceback" not in err
    assert [p.name for p in scratch.iterdir() if p.name.startswith("coharden-")] == []  # no workspace, no junit dir
    # every process of the run (the pytest process, any helper) is gone: find them by their TMPDIR
    deadline = time.monotonic() + 5
    while (left := _processes_with_env(f"TMPDIR={scratch}")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
    assert int(started.read_text()) not in left


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
