"""``coharden mutants list`` / ``show ID`` (issue 34, item 13: as mutmut's ``results`` / ``show``): the mutants
of a real single MPE and of a batch row read back from the SQLite store, one by id with its diff; bad input is
one error line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.execution.store import MPE_ROW, Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "boundary_check"


@pytest.fixture(scope="module")
def past_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    """A real single MPE of the bundled example's lax test (two operators, one mutant each), kept in a store."""
    root = tmp_path_factory.mktemp("mutants")
    store = root / "runs.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COHARDEN_CACHE", str(root / "cache"))
        mp.chdir(root)
        result = CliRunner().invoke(app, ["mpe", str(EXAMPLE), "--test", "lax", "--operators",
                                          "incomplete_fix,behavior_substitution", "--per-operator", "1", "--json",
                                          "--store", str(store), "-w", "1"])
    assert result.exit_code == 0, result.output
    return store, json.loads(result.stdout)


def _run(*args: str) -> tuple[int, str, str]:
    """Exit status, stdout, and everything printed (errors go to stderr)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.output


def test_list_shows_every_mutant_of_a_past_single_mpe(past_run) -> None:  # type: ignore[no-untyped-def]
    store, data = past_run
    code, out, _ = _run("mutants", "list", "--store", str(store), "--json")
    assert code == 0
    listed = json.loads(out)
    assert [(m["id"], m["cell"], m["test"]) for m in listed] == [
        (f"{data['instance_id']}:{m['mutant']['id']}", m["cell"], "lax") for m in data["mutants"]]
    assert {m["run"] for m in listed} == {"mpe"}
    code, out, _ = _run("mutants", "results", "--store", str(store), "--cell", "beta", "--json")  # mutmut's name
    assert code == 0
    assert {m["cell"] for m in json.loads(out)} <= {"beta"}
    for columns in ("60", "200"):  # ids stay whole on a narrow console too: they are typed back into `show`
        result = CliRunner().invoke(app, ["mutants", "list", "--store", str(store)], env={"COLUMNS": columns})
        assert result.exit_code == 0
        assert f"{data['instance_id']}:{data['mutants'][0]['mutant']['id']}" in result.stdout


def test_show_prints_the_cell_and_the_change_to_the_fixed_code(past_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, data = past_run
    first = data["mutants"][0]
    mutant_id = f"{data['instance_id']}:{first['mutant']['id']}"
    code, out, _ = _run("mutants", "show", mutant_id, "--store", str(store))
    assert code == 0
    assert out.splitlines()[0].startswith(f"{mutant_id}: {first['mutant']['operator']}")
    assert f"test lax: {first['cell']}" in out
    change = out[out.index("diff --git"):]
    assert change.rstrip("\n") == first["mutant"]["change"].rstrip("\n")
    # as mutmut's `show`: the diff is against the code the operator mutated (the fixed code), so it holds the
    # named change and none of the fix; it applies to the fixed project
    fixed = _git_project(tmp_path / "fixed", EXAMPLE / "project")
    subprocess.run(["git", "apply", str(EXAMPLE / "fix.patch")], cwd=fixed, check=True)
    (tmp_path / "change.diff").write_text(change)
    subprocess.run(["git", "apply", "--check", str(tmp_path / "change.diff")], cwd=fixed, check=True)
    assert len(change) < len(first["mutant"]["patch"])
    # --against-buggy: the applied patch, which applies to the buggy project
    code, out, _ = _run("mutants", "show", mutant_id, "--against-buggy", "--store", str(store))
    assert code == 0
    diff = out[out.index("diff --git"):]
    assert diff.rstrip("\n") == first["mutant"]["patch"].rstrip("\n")
    (tmp_path / "m.diff").write_text(diff)
    subprocess.run(["git", "apply", "--check", str(tmp_path / "m.diff")],
                   cwd=_git_project(tmp_path / "buggy", EXAMPLE / "project"), check=True)
    # a bare mutant id is enough when one instance alone has it
    code, bare, _ = _run("mutants", "show", first["mutant"]["id"], "--against-buggy", "--store", str(store))
    assert code == 0
    assert bare == out


def _git_project(dest: Path, source: Path) -> Path:
    subprocess.run(["cp", "-r", str(source), str(dest)], check=True)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


def test_batch_rows_are_listed_with_their_system(past_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, data = past_run
    store = tmp_path / "batch.sqlite"
    kept = Store(store)
    kept.put_record(MPE_ROW, "k1", {**data, "instance_id": "acme__calc-1", "model_name_or_path": "otter"})
    kept.put_record(MPE_ROW, "k2", {**data, "instance_id": "acme__calc-2", "model_name_or_path": "otter"})
    kept.close()
    code, out, _ = _run("mutants", "list", "--store", str(store), "--instance", "acme__calc-2", "--json")
    assert code == 0
    rows = json.loads(out)
    assert {(m["instance_id"], m["test"], m["run"]) for m in rows} == {("acme__calc-2", "otter", "batch")}
    code, _, out = _run("mutants", "show", data["mutants"][0]["mutant"]["id"], "--store", str(store))
    assert code == 2
    assert out.strip().startswith("error: ")
    assert "give INSTANCE:MUTANT" in out


def test_bad_input_is_one_error_line(past_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, _ = past_run
    for args, message in (
            (["list", "--store", str(tmp_path / "none.sqlite")], "no result store here"),
            (["show", "nope-1", "--store", str(store)], "nope-1: no such mutant in"),
            (["list", "--store", str(store), "--cell", "zeta"], "--cell: 'zeta' (known: alpha, beta, gamma, delta)")):
        code, _, out = _run("mutants", *args)
        assert code == 2
        lines = out.strip().splitlines()
        assert len(lines) == 1
        assert lines[0].startswith("error: ")
        assert message in lines[0]
    assert not (tmp_path / "none.sqlite").exists()  # reading never creates an empty store
