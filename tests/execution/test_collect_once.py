"""Collect once (issue 35): a sandboxed fork server collects a test's items once and forks each later run of it
after that collection (``collect_once.CollectOnce``). Its verdicts must be those of collecting every time:
on the bundled examples, cell by cell, and where it cannot serve a run (a module-level change, a changed test
module or conftest) the run collects again."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import make_patch

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.sandbox import ProcessResult, bwrap_path
from coharden.schema.instance import Instance

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="collect once needs the bwrap sandbox (a fork "
                                "server that is the sandbox's init); without it every run collects")


def _cells(executor: InstanceExecutor, tests: dict, patches: list[tuple[str, str]]) -> list[tuple]:
    """(test, patch label, outcome, per-id statuses) of every test on every patch, each alone in its process,
    mutants with -x as MPE runs them."""
    cells = []
    for name, test in tests.items():
        for label, patch in patches:
            verdict = executor.verdicts(patch, [test], first_failure=label.startswith("mutant"))[0]
            statuses = sorted((i, [s.value for s in st]) for i, st in verdict.tests.items())
            cells.append((name, label, verdict.outcome.value, statuses))
    return cells


@pytest.mark.slow  # the example's tests on its fix, its base and a mutant per operator, both ways
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("directory", sorted(p.parent for p in EXAMPLES.glob("*/instance.yaml")),
                         ids=lambda d: d.name)
def test_collecting_once_gives_the_verdicts_of_collecting_every_time_on_the_bundled_examples(
        directory: Path, tmp_path: Path) -> None:
    from coharden.instances import load_local, resolve_repo
    from coharden.mutation.pool import PoolRequest, build_pool

    example = load_local(directory, tmp_path / "cache")
    instance = example.instance
    cells = {}
    for collect in (False, True):
        settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1, collect_once=collect)
        with InstanceExecutor(instance, resolve_repo(instance, None), settings) as ex:
            tests = {"golden": ex.golden_test()}
            tests |= {p.stem: ex.test_patch(p.read_text(), name=p.stem)
                      for p in sorted((directory / "candidates").glob("*.patch"))}
            if not collect:
                pool = build_pool(ex, PoolRequest(instance.patch, [tests["golden"]]))
                first = {}
                for mutant in pool.mutants:
                    first.setdefault(mutant.operator, mutant)
                patches = [("buggy", ""), ("fix", instance.patch),
                           *((f"mutant {m.operator}", m.patch) for m in first.values())]
            cells[collect] = _cells(ex, tests, patches)
            server = ex.site.current
            if collect:
                assert server is not None
                assert server.collected_runs > 0, server.collect_log
    assert cells[True] == cells[False]


# --- where a zygote cannot serve: collect again ---------------------------------------------------------------
PROJECT = {
    "pkg/__init__.py": "",
    "pkg/mod.py": "LIMIT = 3\n\n\ndef f(x):\n    return min(x, LIMIT)\n",
    "conftest.py": "",
}
TEST = {"tests/test_f.py": "from pkg.mod import f\n\n\ndef test_f():\n    assert f(5) == 3\n\n\n"
                           "def test_small():\n    assert f(1) == 1\n"}


def _runs(repo: Path, commit: str, tmp_path: Path, collect: bool, patches: list[str], test_patches: list[str]
          ) -> tuple[list[tuple], list[str]]:
    settings = Settings(timeout=60, cache_dir=tmp_path / f"cache-{collect}", workers=1, collect_once=collect)
    instance = Instance(instance_id="pkg__collect", repo=str(repo), base_commit=commit, test_patch="")
    with InstanceExecutor(instance, repo, settings) as ex:
        tests = [ex.test_patch(t, name=f"t{i}") for i, t in enumerate(test_patches)]
        cells = _cells(ex, {t.name: t for t in tests}, [(f"p{i}", p) for i, p in enumerate(patches)])
        server = ex.site.current
        assert server is not None
        return cells, list(server.collect_log)


def test_a_change_a_collected_session_cannot_take_collects_again(repo_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A body change is served by the zygote (its function swapped in); a module-level change, a function added
    with a decorator, a changed conftest make the run collect again, with the same verdicts as collecting every
    time."""
    repo, commit = repo_factory(PROJECT)
    test = make_patch(repo, TEST)
    patches = [
        "",
        make_patch(repo, {"pkg/mod.py": "LIMIT = 3\n\n\ndef f(x):\n    return min(x, LIMIT + 1)\n"}),  # a body
        make_patch(repo, {"pkg/mod.py": "LIMIT = 4\n\n\ndef f(x):\n    return min(x, LIMIT)\n"}),  # module level
        make_patch(repo, {"pkg/mod.py": "import functools\nLIMIT = 3\n\n\ndef f(x):\n    return g(x)\n\n\n"
                                        "@functools.lru_cache\ndef g(x):\n    return min(x, LIMIT + 1)\n"}),
        make_patch(repo, {"conftest.py": "import pkg.mod\npkg.mod.LIMIT = 1\n"}),  # not a module the server compares
        make_patch(repo, {"pkg/mod.py": "LIMIT = 3\n\n\ndef f(x):\n    return _g(x)\n\n\n"
                                        "def _g(x, k=0):\n    return min(x, LIMIT) + k\n"}),  # a plain function added
    ]
    once, log = _runs(repo, commit, tmp_path, True, patches, [test])
    every, _ = _runs(repo, commit, tmp_path, False, patches, [test])
    assert once == every
    assert [c[2] for c in once] == ["PASS", "FAIL", "FAIL", "FAIL", "FAIL", "PASS"]
    assert log[0] == "collected, a zygote"
    assert log[1] == "once"
    assert log[2].startswith("collected (not swappable")
    assert "outside function bodies" in log[2]
    assert log[3].startswith("collected (not swappable")
    assert len(log) == 5  # the conftest change asked for no zygote: it collects as every run did
    assert log[4] == "once"


