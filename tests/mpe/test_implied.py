"""Fewer runs (issue 35): runs whose outcome is implied are not made, the reference's runs are shared across
commands of one store, and a fork server that dies mid-batch is restarted once. Real git, real pytest runs."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import make_patch, make_repo
from typer.testing import CliRunner

from coharden.cli import app
from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import load_local, resolve_repo
from coharden.mpe.evaluate import MPERequest, MPEResult, evaluate
from coharden.mpe.implied import UNREACHED, Implied, changed_functions, mutant_files, reach_pass
from coharden.patches import make_patch as diff_of
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Mutant, Operator
from coharden.schema.verdict import Outcome

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

BUGGY = textwrap.dedent("""\
    def helper(x):
        return x + 1


    def used(x):
        return helper(x) + 1


    def at_import(x):
        return x * 2


    def in_fixture(x):
        return x - 1


    def unused(x):
        y = x
        return y - 1


    TABLE = at_import(2)
    """)
FIXED = BUGGY.replace("return helper(x) + 1", "return helper(x) + 2").replace(
    "    y = x\n    return y - 1", "    y = x * 1\n    return y - 2")
TEST_FILE = textwrap.dedent("""\
    import pytest

    from m import in_fixture, used


    @pytest.fixture
    def prepared():
        return in_fixture(3)


    def test_old(prepared):
        assert prepared == 2
    """)
OPERATORS = [Operator.INCOMPLETE_FIX, Operator.BEHAVIOR_SUBSTITUTION, Operator.TOKEN_REVERT, Operator.WIDENED_SCOPE]


def _project(tmp_path: Path) -> tuple[Instance, Path]:
    repo, commit = make_repo(tmp_path / "m", {"m/__init__.py": BUGGY, "tests/__init__.py": "",
                                              "tests/test_m.py": TEST_FILE})
    golden = make_patch(repo, {"tests/test_m.py": TEST_FILE + "\n\ndef test_used(prepared):\n"
                               "    assert used(1) == 4\n"})
    inst = Instance(instance_id="m__1", repo=str(repo), base_commit=commit,
                    patch=make_patch(repo, {"m/__init__.py": FIXED}), test_patch=golden)
    return inst, repo


def _candidate(repo: Path, body: str) -> str:
    return make_patch(repo, {"tests/test_m.py": TEST_FILE + "\n\n" + textwrap.dedent(body)})


def _executor(inst: Instance, repo: Path, tmp_path: Path, name: str) -> InstanceExecutor:
    settings = Settings(timeout=60, store=tmp_path / f"{name}.sqlite", cache_dir=tmp_path / "cache", workers=1)
    return InstanceExecutor(inst, repo, settings, Store(settings.store))


def _cells(result: MPEResult) -> dict[str, str | None]:
    return {r.mutant.id: r.cell.value if r.cell else None for r in result.mutants}


def _made(result: MPEResult) -> int:
    return sum(row["made"] for row in result.runs.values())


# --- what a mutant changes ---------------------------------------------------------------------------------------

def test_only_mutants_that_change_function_bodies_name_functions() -> None:
    source = textwrap.dedent('''\
        import functools

        LIMIT = 3


        def f(x, y=1):
            """Doc."""
            def inner(z):
                return z + 1
            return inner(x) + y


        class C:
            size = 2

            @functools.lru_cache
            def m(self):
                return self.size
        ''')

    def changed(old: str, new: str) -> list[tuple[str, int, int, str, str]] | None:
        assert old in source
        return changed_functions({"p.py": source}, {"p.py": source.replace(old, new)})

    assert changed("return inner(x) + y", "return inner(x) - y") == [("p.py", 6, 6, "f", "f")]
    assert changed("return z + 1", "return z + 2") == [("p.py", 8, 8, "inner", "f.inner")]
    assert changed("return self.size", "return 0") == [("p.py", 17, 16, "m", "C.m")]  # code starts at its decorator
    # what an import evaluates: module and class level, signatures, defaults, decorators, docstrings
    for old, new in [("LIMIT = 3", "LIMIT = 4"), ("y=1", "y=2"), ('"""Doc."""', '"""Other."""'),
                     ("size = 2", "size = 3"), ("@functools.lru_cache", "@functools.cache"),
                     ("class C:", "class C(object):")]:
        assert changed(old, new) is None, old
    # a nested def's signature is evaluated when the outer body runs: the outer function is the one changed
    assert changed("def inner(z):", "def inner(z, w=0):") == [("p.py", 6, 6, "f", "f")]
    assert changed_functions({"p.py": source}, {"p.py": source + "\n\ndef g():\n    pass\n"}) is None  # a new def
    assert changed_functions({"p.py": source}, {"p.py": "def f(:\n"}) is None
    assert changed_functions({"p.txt": "a"}, {"p.txt": "b"}) is None
    assert changed_functions({"p.py": source}, {"p.py": source}) == []


def test_a_mutant_s_files_are_read_back_exactly_from_its_patch() -> None:
    base = {"p.py": "a = 1\n\n\ndef f():\n    return 1\n", "q.py": "x = 1"}
    new = {"p.py": base["p.py"].replace("return 1", "return 2"), "q.py": "x = 2"}  # q.py: no newline at the end
    patch = diff_of((path, base[path], new[path]) for path in base)
    mutant = Mutant(id="m-1", operator=Operator.INCOMPLETE_FIX, description="", location="p.py:5", patch=patch)
    assert mutant_files(mutant, base.get) == new
    assert mutant_files(mutant, {"p.py": "something else\n", "q.py": "x = 1"}.get) is None


def test_a_mutant_that_leaves_a_file_of_the_fix_at_its_base_changes_that_file() -> None:
    base = {"a.py": "def f():\n    return 1\n", "b.py": "def g():\n    return 1\n"}
    fixed = {"a.py": "def f():\n    return 2\n", "b.py": "def g():\n    return 2\n"}
    only_a = diff_of([("a.py", base["a.py"], fixed["a.py"])])  # b.py's part of the fix dropped
    mutant = Mutant(id="m-1", operator=Operator.INCOMPLETE_FIX, description="", location="a.py:2", patch=only_a)
    decider = Implied("", fixed, base.get, {})
    assert decider.changes(mutant) == [("b.py", 1, 1, "g", "g")]


# --- the reach pass ------------------------------------------------------------------------------------------------

def test_the_reach_pass_sees_import_fixtures_and_calls_and_no_more(tmp_path: Path) -> None:
    inst, repo = _project(tmp_path)
    with _executor(inst, repo, tmp_path, "s") as ex:
        golden = ex.golden_test()
        reach = reach_pass(ex, inst.patch, golden)
        traced = reach_pass(ex, inst.patch, golden, backend="settrace")  # the tracer of Pythons before 3.12
        for seen in (reach, traced):
            assert seen.complete, seen.why
            assert seen.outcome == "PASS"
            names = {name for path, _, name in seen.reached if path == "m/__init__.py"}
            # at_import runs while the test module imports m (collection), in_fixture in a fixture's setup
            assert {"helper", "used", "at_import", "in_fixture"} <= names
            assert "unused" not in names
        assert not reach.cached
        assert reach_pass(ex, inst.patch, golden).cached  # kept in the store
        spawner = ex.test_patch(_candidate(repo, """\
            def test_spawns(prepared):
                import subprocess, sys
                subprocess.run([sys.executable, "-c", "pass"], check=True)
                assert used(1) == 4
            """), name="spawner")
        spawned = reach_pass(ex, inst.patch, spawner)
    assert not spawned.complete  # what the other process ran is not seen: nothing may be implied from it
    assert "another process" in spawned.why


def _python_312() -> str | None:
    """An interpreter with ``sys.monitoring`` (3.12+), for the plugin's other backend."""
    import shutil
    import subprocess

    found = sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.1[2-9]*/bin/python"))
    found += [w for w in (shutil.which(f"python3.{minor}") for minor in (12, 13, 14)) if w]
    for python in found:
        check = subprocess.run([python, "-c", "import sys; assert sys.version_info >= (3, 12)"],
                               capture_output=True, check=False)
        if check.returncode == 0:
            return python
    return None


