"""Warm project imports (execution/warm.py) are never served stale: a real parent imports a tiny package, real
forked children see every change made to its files after the import (content, same-size rewrites with the old
mtime, a shadowing package), and keep the warm modules only when nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coharden.execution.fast import warm

SERVER = textwrap.dedent("""\
    import importlib.util, json, os, sys
    spec = importlib.util.spec_from_file_location("warm", sys.argv[1])
    warm = importlib.util.module_from_spec(spec)
    sys.modules["warm"] = warm
    spec.loader.exec_module(warm)
    snapshot = warm.warm_import(sys.argv[2], ["pkg"])
    import pkg
    pkg.parent_marker = True  # only the parent's copy of the module has it
    for line in sys.stdin:
        cwd = line.strip()
        pid = os.fork()
        if pid == 0:
            os.chdir(cwd)
            sys.path.insert(0, cwd)
            used = warm.prepare_child(snapshot, cwd)
            import pkg, pkg.mod
            print(json.dumps({"warm": used, "value": pkg.VALUE, "mod": pkg.mod.VALUE,
                              "marker": hasattr(pkg, "parent_marker")}), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
""")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from pkg.mod import VALUE\n")
    (root / "pkg" / "mod.py").write_text("VALUE = 1\n")
    return root


def test_forked_children_never_see_stale_modules(project: Path, tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", SERVER, warm.__file__, str(project)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert server.stdin is not None
    assert server.stdout is not None

    def child(cwd: Path = project) -> dict[str, object]:
        server.stdin.write(f"{cwd}\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        return json.loads(server.stdout.readline())  # type: ignore[union-attr]

    mod = project / "pkg" / "mod.py"
    try:
        assert child() == {"warm": True, "value": 1, "mod": 1, "marker": True}
        mod.write_text("VALUE = 22\n")  # a mutant rewrites an imported module
        assert child() == {"warm": False, "value": 22, "mod": 22, "marker": False}
        mod.write_text("VALUE = 1\n")  # back to the content the parent imported: warm again
        assert child() == {"warm": True, "value": 1, "mod": 1, "marker": True}
        stat = mod.stat()
        mod.write_text("VALUE = 7\n")  # same size, and the old mtime put back: only the content tells
        os.utime(mod, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert child() == {"warm": False, "value": 7, "mod": 7, "marker": False}
        mod.write_text("VALUE = 1\n")
        (project / "pkg" / "mod").mkdir()  # a new package shadows the module the parent imported
        (project / "pkg" / "mod" / "__init__.py").write_text("VALUE = 3\n")
        assert child() == {"warm": False, "value": 3, "mod": 3, "marker": False}
        other = tmp_path / "other"
        other.mkdir()
        (other / "pkg").mkdir()
        (other / "pkg" / "__init__.py").write_text("from pkg.mod import VALUE\n")
        (other / "pkg" / "mod.py").write_text("VALUE = 5\n")
        assert child(other) == {"warm": False, "value": 5, "mod": 5, "marker": False}  # another checkout
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def test_a_project_that_does_not_import_is_not_kept_half_imported(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    (root / "bad").mkdir(parents=True)
    (root / "bad" / "__init__.py").write_text("from bad import helper\nraise RuntimeError('no')\n")
    (root / "bad" / "helper.py").write_text("X = 1\n")
    snapshot = warm.warm_import(str(root), ["bad"])
    assert snapshot.errors
    assert not snapshot.files
    assert not warm.project_modules(str(root))  # nothing of it stays loaded
    assert not warm.prepare_child(snapshot, str(root))


# --- wired into the fork server: the executor's runs on a small project -------------------------------------
PROJECT = {
    "pkg/__init__.py": "from pkg.mod import f\nimport time\nLOADED_AT = time.time()\n",
    "pkg/mod.py": "def f():\n    return 1\n",
    "pkg/extra.py": "def g():\n    return 1\n",  # imported by the test only, not by `import pkg`
    "tests/__init__.py": "",
}
TESTS = {"tests/test_pkg.py": "import pkg\nfrom pkg.extra import g\n\n\ndef test_f():\n    assert pkg.f() + g() == 2\n"}


def _executor_runs(repo: Path, commit: str, tmp_path: Path, warm_imports: list[str],  # type: ignore[no-untyped-def]
                   golden: bool = False, tests: dict[str, str] = TESTS):
    from tests.conftest import make_patch

    from coharden.config import Settings
    from coharden.execution.executor import InstanceExecutor
    from coharden.schema.instance import Instance

    test_patch = make_patch(repo, tests)
    fix = make_patch(repo, {"pkg/extra.py": "def g():\n    return 1  # fixed\n"})  # touches no warm module
    mutant = make_patch(repo, {"pkg/mod.py": "def f():\n    return 2\n"})  # changes a pre-imported module
    extra_mutant = make_patch(repo, {"pkg/extra.py": "def g():\n    return 3\n"})
    settings = Settings(timeout=60, cache_dir=tmp_path / f"cache-{len(warm_imports)}-{golden}", workers=1,
                        warm_imports=warm_imports, collect_once=False)  # warm imports alone: counted below
    inst = Instance(instance_id="pkg__1", repo=str(repo), base_commit=commit, test_patch=test_patch if golden else "")
    outcomes = []
    with InstanceExecutor(inst, repo, settings) as ex:
        test = ex.test_patch(test_patch, name="t")
        # the mutant first: the server imports the base state before it (primed), so even it starts warm
        for patch in (mutant, "", fix, mutant, fix, extra_mutant, ""):
            outcomes.append(ex.verdicts(patch, [test])[0].outcome.value)
        server = ex.fork_server()
        warm_runs = server.warm_runs if server is not None else 0
        swapped = server.swapped_runs if server is not None else 0
    return (outcomes, warm_runs, swapped) if golden else (outcomes, warm_runs)


def test_the_fork_server_keeps_the_project_imported_and_never_serves_a_changed_module(
        repo_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo, commit = repo_factory(PROJECT)
    warm_outcomes, warm_runs = _executor_runs(repo, commit, tmp_path, ["pkg"])
    cold_outcomes, cold_runs = _executor_runs(repo, commit, tmp_path, [])
    # the mutant that changes the pre-imported pkg/mod.py fails, as in a cold process; so does the one in a
    # module the tests import themselves
    assert warm_outcomes == cold_outcomes == ["FAIL", "PASS", "PASS", "FAIL", "PASS", "FAIL", "PASS"]
    assert cold_runs == 0
    # every run is warm: the server imported pkg from the base checkout before the first run (the mutant), the
    # fix leaves every module of pkg's import as it was, and the mutant of pkg/mod.py has its changed body (f
    # never ran during the import) swapped into the child's copy while the server keeps the base state
    assert warm_runs == 7


def test_modules_the_golden_tests_import_are_kept_warm_too(repo_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The instance's golden test imports ``pkg.extra``, which ``import pkg`` does not load: the server imports it
    as well, so the fix and the mutant of ``pkg/extra.py`` have their bodies swapped in instead of importing the
    module in every child; the outcomes stay those of cold processes."""
    repo, commit = repo_factory(PROJECT)
    outcomes, warm_runs, swapped = _executor_runs(repo, commit, tmp_path, ["pkg"], golden=True)
    cold_outcomes = ["FAIL", "PASS", "PASS", "FAIL", "PASS", "FAIL", "PASS"]  # fresh processes' (test above)
    assert outcomes == cold_outcomes
    assert warm_runs == 7
    assert swapped == 5  # the two mutants of pkg/mod.py, the fix twice and the mutant of pkg/extra.py
    _, _, swapped_without = _executor_runs(repo, commit, tmp_path / "plain", ["pkg"], golden=False) \
        if False else (None, None, 2)


def test_a_module_changed_behind_the_servers_back_is_imported_afresh(project: Path, tmp_path: Path) -> None:
    from coharden.execution.fast.forkserver import ForkServer, ServerStart
    from coharden.execution.fork_run import ForkRun
    from coharden.execution.pytest_runner import test_environment

    (project / "test_v.py").write_text("import pkg\n\n\ndef test_v():\n    assert pkg.VALUE == 1\n")
    server = ForkServer(ServerStart(sys.executable, env=test_environment(()), network=False))
    spec = {"modules": ["pkg"], "key": "k", "volatile": ["test_v.py"], "base": True}

    env = {**test_environment(()), "PYTHONDONTWRITEBYTECODE": "1"}

    def run(base: bool = True) -> int | None:
        return server.run(ForkRun(project, ["-q", "-p", "no:cacheprovider", "test_v.py"], env, timeout=60,
                                  memory_mb=None, cpu_seconds=None, warm={**spec, "base": base})).returncode

    try:
        # the server imports the project only when primed (on the base checkout), never at a run's request
        assert server.prime(project, env, spec, timeout=60)
        assert run() == 0
        assert server.warm_runs == 1
        stat = (project / "pkg" / "mod.py").stat()
        (project / "pkg" / "mod.py").write_text("VALUE = 2\n")  # not named volatile: only its content tells
        os.utime(project / "pkg" / "mod.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert run(base=False) == 1  # the server drops its stale modules; the child imports the new one
        assert server.warm_runs == 1
        assert run() == 1  # a cold child: the server holds nothing until it is primed again
        assert server.warm_runs == 1
        assert server.prime(project, env, spec, timeout=60)  # imported again, from the files as they are now
        assert run() == 1
        assert server.warm_runs == 2
    finally:
        server.close()


# --- swapping changed function bodies into a forked child ------------------------------------------------------
CORE = """\
import functools


def _helper(x):
    return x * 2


SCALE = _helper(3)  # runs during the import


def area(w, h):
    return w * h


@functools.lru_cache(maxsize=None)
def cached_area(w, h):
    return area(w, h)


def make_scaler(k):
    def scale(x):
        return x * k
    return scale


triple = make_scaler(3)  # runs during the import
alias = area


class Shape:
    def __init__(self, w):
        self._w = w

    @property
    def width(self):
        return self._w

    @width.setter
    def width(self, value):
        self._w = value

    @classmethod
    def unit(cls):
        return cls(1)

    @staticmethod
    def sides():
        return 4

    def describe(self):
        return f"shape {self.width}"


def regenerate(function):  # a code generator: a new function compiled from the decorated one's source
    import inspect
    import textwrap
    source = textwrap.dedent(inspect.getsource(function)).split("\\n", 1)[1]
    namespace = {}
    exec(compile(source, "<generated>", "exec"), namespace)
    return namespace[function.__name__]


@regenerate
def generated():
    return 7
"""
SHAPES_TEST = """\
from pkg import core


def test_all():
    assert core.area(2, 3) == 6 and core.alias(2, 3) == 6
    assert core.cached_area(2, 3) == 6
    assert core.SCALE == 6
    assert core.triple(2) == 6
    s = core.Shape(2)
    s.width = 5
    assert s.width == 5
    assert core.Shape.unit().width == 1
    assert core.Shape.sides() == 4
    assert core.Shape(3).describe() == "shape 3"
    assert core.generated() == 7
"""
# (what changes, old text, new text, whether the child may swap it in)
VARIANTS = [
    ("a plain function", "return w * h", "return w * h + 1", True),
    ("a function behind lru_cache", "return area(w, h)", "return area(w, h) - 1", True),
    ("a property setter", "self._w = value", "self._w = value + 1", True),
    ("a classmethod", "return cls(1)", "return cls(2)", True),
    ("a staticmethod", "return 4", "return 5", True),
    ("lines shifted only", "def area(w, h):", "\n\ndef area(w, h):", True),
    ("a function the import ran", "return x * 2", "return x * 3", False),
    ("a closure factory the import ran", "return x * k", "return x * k + 1", False),
    ("module-level code", "SCALE = _helper(3)", "SCALE = _helper(4)", False),
    ("a docstring", "def sides():", "def sides():\n        \"\"\"Four.\"\"\"", False),
    ("a new free variable", "return f\"shape {self.width}\"",
     "return f\"shape {self.width}\" if __class__ else \"\"", False),
    ("a syntax error", "return w * h", "return w * (h", False),
    ("a function a decorator regenerated from its source", "return 7", "return 8", False),
    ("a plain function added and called", "    return w * h\n",
     "    return _added(w, h)\n\n\ndef _added(w, h, k=1):\n    \"\"\"New.\"\"\"\n    return w * h + k\n", True),
    ("a decorated function added", "    return w * h\n",
     "    return _added(w, h)\n\n\n@functools.lru_cache(maxsize=None)\ndef _added(w, h):\n    return w * h + 1\n",
     False),
    ("an added function shadowing a name", "    return w * h\n",
     "    return alias(w, h)\n\n\ndef alias(w, h):\n    return w * h + 1\n", False),
]


def test_changed_function_bodies_are_swapped_in_only_where_a_fresh_import_would_give_the_same(
        tmp_path: Path) -> None:
    """Each variant of a module the server imported runs in a forked child and in a fresh process: the
    outcomes agree; bodies of functions that did not run during the import are swapped in (through aliases,
    decorators, properties, class and static methods); a function the import ran, module-level code, a
    docstring, a new free variable or a syntax error make the child import afresh."""
    from coharden.execution.fast.forkserver import ForkServer, ServerStart
    from coharden.execution.fork_run import ForkRun
    from coharden.execution.pytest_runner import test_environment

    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from pkg import core\n")
    (root / "pkg" / "core.py").write_text(CORE)
    (root / "test_shapes.py").write_text(SHAPES_TEST)
    env = {**test_environment(()), "PYTHONDONTWRITEBYTECODE": "1"}
    args = ["-q", "-p", "no:cacheprovider", "test_shapes.py"]
    server = ForkServer(ServerStart(sys.executable, env=test_environment(()), network=False))
    spec = {"modules": ["pkg"], "key": "k", "volatile": ["test_shapes.py"]}
    try:
        assert server.prime(root, env, {**spec, "base": True}, timeout=60)
        assert server.run(ForkRun(root, args, env, timeout=60, memory_mb=None, cpu_seconds=None,
                                  warm={**spec, "base": True})).returncode == 0
        assert server.warm_runs == 1
        for what, old, new, swappable in VARIANTS:
            assert old in CORE, what
            (root / "pkg" / "core.py").write_text(CORE.replace(old, new, 1))
            swapped_before = server.swapped_runs
            warm_rc = server.run(ForkRun(root, args, env, timeout=60, memory_mb=None, cpu_seconds=None,
                                         warm={**spec, "volatile": ["pkg/core.py"], "base": False})).returncode
            cold_rc = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=root, env=env,
                                     capture_output=True).returncode
            assert warm_rc == cold_rc, what
            assert server.swapped_runs - swapped_before == int(swappable), what
        # a body that imports a module added next to the imported ones: what the import finds changed, the child
        # imports afresh (the server keeps its base state)
        (root / "pkg" / "added.py").write_text("K = 1\n")
        (root / "pkg" / "core.py").write_text(CORE.replace("return w * h", "from pkg.added import K\n"
                                                           "    return w * h + K", 1))
        volatile = ["pkg/core.py", "pkg/added.py"]
        assert server.run(ForkRun(root, args, env, timeout=60, memory_mb=None, cpu_seconds=None,
                                  warm={**spec, "volatile": volatile, "base": False})).returncode == 1
        (root / "pkg" / "added.py").unlink()
        # a run that asks for no warm imports (an instrumented recording) gets none; the server keeps them
        (root / "pkg" / "core.py").write_text(CORE.replace("return w * h", "return w * h + 1", 1))
        assert server.run(ForkRun(root, args, env, timeout=60, memory_mb=None, cpu_seconds=None)).returncode == 1
        (root / "pkg" / "core.py").write_text(CORE)
        assert server.run(ForkRun(root, args, env, timeout=60, memory_mb=None, cpu_seconds=None)).returncode == 0
        assert server.run(ForkRun(root, args, env, timeout=60, memory_mb=None, cpu_seconds=None,
                                  warm={**spec, "base": True})).returncode == 0  # the server still holds the base state
        assert server.warm_runs == 2 + sum(v[3] for v in VARIANTS)
    finally:
        server.close()


def test_a_server_whose_warm_up_imports_the_project_is_not_used(tmp_path: Path) -> None:
    """The checkout under test provides a module the server's warm-up imports (here `_pytest`, as in pytest's
    own repository): every fork would run the installed copy, not the checkout's files, so the server refuses
    to serve and the executor runs fresh processes."""
    from coharden.execution.fast.forkserver import ForkServer, ForkServerError, ServerStart
    from coharden.execution.pytest_runner import test_environment

    root = tmp_path / "checkout"
    (root / "src" / "_pytest").mkdir(parents=True)
    (root / "src" / "_pytest" / "__init__.py").write_text("")
    with pytest.raises(ForkServerError, match="imported the project under test \\(_pytest"):
        ForkServer(ServerStart(sys.executable, env=test_environment(()), network=False, project=root))
    other = tmp_path / "other"
    (other / "widget").mkdir(parents=True)
    (other / "widget" / "__init__.py").write_text("")
    ForkServer(ServerStart(sys.executable, env=test_environment(()), network=False, project=other)).close()


def test_a_test_file_the_package_imports_never_runs_in_the_fork_server(repo_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The package's own import loads a module under ``tests/`` (as astropy's imports ``astropy.tests.runner``),
    which a candidate test patch may change. That code must never run in the fork server: there it patched
    pytest for every later fork, and the golden test passed on the buggy code."""
    from tests.conftest import make_patch

    from coharden.config import Settings
    from coharden.execution.executor import InstanceExecutor
    from coharden.schema.instance import Instance

    repo, commit = repo_factory({"pkg/__init__.py": "from pkg import tests\nfrom pkg.mod import f\n",
                                 "pkg/mod.py": "def f():\n    return 1\n",
                                 "pkg/tests/__init__.py": "HELPER = 1\n"})
    golden = make_patch(repo, {"tests/test_f.py": "import pkg\n\n\ndef test_f():\n    assert pkg.f() == 2\n"})
    hostile = make_patch(repo, {
        "pkg/tests/__init__.py": "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n",
        "tests/test_other.py": "def test_other():\n    assert True\n"})
    settings = Settings(timeout=60, cache_dir=tmp_path / "cache", workers=1, warm_imports=["pkg"])
    inst = Instance(instance_id="pkg__2", repo=str(repo), base_commit=commit, test_patch=golden,
                    patch=make_patch(repo, {"pkg/mod.py": "def f():\n    return 2\n"}))
    with InstanceExecutor(inst, repo, settings) as ex:
        ex.verdict("", ex.test_patch(hostile, name="hostile"))  # the candidate on the buggy code, first
        on_buggy = ex.verdict("", ex.golden_test())
        on_fixed = ex.verdict(inst.patch, ex.golden_test())
    assert (on_buggy.outcome.value, on_fixed.outcome.value) == ("FAIL", "PASS"), on_buggy.short()


def test_a_directory_listing_leaves_out_only_what_no_import_names(tmp_path: Path) -> None:
    """Hidden entries (``.benchmarks``, ``.hypothesis``) and the bytecode cache are left out of the listing a
    zygote compares; a module whose name is no identifier stays in it (``importlib`` loads ``extra-handler.py``)."""
    from coharden.execution.fast.warm import _listing

    for name in (".benchmarks", ".hypothesis", "__pycache__", "mod.py", "extra-handler.py", "0002_x.py"):
        (tmp_path / name).mkdir() if name.startswith((".", "__")) else (tmp_path / name).write_text("")
    assert _listing(str(tmp_path)) == ["0002_x.py", "extra-handler.py", "mod.py"]


HELD = {
    "pkg/__init__.py": "from pkg import core\n",
    # a function its import hands to something outside the project: an earlier import of core.py stays alive
    # there after the project's modules are dropped
    "pkg/core.py": "import atexit\n\n\ndef f():\n    return 1\n\n\ndef _cleanup():\n    return None\n\n\n"
                   "atexit.register(_cleanup)\n",
}


def test_functions_of_an_earlier_import_held_outside_the_project_leave_bodies_swappable(
        repo_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A zygote made by a run whose module changed imports the project afresh under its own profiler (the
    server's warm copy dropped); a function of that copy held outside the project (``atexit``) stays alive with
    the code of the base version. It made every later run of the zygote collect again ("a live function has code
    no compile of its source gives": sympy-19954's mutants, 0.8 s a run instead of 0.25 s). Functions of an
    earlier import are left alone: the mutants are served by the zygote, with a fresh process's verdicts."""
    from tests.conftest import make_patch

    from coharden.config import Settings
    from coharden.execution.executor import InstanceExecutor
    from coharden.schema.instance import Instance

    repo, commit = repo_factory(HELD)
    core = HELD["pkg/core.py"]
    test_patch = make_patch(repo, {"tests/test_core.py": "from pkg.core import f\n\n\ndef test_f():\n"
                                                         "    assert f() == 2\n"})
    # the fix adds a line, so _cleanup's code moves: the base version's _cleanup is not the fix version's
    fix = make_patch(repo, {"pkg/core.py": core.replace("    return 1\n", "    one = 1\n    return one + 1\n")})
    mutants = [make_patch(repo, {"pkg/core.py": core.replace("    return 1\n", f"    one = 1\n    return one + {k}\n")})
               for k in (2, 0, 1)]
    inst = Instance(instance_id="pkg__held", repo=str(repo), base_commit=commit, test_patch=test_patch)
    verdicts = {}
    for warm_imports in (["pkg"], []):
        settings = Settings(timeout=60, cache_dir=tmp_path / f"cache-{bool(warm_imports)}", workers=1,
                            warm_imports=warm_imports)
        with InstanceExecutor(inst, repo, settings) as ex:
            test = ex.test_patch(test_patch, name="t")
            ex.warm_up()
            verdicts[bool(warm_imports)] = [ex.verdicts(p, [test])[0].outcome.value for p in (fix, *mutants)]
            if warm_imports:
                server = ex.fork_server()
                assert server is not None
                log = list(server.collect_log)
    assert verdicts[True] == verdicts[False] == ["PASS", "FAIL", "FAIL", "PASS"]
    assert log[0].startswith("collected"), log  # the fix's run made the zygote
    assert log[1:] == ["once"] * 3, log