def test_a_fix_outside_function_bodies_gets_a_zygote_of_its_own_for_its_mutants(repo_factory, tmp_path: Path  # type: ignore[no-untyped-def]
                                                                              ) -> None:
    """A fix that changes a module's top level cannot be swapped into the base's zygote: its first run makes a
    second zygote (of the fixed code), which serves the fix's mutants (body changes of it) and the fix again,
    while the base's zygote serves the base. A third code state outside function bodies collects and makes no
    zygote (two per test state, never replaced). The verdicts are those of collecting every time."""
    repo, commit = repo_factory(PROJECT)
    test = make_patch(repo, TEST)
    fix = make_patch(repo, {"pkg/mod.py": "LIMIT = 4\n\n\ndef f(x):\n    return min(x, LIMIT)\n"})
    mutant = make_patch(repo, {"pkg/mod.py": "LIMIT = 4\n\n\ndef f(x):\n    return min(x, LIMIT - 1)\n"})
    other = make_patch(repo, {"pkg/mod.py": "LIMIT = 5\n\n\ndef f(x):\n    return min(x, LIMIT)\n"})
    patches = ["", fix, mutant, "", other, mutant, fix]
    once, log = _runs(repo, commit, tmp_path, True, patches, [test])
    every, _ = _runs(repo, commit, tmp_path, False, patches, [test])
    assert once == every
    assert [c[2] for c in once] == ["PASS", "FAIL", "PASS", "PASS", "FAIL", "PASS", "FAIL"]
    assert log[0] == "collected, a zygote"
    assert log[1].startswith("collected (not swappable")
    assert log[1].endswith(", a zygote")
    assert log[2:4] == ["once", "once"]
    assert log[4].startswith("collected (not swappable")
    assert not log[4].endswith(", a zygote")
    assert log[5:] == ["once", "once"]


def test_a_changed_test_file_gets_a_session_of_its_own(repo_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two test patches with the same ids but different test files never share a zygote: the second one's runs
    are collected from its own file, alternating with the first one's."""
    repo, commit = repo_factory(PROJECT)
    first = make_patch(repo, TEST)
    second = make_patch(repo, {"tests/test_f.py": TEST["tests/test_f.py"].replace("== 3", "== 4")})
    body = make_patch(repo, {"pkg/mod.py": "LIMIT = 3\n\n\ndef f(x):\n    return min(x, LIMIT + 1)\n"})
    once, log = _runs(repo, commit, tmp_path, True, ["", body, ""], [first, second])
    every, _ = _runs(repo, commit, tmp_path, False, ["", body, ""], [first, second])
    assert once == every
    assert [c[2] for c in once] == ["PASS", "FAIL", "PASS", "FAIL", "PASS", "FAIL"]
    assert log == ["collected, a zygote", "once", "once", "collected, a zygote", "once", "once"]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[list[str], str], ProcessResult]]:
    """``serve(args, collect)``: one run of pytest with ``args`` in ``tmp_path / "proj"`` on a sandboxed fork
    server (the same server for the whole test), collecting once under the name ``collect``."""
    from coharden.execution.fast.forkserver import ForkServer, ServerStart
    from coharden.execution.fork_run import ForkRun
    from coharden.execution.pytest_runner import fork_env
    from coharden.execution.sandbox import Confinement

    root = tmp_path / "proj"
    root.mkdir()
    server = ForkServer(ServerStart(sys.executable, env=fork_env(None), network=False,
                                    confine=Confinement(writable=(root,))))
    assert server.isolation == "bwrap"

    def run(args: list[str], collect: str) -> ProcessResult:
        return server.run(ForkRun(root, ["-q", "-p", "no:cacheprovider", *args], fork_env(None), timeout=60,
                                  memory_mb=None, cpu_seconds=None, collect=collect))

    run.server = server  # type: ignore[attr-defined]
    try:
        yield run
    finally:
        server.close()