def test_the_reach_plugin_s_monitoring_backend_notes_each_function_once(tmp_path: Path) -> None:
    """The plugin without pytest (it only needs it for its hook): sys.monitoring on Python 3.12+."""
    import shutil
    import subprocess

    python = _python_312()
    if python is None:
        pytest.skip("no Python 3.12+ interpreter here (sys.monitoring)")
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("def a():\n    return b()\n\n\ndef b():\n    return 1\n\n\n"
                                              "def never():\n    return 2\n\n\nX = a()\n")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "src" / "coharden" / "mpe" / "reach_plugin.py",
                plugins / "coharden_reach.py")
    out = tmp_path / "reach.json"
    script = "import coharden_reach, pkg\nfor _ in range(3): pkg.b()\ncoharden_reach._finish()\n"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{plugins}{os.pathsep}{root}",
           "COHARDEN_REACH_ROOT": str(root), "COHARDEN_REACH_OUT": str(out)}
    subprocess.run([python, "-c", script], env=env, check=True, cwd=tmp_path)
    data = json.loads(out.read_text())
    assert data["backend"] == "monitoring"
    assert data["complete"], data["why"]
    assert sorted(name for _, name in data["reached"]["pkg/__init__.py"]) == ["<module>", "a", "b"]
    spawning = "import coharden_reach, os\nos.system('true')\ncoharden_reach._finish()\n"
    subprocess.run([python, "-c", spawning], env=env, check=True, cwd=tmp_path)
    assert not json.loads(out.read_text())["complete"]