def test_a_zygote_whose_test_module_changed_under_it_is_stale(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    """The server's own check, below the executor: a test module rewritten on disk behind the same request (same
    name, arguments, environment) is never run from the old collection."""
    (tmp_path / "proj" / "test_v.py").write_text("def test_v():\n    assert 1 == 1\n")
    assert serve(["test_v.py"], "same name").returncode == 0
    assert serve(["test_v.py"], "same name").returncode == 0
    (tmp_path / "proj" / "test_v.py").write_text("def test_v():\n    assert 1 == 2\n")
    assert serve(["test_v.py"], "same name").returncode == 1
    log = serve.server.collect_log
    assert log[:2] == ["collected, a zygote", "once"]
    assert log[2].startswith("collected (stale: a test module or conftest changed)")


def test_a_run_from_a_frozen_zygote_sees_the_heap_a_fresh_process_sees(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    """A zygote moves its heap out of the collector's sight before it forks runs (``gc.freeze``: a collection in
    a run would copy the whole shared heap). A run's ``gc.get_objects`` / ``gc.get_referrers`` still find the
    objects made before the fork (the pytest ``Config`` a hostile test looks for, a module's function)."""
    root = tmp_path / "proj"
    (root / "test_g.py").write_text(
        "import gc\n\nfrom _pytest.config import Config\n\n\ndef helper():\n    return 1\n\n\n"
        "def test_g():\n"
        "    assert gc.get_freeze_count() > 0  # forked from the frozen zygote\n"
        "    assert any(isinstance(o, Config) for o in gc.get_objects())\n"
        "    assert gc.get_freeze_count() == 0  # given back to the collector first\n"
        "    assert gc.get_referrers(helper)  # the module's namespace refers to it\n")
    for _ in range(2):
        run = serve(["test_g.py"], "frozen")
        assert run.returncode == 0, run.output[-2000:]
    assert serve.server.collect_log == ["collected, a zygote", "once"]


def test_what_a_collection_leaves_in_the_temporary_directories_is_there_in_every_run(
        tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    """A project that makes its config and cache directories when imported (astropy: ``~/.astropy``) leaves
    them in the home or ``/tmp`` during collection; the server wipes those after every run, so each run forked
    from the zygote lays them down again as the collection left them (before: no zygote for such a project).
    A link among them cannot be laid down faithfully: no zygote, and the log says why."""
    root = tmp_path / "proj"
    (root / "conftest.py").write_text(
        "import os\nimport tempfile\n\n"
        "CACHE = os.path.join(tempfile.gettempdir(), 'cohproj-cache', 'data')\n"
        "os.makedirs(CACHE, exist_ok=True)\n"
        "with open(os.path.join(CACHE, 'table.txt'), 'w') as f:\n    f.write('made at import')\n"
        "with open(os.path.join(tempfile.gettempdir(), 'cohproj.lock'), 'w') as f:\n    f.write('1')\n")
    (root / "test_m.py").write_text(
        "import os\n\nfrom conftest import CACHE\n\n\ndef test_m():\n"
        "    with open(os.path.join(CACHE, 'table.txt')) as f:\n        assert f.read() == 'made at import'\n"
        "    assert os.path.isfile(os.path.join(os.path.dirname(os.path.dirname(CACHE)), 'cohproj.lock'))\n"
        "    assert not os.path.exists(os.path.join(CACHE, 'mine.txt'))  # an earlier run's: gone\n"
        "    with open(os.path.join(CACHE, 'mine.txt'), 'w') as f:  # the run's own: gone after it\n"
        "        f.write('x')\n")
    for _ in range(3):
        run = serve(["test_m.py"], "made")
        assert run.returncode == 0, run.output[-2000:]
    assert serve.server.collect_log == ["collected, a zygote", "once", "once"]
    (root / "conftest.py").write_text(
        "import os\nimport tempfile\n\nLINK = os.path.join(tempfile.gettempdir(), 'cohproj-link')\n"
        "if not os.path.lexists(LINK):\n    os.symlink('/etc', LINK)\n\n\nCACHE = None\n")
    (root / "test_m.py").write_text("def test_m():\n    pass\n")
    run = serve(["test_m.py"], "linked")
    assert run.returncode == 0, run.output[-2000:]
    assert serve.server.collect_log[-1].startswith("collected (no zygote: collection left files")


def _recordings(repo: Path, commit: str, tmp_path: Path, collect: bool, test_patch: str, fix: str
                ) -> tuple[list[list[dict]], list[str]]:
    """The records of ``f`` on the base and on ``fix`` (after a plain run of the test, which makes the zygote),
    and the server's collect log."""
    from coharden.mutation.recording import _record_one

    settings = Settings(timeout=60, cache_dir=tmp_path / f"rec-{collect}", workers=1, collect_once=collect)
    instance = Instance(instance_id="pkg__record", repo=str(repo), base_commit=commit, test_patch="")
    with InstanceExecutor(instance, repo, settings) as ex:
        test = ex.test_patch(test_patch, name="t")
        ex.verdicts("", [test])
        records = [_record_one(ex, source_patch=patch, test=test, targets=[{"path": "pkg/mod.py", "qualname": "f"}],
                               probes=None) for patch in ("", fix)]
        server = ex.site.current
        assert server is not None
        return records, list(server.collect_log)  # type: ignore[return-value]


def test_a_recording_is_a_fork_of_the_zygote_and_records_what_a_collecting_one_does(repo_factory,  # type: ignore[no-untyped-def]
                                                                                     tmp_path: Path) -> None:
    """An instrumented run (the recorder) is served by the zygote that collected the same test for its plain
    runs, the recorder loaded into the fork: no import or collection again. Its records are those of a run that
    collects (the base, and a fix swapped in as a body); an instrumented run never makes a zygote itself."""
    repo, commit = repo_factory(PROJECT)
    test = make_patch(repo, TEST)
    fix = make_patch(repo, {"pkg/mod.py": "LIMIT = 3\n\n\ndef f(x):\n    return min(x, LIMIT + 1)\n"})
    once, log = _recordings(repo, commit, tmp_path, True, test, fix)
    every, _ = _recordings(repo, commit, tmp_path, False, test, fix)
    assert once == every
    calls = [sorted((r["key"], r["value_enc"]) for r in records if r["kind"] == "return") for records in once]
    assert calls == [[("(1,)", "1"), ("(5,)", "3")], [("(1,)", "1"), ("(5,)", "4")]]
    assert log == ["collected, a zygote", "once", "once"]


def test_an_instrumented_run_makes_the_zygote_of_the_plain_runs(repo_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """MPE records before its F->P checks have made a zygote: the recording makes it, collecting the plain run
    of its test (the recorder is loaded into its fork only), and the plain run after it is served."""
    from coharden.mutation.recording import _record_one

    repo, commit = repo_factory(PROJECT)
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1)
    instance = Instance(instance_id="pkg__record", repo=str(repo), base_commit=commit, test_patch="")
    with InstanceExecutor(instance, repo, settings) as ex:
        # a test that fails where the recorder is loaded: the recording's fork, never a plain run's
        alone = {"tests/test_f.py": TEST["tests/test_f.py"] + "\n\ndef test_plain():\n    import sys\n\n"
                 "    assert 'coharden_recorder' not in sys.modules\n"}
        test = ex.test_patch(make_patch(repo, alone), name="t")
        records = _record_one(ex, source_patch="", test=test, targets=[{"path": "pkg/mod.py", "qualname": "f"}],
                              probes=None)
        assert isinstance(records, list)
        assert sorted(r["key"] for r in records if r["kind"] == "return") == ["(1,)", "(5,)"]
        verdict = ex.verdicts("", [test])[0]
        assert verdict.outcome.value == "PASS", verdict.reason  # the plain run, served by the zygote: no recorder
        server = ex.site.current
        assert server is not None
        assert list(server.collect_log) == ["collected, a zygote", "once"]


def test_what_a_session_writes_beside_the_code_does_not_make_the_zygote_stale(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    """pytest-benchmark makes ``.benchmarks`` in the root when its session starts, hypothesis ``.hypothesis``; the
    workspace's reset removes them between runs. No import can find such an entry, so the zygote still serves
    (sympy-14976 collected on every run: 3.4 s a run for 0.17 s). A module added beside a loaded one can change
    what an import finds: that run collects again."""
    root = tmp_path / "proj"
    (root / "conftest.py").write_text("import os\n\nos.makedirs('.benchmarks', exist_ok=True)\n")
    (root / "test_h.py").write_text("def test_h():\n    assert 1 == 1\n")
    for _ in range(3):
        run = serve(["test_h.py"], "hidden")
        assert run.returncode == 0, run.output[-2000:]
        shutil.rmtree(root / ".benchmarks", ignore_errors=True)  # as the reset does (made by the collection only)
    assert serve.server.collect_log == ["collected, a zygote", "once", "once"]
    (root / "newmod.py").write_text("X = 1\n")
    assert serve(["test_h.py"], "hidden").returncode == 0
    assert serve.server.collect_log[-1].startswith("collected (stale: a loaded file is gone, or a file was added")