# --- implied runs ----------------------------------------------------------------------------------------------------

def test_implied_runs_are_not_made_and_change_nothing(tmp_path: Path) -> None:
    inst, repo = _project(tmp_path)
    lax = _candidate(repo, "def test_used_lax(prepared):\n    assert used(1) != 3\n")
    config = MPEConfig(operators=OPERATORS)
    results: dict[str, MPEResult] = {}
    for name, cfg in [("implied", config), ("checked", config.model_copy(update={"implied": False}))]:
        with _executor(inst, repo, tmp_path, name) as ex:
            results[name] = evaluate(ex, MPERequest(inst.patch, ex.test_patch(lax, name="lax"), ex.golden_test(), cfg))
    implied, checked = results["implied"], results["checked"]
    assert _cells(implied) == _cells(checked)
    assert (implied.test_class, implied.laxity, implied.matrix.counts()) == \
        (checked.test_class, checked.laxity, checked.matrix.counts())
    given = [v for r in implied.mutants for v in (r.candidate, r.reference) if v.implied]
    assert given
    assert all(v.implied == UNREACHED and v.outcome is Outcome.PASS for v in given)
    # every implied verdict is of a mutant confined to unused(), which no test enters; a mutant of used() runs
    for r in implied.mutants:
        files = mutant_files(r.mutant, {"m/__init__.py": BUGGY}.get)
        changes = changed_functions({"m/__init__.py": FIXED}, files) if files is not None else None
        confined = changes is not None and [f[3] for f in changes] == ["unused"]
        assert bool(r.candidate.implied) == bool(r.reference.implied) == confined, r.mutant.id
    assert implied.reach == {"candidate": "complete", "reference": "complete"}
    assert sum(row["implied"] for row in implied.runs.values()) == len(given)
    assert not any(row["implied"] for row in checked.runs.values())
    assert _made(implied) < _made(checked)  # the reach passes included
    json_verdict = implied.to_json()["mutants"]
    assert any(m["candidate"].get("implied") == UNREACHED for m in json_verdict)
    # implied verdicts are never stored: the check mode on the same store makes exactly those runs
    with _executor(inst, repo, tmp_path, "implied") as ex:
        again = evaluate(ex, MPERequest(inst.patch, ex.test_patch(lax, name="lax"), ex.golden_test(),
                                        config.model_copy(update={"implied": False})))
    assert _cells(again) == _cells(implied)
    assert _made(again) == len(given)


def test_a_test_flaky_on_the_fixed_code_gets_no_implied_outcome(tmp_path: Path) -> None:
    inst, repo = _project(tmp_path)
    # passes in the F->P check, fails in its second run on the fixed code (the reach pass): two runs disagree
    flaky = _candidate(repo, """\
        def test_used_flaky(prepared):
            import os
            assert used(1) == 4 and "COHARDEN_REACH_OUT" not in os.environ
        """)
    config = MPEConfig(operators=OPERATORS)
    with _executor(inst, repo, tmp_path, "flaky") as ex:
        result = evaluate(ex, MPERequest(inst.patch, ex.test_patch(flaky, name="flaky"), ex.golden_test(), config))
    with _executor(inst, repo, tmp_path, "flaky-checked") as ex:
        checked = evaluate(ex, MPERequest(inst.patch, ex.test_patch(flaky, name="flaky"), ex.golden_test(),
                                          config.model_copy(update={"implied": False})))
    assert result.fail_to_pass
    assert result.flaky == ["candidate: PASS, then FAIL"]
    assert result.reach["candidate"].startswith("flaky on the fixed code")
    assert any("flaky" in w for w in result.warnings)
    assert not any(r.candidate.implied for r in result.mutants)
    assert result.runs["candidate"]["implied"] == 0
    assert result.runs["reference"]["implied"] > 0  # the stable reference still gets them
    assert _cells(result) == _cells(checked)


# --- the reference's runs, shared across commands of one store -------------------------------------------------------

def test_a_second_command_on_the_same_store_makes_no_reference_run(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The operators here need no recording, so the pool does not depend on the candidate; the first command
    (rigorous: it draws more) runs the reference on every mutant the second (lax) draws."""
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    ops = ",".join(OPERATORS)

    def mpe(test: str, store: str) -> dict[str, Any]:
        result = CliRunner().invoke(app, ["mpe", str(EXAMPLES / "boundary_check"), "--test", test, "--operators", ops,
                                          "--store", str(tmp_path / store), "--json", "-w", "1"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    first = mpe("rigorous", "shared.sqlite")
    second = mpe("lax", "shared.sqlite")
    fresh = mpe("lax", "fresh.sqlite")
    assert first["runs"]["reference"]["made"] > 0
    assert second["runs"]["reference"]["made"] == 0, second["runs"]
    assert second["runs"]["reference"]["cached"] > 0
    assert fresh["runs"]["reference"]["made"] > 0
    for key in ("test_class", "laxity", "interval", "matrix_counts", "stop"):
        assert second[key] == fresh[key], key
    assert [(m["mutant"]["id"], m["cell"]) for m in second["mutants"]] == \
        [(m["mutant"]["id"], m["cell"]) for m in fresh["mutants"]]
    assert second["timings"]["cold_start_s"] >= 0


def test_verdicts_run_under_other_limits_or_services_are_not_shared(tmp_path: Path) -> None:
    """Verdicts are shared across commands and sessions of a store: settings that can change one are in its key
    (only when not at their default, so stored keys stay as they were)."""
    local = load_local(EXAMPLES / "boundary_check", tmp_path / "cache")
    keys = []
    for overrides in ({}, {}, {"memory_mb": 1024}, {"max_processes": 64}, {"pass_env": ["LANG"]}):
        settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1).with_overrides(**overrides)
        with InstanceExecutor(local.instance, resolve_repo(local.instance, None), settings, None) as ex:
            keys.append(ex.key("", ex.golden_test()))
    assert keys[0] == keys[1]
    assert len(set(keys)) == 4


# --- a fork server that dies mid-batch ------------------------------------------------------------------------------

def test_a_fork_server_killed_during_a_run_is_restarted_once_and_the_run_made_again(tmp_path: Path) -> None:
    local = load_local(EXAMPLES / "printer_brackets", tmp_path / "cache")
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1)
    with InstanceExecutor(local.instance, resolve_repo(local.instance, None), settings, None) as ex:
        golden = ex.golden_test()
        assert ex.verdict("", golden).outcome is Outcome.FAIL
        server = ex.site.current
        if server is None or server.proc is None:
            pytest.skip(f"no fork server here: {ex.site.server_failed}")
        # the test says it runs (a marker file in its worktree) and waits until it is told to go on
        waiting = ex.test_patch(diff_of([("tests/test_wait.py", None, textwrap.dedent("""\
            import pathlib, time, uuid


            def test_waits():
                pathlib.Path(f"started-{uuid.uuid4().hex}").write_text("")
                for _ in range(1200):
                    if pathlib.Path("go").exists():
                        return
                    time.sleep(0.05)
                raise AssertionError("never told to go on")
            """))]), name="waiting")
        root = ex.workspace_root()

        def outside() -> None:
            """Kill the server during the first run (as the OOM killer would), let the second run finish."""
            seen: set[str] = set()
            for _ in range(2400):
                started = {p.name for p in root.glob("started-*")} - seen
                if started and not seen:
                    seen |= started
                    os.kill(server.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
                elif started:
                    (root / "go").write_text("")
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=outside, daemon=True)
        killer.start()
        verdict = ex.verdict("", waiting)
        killer.join(timeout=120)
        assert verdict.outcome is Outcome.PASS, verdict.short()
        assert len(ex.server_losses) == 1
        assert ex.site.current is not None
        assert ex.site.current is not server
        assert ex.site.current.alive
        assert ex.verdict("", golden.model_copy(update={"name": "golden again"})).outcome is Outcome.FAIL


def test_a_test_is_not_run_on_a_mutant_the_other_test_already_makes_inadmissible(tmp_path: Path) -> None:
    """A mutant that never ends costs the reference its time limit; the candidate's run could not make the
    mutant admissible, so it is not made (and, the reference's TIMEOUT being stored, not for a later candidate
    either). The verdict says so and is never stored: without ``all_or_none`` the test runs."""
    repo, commit = make_repo(tmp_path / "h", {"h.py": "def f(x):\n    return x + 1\n"})
    uses = make_patch(repo, {"test_a.py": "from h import f\n\n\ndef test_a():\n    assert f(1) == 2\n"})
    other = make_patch(repo, {"test_b.py": "def test_b():\n    assert True\n"})
    hang = make_patch(repo, {"h.py": "def f(x):\n    while True:\n        x += 1\n"})
    inst = Instance(instance_id="h__f", repo=str(repo), base_commit=commit, patch=hang, test_patch=uses)
    # one lane: with a second one (a free core) both tests start at once and neither can wait for the other
    settings = Settings(timeout=60, store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache", workers=1,
                        test_lanes=1)
    with InstanceExecutor(inst, repo, settings, Store(settings.store)) as ex:
        a, b = ex.test_patch(uses, name="a"), ex.test_patch(other, name="b")
        made = ex.runs
        first, second = ex.verdicts(hang, [a, b], limits=[2, 2], first_failure=True, all_or_none=True)
        assert first.outcome is Outcome.TIMEOUT
        assert not first.implied
        assert (second.outcome, second.implied) == (Outcome.TIMEOUT, "other_inadmissible")
        assert second.reason.startswith("not run")
        assert ex.runs == made + 1
        # the stored TIMEOUT answers before anything runs, whatever the order
        again_b, again_a = ex.verdicts(hang, [b, a], limits=[2, 2], first_failure=True, all_or_none=True)
        assert (again_b.implied, again_a.outcome) == ("other_inadmissible", Outcome.TIMEOUT)
        assert ex.runs == made + 1
        ran_b, _ = ex.verdicts(hang, [b, a], limits=[2, 2], first_failure=True)  # never stored: b runs now
        assert (ran_b.outcome, ran_b.implied) == (Outcome.PASS, None)
        assert ex.runs == made + 2


def test_run_counts_keep_implied_verdicts_apart_from_runs_not_needed() -> None:
    """An implied verdict (``unreached``) is an outcome the test would have had; a run not needed
    (``other_inadmissible``) is none: the counts keep them apart."""
    from types import SimpleNamespace

    from coharden.mpe.evaluate import _count_runs
    from coharden.schema.verdict import Verdict

    made, stored = Verdict(outcome=Outcome.FAIL), Verdict(outcome=Outcome.PASS, cached=True)
    unreached = Verdict(outcome=Outcome.PASS, implied=UNREACHED)
    not_needed = Verdict(outcome=Outcome.TIMEOUT, implied="other_inadmissible")
    mutants = [SimpleNamespace(candidate=unreached, reference=unreached),
               SimpleNamespace(candidate=not_needed, reference=Verdict(outcome=Outcome.TIMEOUT))]
    result = SimpleNamespace(candidate_buggy=made, candidate_fixed=stored, reference_buggy=made,
                             reference_fixed=made, mutants=mutants)
    runs = _count_runs(result, None)  # type: ignore[arg-type]
    assert runs["candidate"] == {"made": 1, "cached": 1, "implied": 1, "not_needed": 1}
    assert runs["reference"] == {"made": 3, "cached": 0, "implied": 1, "not_needed": 0}
