"""Hostile test patches against a bundled example, run in the real sandbox: none may change another test's
verdict or a stored one, reach outside its worktree, outlive its run, or stop coharden (issue 17).

Each attack is a real test patch (``tests/test_attack.py``) for ``examples/printer_brackets``; the assertions
look at the host: the store, the user's checkout, ``$HOME``, ``/tmp``, the process table.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from coharden.config import Settings
from coharden.execution.bwrap import interpreter_dirs
from coharden.execution.executor import InstanceExecutor
from coharden.execution.fast.forkserver import _LINE_LIMIT, ForkServer
from coharden.execution.git import git
from coharden.execution.sandbox import bwrap_path
from coharden.execution.store import Store
from coharden.instances import LocalInstance, load_local, resolve_repo
from coharden.patches import make_patch
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome
from conftest import processes_with

EXAMPLE = Path(__file__).parents[1] / "examples" / "printer_brackets"

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bwrap cannot build a sandbox on this machine "
                                "(not installed, or no user/PID namespaces): the attacks would run unconfined")

HEADER = "import os, sys, time\nfrom tinyexpr import sstr, symbols\n\n\n"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> LocalInstance:
    return load_local(EXAMPLE, tmp_path_factory.mktemp("cache"))


@pytest.fixture
def make_executor(example: LocalInstance, tmp_path: Path) -> Iterator:
    opened: list[InstanceExecutor] = []

    def make(store: Store | None = None, **overrides: object) -> InstanceExecutor:
        settings = Settings(timeout=20, cache_dir=tmp_path / "cache", workers=1).with_overrides(**overrides)
        executor = InstanceExecutor(example.instance, resolve_repo(example.instance, None), settings, store)
        opened.append(executor)
        return executor

    yield make
    for executor in opened:
        executor.close()


def attack(executor: InstanceExecutor, body: str, *, path: str = "tests/test_attack.py",
           extra: dict[str, str] | None = None) -> TestPatch:
    files = [(path, None, HEADER + textwrap.dedent(body))]
    files += [(p, executor.base_file(p), c) for p, c in (extra or {}).items()]
    return executor.test_patch(make_patch(files), name="attack")


def store_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return sorted(conn.execute("SELECT key, outcome, verdict FROM verdicts").fetchall())


def test_store_poisoning_through_proc_finds_nothing(make_executor, example: LocalInstance, tmp_path: Path) -> None:
    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store)
    golden = ex.golden_test()
    assert ex.verdict("", golden).outcome is Outcome.FAIL
    before = store_rows(store.path)
    # the attacker is given the store's path (the worst case); the payload touches that store only, so that a
    # run where the sandbox failed to confine it cannot damage any other store on the machine
    assert ex.isolation == "bwrap"
    poison = attack(ex, """\
        def test_repro_poison():
            import glob, sqlite3
            hits = []
            for fd in glob.glob("/proc/*/fd/*"):
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target == STORE:"""
    .replace("STORE", repr(str(store.path.resolve()))) + """
                    try:
                        conn = sqlite3.connect(fd)
                        conn.execute("UPDATE verdicts SET outcome = 'PASS', verdict = replace(verdict, 'FAIL', 'PASS')")
                        conn.commit()
                        hits.append(target)
                    except Exception as exc:
                        hits.append(f"{target}: {exc}")
            print("POISONED", hits)
        """)
    verdict = ex.verdict("", poison)
    assert verdict.isolation == "bwrap"
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert store_rows(store.path)[: len(before)] == before or set(before) <= set(store_rows(store.path))
    assert ex.verdict("", golden).outcome is Outcome.FAIL
    assert any("/proc" in note for note in verdict.tampering)


def test_conftest_forgery_is_flagged(make_executor) -> None:
    ex = make_executor()
    forged = attack(ex, """\
        def test_repro_always_fails():
            assert False, "this test never passes"
        """, extra={"tests/conftest.py": textwrap.dedent("""\
        import pytest


        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            outcome.get_result().outcome = "passed"
        """)})
    verdict = ex.verdict("", forged)
    # in-process code can lie about its own result: what it cannot do is go unnoticed
    assert any("conftest.py" in note for note in verdict.tampering), verdict.tampering
    assert any("pytest_runtest_makereport" in note for note in verdict.tampering)


def test_junit_forgery_with_os_exit_is_not_a_pass(make_executor) -> None:
    ex = make_executor()
    forged = attack(ex, """\
        def test_repro_forge_junit():
            target = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml="))
            with open(target, "w") as handle:
                handle.write('<?xml version="1.0"?><testsuites><testsuite tests="1">'
                             '<testcase classname="tests.test_attack" name="test_repro_forge_junit"/>'
                             '</testsuite></testsuites>')
            os._exit(0)
        """)
    verdict = ex.verdict("", forged)
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert "ended before it finished" in verdict.reason
    assert any("JUnit file exists" in note for note in verdict.tampering), verdict.tampering
    assert any("os._exit" in note for note in verdict.tampering)


def test_writes_outside_the_worktree_do_not_land(make_executor, example: LocalInstance) -> None:
    ex = make_executor()
    marker = uuid.uuid4().hex
    source = resolve_repo(example.instance, None)
    tracked = source / "tinyexpr" / "printer.py"
    original = tracked.read_text()
    host_home, host_tmp = Path.home() / f"coharden-attack-{marker}", Path("/tmp") / f"coharden-attack-{marker}"
    verdict = ex.verdict("", attack(ex, f"""\
        def test_repro_escape():
            results = {{}}
            alternates = open(".git/objects/info/alternates").read().split()[0]
            checkout = os.path.dirname(os.path.dirname(alternates))
            targets = {{"checkout": os.path.join(checkout, "tinyexpr", "printer.py"),
                        "home": os.path.expanduser("~/coharden-attack-{marker}"),
                        "root-home": "{host_home}",
                        "tmp": "{host_tmp}",
                        "git-config": ".git/config", "git-hook": ".git/hooks/post-checkout"}}
            for name, target in targets.items():
                try:
                    with open(target, "a") as handle:
                        handle.write("# {marker}\\n")
                    results[name] = "written"
                except OSError as exc:
                    results[name] = type(exc).__name__
            assert False, "ESCAPE " + repr(sorted(results.items()))
        """))
    assert verdict.isolation == "bwrap"
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    # inside, $HOME and /tmp are private (the write lands there and vanishes); the rest is read-only
    for name in ("checkout", "root-home", "git-config", "git-hook"):
        assert f"('{name}', '" in verdict.reason
        assert f"('{name}', 'written')" not in verdict.reason, verdict.reason
    assert tracked.read_text() == original
    assert not host_home.exists()
    assert not host_tmp.exists()
    assert not list(Path.home().glob(f"*{marker}*"))


def test_a_daemon_does_not_survive(make_executor) -> None:
    ex = make_executor()
    marker = f"{300 + time.time() % 1:.6f}"
    verdict = ex.verdict("", attack(ex, f"""\
        def test_repro_daemon():
            import subprocess
            subprocess.Popen(["sleep", "{marker}"], start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if os.fork() == 0:  # a double fork as well
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", ["sleep", "{marker}"])
                os._exit(0)
        """))
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert processes_with(marker) == []


def test_a_bounded_fork_bomb_is_stopped_by_the_process_limit(make_executor) -> None:
    ex = make_executor(max_processes=40)
    marker = f"{300 + time.time() % 1:.6f}"
    verdict = ex.verdict("", attack(ex, f"""\
        def test_repro_fork_bomb():
            started = 0
            for _ in range(1000):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    os.execvp("sleep", ["sleep", "{marker}"])
                started += 1
            print("STARTED", started)
            assert started < 1000, "nothing stopped the fork bomb"
        """))
    assert verdict.outcome is Outcome.PASS, verdict.short() + verdict.output_tail  # stopped short of 1000
    assert processes_with(marker) == []


def test_killing_the_parent_cannot_stop_the_fork_server(make_executor) -> None:
    ex = make_executor()
    golden = ex.golden_test()
    assert ex.verdict("", golden).outcome is Outcome.FAIL
    server = ex.site.current
    killer = attack(ex, """\
        def test_repro_kill_parent():
            import signal
            os.kill(os.getppid(), signal.SIGKILL)  # the fork server: the sandbox's init, which ignores it
            time.sleep(1)
            assert False, "still here"
        """)
    verdict = ex.verdict("", killer)
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert "still here" in verdict.reason
    assert ex.site.current is server
    assert server is not None
    assert server.alive
    assert ex.verdict("", golden.model_copy(update={"name": "golden again"})).outcome is Outcome.FAIL


def test_killing_every_process_it_sees_cannot_reach_coharden(make_executor) -> None:
    ex = make_executor()
    assert ex.isolation == "bwrap"  # unconfined, this attack kills the test run itself
    killer = attack(ex, """\
        def test_repro_kill_all():
            import signal
            for pid in os.listdir("/proc"):  # every process it can see: its own sandbox's only
                if pid.isdigit() and int(pid) != os.getpid():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
            time.sleep(1)
            assert False, "still here"
        """)
    verdict = ex.verdict("", killer)
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert os.getppid() > 1  # this process (coharden) and its parent live
    assert ex.verdict("", ex.golden_test()).outcome is Outcome.FAIL


def test_timeout_then_a_larger_limit_is_not_served_from_the_cache(make_executor, tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite")
    slow = """\
        def test_repro_slow():
            time.sleep(3)
        """
    ex = make_executor(store, timeout=1)
    assert ex.verdict("", attack(ex, slow)).outcome is Outcome.TIMEOUT
    ex.close()
    again = make_executor(store, timeout=1)
    assert again.verdict("", attack(again, slow)).cached  # the same limit: the stored TIMEOUT holds
    larger = make_executor(store, timeout=15)
    verdict = larger.verdict("", attack(larger, slow))
    assert verdict.outcome is Outcome.PASS
    assert not verdict.cached
    assert verdict.time_limit == 15


# --- attacks on MPE -------------------------------------------------------------------------------------------

HIJACK = """\
    import gc


    def _register_forger():
        import pytest
        from _pytest.config import Config

        config = next(o for o in gc.get_objects() if isinstance(o, Config))

        class Forger:
            @pytest.hookimpl(hookwrapper=True)
            def pytest_runtest_makereport(self, item, call):
                outcome = yield
                outcome.get_result().outcome = "passed"

        config.pluginmanager.register(Forger(), "forger")


    def test_repro_hijack():
        a, b, c = symbols("a b c")
        assert sstr(a / (b * c)) != "a/b*c"  # fails on the buggy code, so it is fail-to-pass
        _register_forger()  # from now on every report in this process says "passed"
    """


def mpe_run(ex: InstanceExecutor, example: LocalInstance, candidate: TestPatch, **config: object):
    from coharden.mpe.evaluate import evaluate
    from coharden.schema.mpe_config import MPEConfig

    return evaluate(ex, example.instance.patch, candidate, ex.golden_test(), MPEConfig(**config))


@pytest.mark.slow
def test_shared_process_hijack_cannot_reach_the_reference_or_the_store(make_executor, example: LocalInstance,
                                                                        tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite")
    ex = make_executor(store)
    # the hijacker's file sorts before the golden test's: in a shared process it would run first
    hijack = attack(ex, HIJACK, path="tests/test_a_hijack.py")
    result = mpe_run(ex, example, hijack)
    assert result.isolation == "bwrap"
    assert result.fail_to_pass
    # its plugin only ever saw its own process: the reference still rejects wrong fixes, and the hijacker is
    # graded exactly like the honest test it resembles (the same single check): never Rigorous
    assert any(r.reference.failed for r in result.mutants)
    assert result.test_class.value in ("Lax", "Borderline")
    assert any("plugin manager" in n or "gc." in n for n in result.tampering), result.tampering
    # the reference was not touched: the honest lax candidate, graded on the same store, is Lax with the same
    # laxity (on a clean store too: the same pool, the same reference verdicts)
    lax = ex.test_patch({c.name: c.patch for c in example.candidates}["lax"], name="lax")
    honest = mpe_run(ex, example, lax)
    assert honest.test_class is result.test_class
    assert honest.laxity == pytest.approx(result.laxity)
    clean = mpe_run(make_executor(Store(tmp_path / "clean.sqlite")), example, lax)
    assert clean.laxity == pytest.approx(honest.laxity)
    assert [r.reference.outcome for r in honest.mutants] == [r.reference.outcome for r in result.mutants]


def test_conftest_forgery_with_reject_tampering_is_invalid(make_executor, example: LocalInstance) -> None:
    ex = make_executor()
    forged = attack(ex, """\
        def test_repro_forged():
            a, b, c = symbols("a b c")
            assert sstr(a / (b * c)) != "a/b*c"
        """, extra={"conftest.py": "import pytest\n\n\ndef pytest_configure(config):\n    pass\n"})
    result = mpe_run(ex, example, forged, reject_tampering=True)
    assert result.test_class.value == "Invalid"
    assert result.mutants == []  # rejected before any mutant ran
    assert any("conftest.py" in note for note in result.tampering)
    assert "tampering" in result.to_json()


@pytest.mark.slow
def test_hanging_only_on_mutants_costs_seconds_and_is_reported(make_executor, example: LocalInstance) -> None:
    ex = make_executor(timeout=120)
    golden_checks = [("a / (b * c)", "a/(b*c)"), ("a / (b / c)", "a/(b/c)"), ("(a + b) / (c * d)", "(a + b)/(c*d)"),
                     ("a - (b + c)", "a - (b + c)"), ("a - (b - c)", "a - (b - c)"), ("a * b / c", "a*b/c"),
                     ("a / b / c", "a/b/c"), ("a / b**2", "a/b**2"), ("a - b * c", "a - b*c"),
                     ("a - b - c", "a - b - c")]
    hang = attack(ex, f"""\
        def test_repro_hang_on_mutants():
            a, b, c, d = symbols("a b c d")
            names = {{"a": a, "b": b, "c": c, "d": d}}
            assert sstr(a / (b * c)) != "a/b*c"  # fails on the buggy code
            if any(sstr(eval(expr, {{}}, names)) != want for expr, want in {golden_checks!r}):
                while True:  # a wrong fix: hang instead of failing
                    time.sleep(0.01)
        """)
    result = mpe_run(ex, example, hang, timeout_floor=1.0, timeout_factor=3.0)
    assert result.fail_to_pass
    limit = result.time_limits["candidate"]
    assert limit < 10
    assert result.candidate_timeouts > 0
    assert result.candidate_timeouts == sum(1 for r in result.mutants if r.candidate.outcome is Outcome.TIMEOUT)
    # every wrong fix the candidate did not reject outright, it hung on
    assert all(r.candidate.failed or r.candidate.outcome is Outcome.TIMEOUT for r in result.mutants
               if r.reference.failed)
    hung = [r.candidate for r in result.mutants if r.candidate.outcome is Outcome.TIMEOUT]
    assert all("running at the limit: tests/test_attack.py::test_repro_hang_on_mutants" in v.reason for v in hung)
    # each hang is stopped at the scaled limit, not the 120 s timeout (what that costs: benchmarks/kill_latency.py)
    assert all(f"({limit:g} s" in v.reason for v in hung), [v.reason for v in hung]
    assert result.to_json()["candidate_timeouts"] == result.candidate_timeouts


@pytest.mark.slow
def test_a_batch_goes_on_after_a_test_tries_to_kill_its_parent(example: LocalInstance, tmp_path: Path) -> None:
    from coharden.mpe.batch import Prediction, run_batch
    from coharden.schema.mpe_config import MPEConfig

    settings = Settings(timeout=20, cache_dir=tmp_path / "cache", workers=1, store=tmp_path / "store.sqlite")
    with InstanceExecutor(example.instance, resolve_repo(example.instance, None), settings) as ex:
        killer = attack(ex, """\
            def test_repro_kill_parent():
                import signal
                os.kill(os.getppid(), signal.SIGKILL)
            """)
    lax = {c.name: c.patch for c in example.candidates}["lax"]
    predictions = [Prediction(instance_id=example.instance.instance_id, model_name_or_path="killer",
                              model_patch=killer.patch),
                   Prediction(instance_id=example.instance.instance_id, model_name_or_path="honest", model_patch=lax)]
    rows = run_batch({example.instance.instance_id: example.instance}, predictions, settings,
                     Store(settings.store), tmp_path / "out", MPEConfig(per_operator=1))
    assert rows[0]["candidate_buggy"]["outcome"] == "PASS"  # the kill cannot reach the server: a plain verdict
    assert rows[1].get("fail_to_pass") is True
    assert "error" not in rows[1]


@pytest.mark.parametrize("fork_server", [True, False])
def test_the_tests_tmpdir_is_private_fresh_and_apart_from_the_checkout(make_executor, fork_server: bool) -> None:
    """Inside the sandbox the tests' TMPDIR is a private tmpfs on another top-level directory than their
    checkout (as /tmp and /testbed in the harness: docutils' include paths relate the two), emptied between
    runs: a run never sees what an earlier one left there."""
    ex = make_executor(fork_server=fork_server)
    probe = attack(ex, """\
        def test_repro_tmpdir():
            import tempfile
            tmp, here = tempfile.gettempdir(), os.getcwd()
            assert tmp.split(os.sep)[1] != here.split(os.sep)[1], (tmp, here)
            left = os.path.join(tmp, "left-by-an-earlier-run")
            assert not os.path.exists(left), "an earlier run's file is still there"
            open(left, "w").write("x")
        """)
    first = ex.verdict("", probe)
    assert first.outcome is Outcome.PASS, first.short() + first.output_tail
    again = ex.verdict("", probe)  # no store: run again
    assert again.outcome is Outcome.PASS, again.short() + again.output_tail


# what a candidate test leaves for a later run of the same sandbox: config files the tools a reference test may
# call read (pip, ssh, OpenSSL), shared memory, a file beside the worktree's mount point, the temporary
# directories, the host name (through /proc/sys) - the reference would then fail on the golden fix, and that
# verdict would be stored (issue 51)
_RESIDUE = {"/etc/xdg/pip/pip.conf": "[global]\nindex-url = http://127.0.0.1:9/\n",
            "/etc/ssh/ssh_config": "Host *\n  ProxyCommand false\n",
            "/etc/ssl/private/key.pem": "x", "/etc/apt/auth.conf.d/x.conf": "x", "/sys/fs/cgroup/cpu.max": "1",
            "/dev/shm/sem.lock": "x", "/dev/residue": "x", "/tmp/residue": "x"}


@pytest.mark.parametrize("fork_server", [True, False])
def test_what_a_candidate_leaves_in_the_sandbox_never_reaches_the_reference(make_executor, fork_server: bool) -> None:
    ex = make_executor(fork_server=fork_server)
    assert ex.verdict("", ex.golden_test()).outcome is Outcome.FAIL
    server = ex.site.current
    leave = attack(ex, f"""\
        def test_repro_leave():
            import tempfile
            paths = {{**{_RESIDUE!r}, os.path.join(tempfile.gettempdir(), "residue"): "x",
                      os.path.join(os.path.dirname(os.getcwd()), "residue"): "x"}}
            for path, text in paths.items():
                try:
                    with open(path, "w") as handle:
                        handle.write(text)
                except OSError:
                    pass
            try:
                with open("/proc/sys/kernel/hostname", "w") as handle:
                    handle.write("poisoned")
            except OSError:
                pass
        """)
    assert ex.verdict("", leave).outcome is Outcome.PASS
    # a reference test run later on the golden fix, one that reads those places
    reference = attack(ex, f"""\
        def test_repro_reference():
            import socket, tempfile
            a, b, c = symbols("a b c")
            assert sstr(a / (b * c)) == "a/(b*c)"  # the golden fix's behaviour
            paths = [*{list(_RESIDUE)!r}, os.path.join(tempfile.gettempdir(), "residue"),
                     os.path.join(os.path.dirname(os.getcwd()), "residue")]
            left = [p for p in paths if os.path.exists(p)]
            assert not left, "LEFT " + repr(left)
            assert socket.gethostname() != "poisoned"
        """, path="tests/test_reference.py")
    verdict = ex.verdict(ex.instance.patch, reference)
    assert verdict.outcome is Outcome.PASS, verdict.short() + verdict.output_tail
    if fork_server:
        assert ex.site.current is server  # the same sandbox served both


def test_forged_recorder_lines_never_reach_mutants(make_executor, example: LocalInstance) -> None:
    """The recorder writes its records into the worktree, where the test under record can append its own:
    a code-injecting parameter name, a path out of the repository, a foreign receiver name and garbage are
    dropped; the real records stay."""
    from coharden.mutation.context import record_targets
    from coharden.mutation.pool import fix_context, record_calls

    ex = make_executor()
    inst = example.instance
    targets = record_targets(fix_context(ex, inst.patch))
    assert targets
    target = targets[0]
    forged = [
        {"file": "ROOT/" + target["path"], "qualname": target["qualname"], "kind": "return", "key": "(1,)",
         "params": ["__import__('os').system('touch /tmp/pwned') or x"], "args_enc": "1", "value_enc": "1"},
        {"file": "ROOT/" + target["path"], "qualname": target["qualname"], "kind": "return", "key": "(2,)",
         "params": ["x"], "receiver": "__import__('os')", "args_enc": "1", "value_enc": "1"},
        {"file": "ROOT/../../etc/passwd", "qualname": "f", "kind": "caller", "key": "(3,)", "params": ["x"],
         "outcome": "return", "args_enc": "1", "value_enc": "1"},
        {"file": "ROOT/" + target["path"], "qualname": "x) or os.system('id') or (", "kind": "summary",
         "calls": 1, "raised": []},
    ]
    lines = [__import__("json").dumps(rec) for rec in forged] + ["not json", "[1, 2]"]
    # written after the recorder closed its file (pytest_unconfigure runs after every sessionfinish hook)
    conftest = textwrap.dedent("""\
        import os

        LINES = LINES_HERE


        def pytest_unconfigure(config):
            with open(os.environ["COHARDEN_RECORD_OUT"], "a") as out:
                for line in LINES:
                    out.write(line.replace("ROOT", os.getcwd()) + "\\n")
        """).replace("LINES_HERE", repr(lines))
    test = attack(ex, """\
        def test_repro_forge_records():
            a, b, c = symbols("a b c")
            assert sstr(a / (b * c)) == "a/(b*c)"
        """, extra={"tests/conftest.py": conftest})
    records = record_calls(ex, inst.patch, [test], targets)
    assert any(r["kind"] == "summary" for r in records)  # the recorder's own records are kept
    assert all(r.get("path") is None or not r["path"].startswith("..") for r in records)
    text = repr(records)
    assert "__import__" not in text
    assert "os.system" not in text
    assert "passwd" not in text


# --- round 2 (issue 32): what a test sees and reaches ---------------------------------------------------------

def test_the_protocol_pipes_are_out_of_reach(make_executor) -> None:
    """A test that writes a forged reply and a forged request to every descriptor it can open in /proc (the
    fork server's pipes, if any process it sees held them) reaches none: its own verdict is its own, and the
    golden test's verdicts after it are unchanged."""
    ex = make_executor()
    golden = ex.golden_test()
    assert ex.verdict("", golden).outcome is Outcome.FAIL
    hijack = attack(ex, """\
        def test_repro_hijack():
            import json
            reached = []
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                try:
                    fds = os.listdir(f"/proc/{pid}/fd")
                except OSError:
                    continue
                for fd in fds:
                    try:
                        with open(f"/proc/{pid}/fd/{fd}", "w") as handle:
                            handle.write(json.dumps({"rc": 0, "timed_out": False, "seq": 2}) + "\\n")
                            handle.write(json.dumps({"cwd": "/", "args": [], "env": {}, "seq": 3}) + "\\n")
                        reached.append(f"{pid}/{fd}")
                    except OSError:
                        pass
            assert False, "REACHED " + repr(reached)
        """)
    verdict = ex.verdict("", hijack)
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert "REACHED []" in verdict.reason, verdict.reason
    fixed = ex.verdict(ex.instance.patch, golden)
    assert fixed.outcome is Outcome.PASS, fixed.short()
    assert not fixed.tampering
    assert ex.verdict("", golden.model_copy(update={"name": "again"})).outcome is Outcome.FAIL


def test_an_unsigned_request_on_the_protocol_is_tampering(tmp_path: Path) -> None:
    """Were a process to reach the server's request pipe after all, what it wrote would not be run: the server
    answers an unsigned request as forged, and the client reports the run as tampering (not a verdict)."""
    import json
    import sys

    from coharden.execution.fast.forkserver import ForkServer
    from coharden.execution.pytest_runner import fork_env
    from coharden.execution.sandbox import Confinement

    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    server = ForkServer(sys.executable, env=dict(os.environ), network=False,
                        confine=Confinement(writable=(tmp_path,)))
    try:
        args = ["-q", "-p", "no:cacheprovider", "test_ok.py"]
        honest = server.run(tmp_path, args, fork_env(None), timeout=30, memory_mb=None, cpu_seconds=None)
        assert honest.returncode == 0
        assert not honest.lost
        assert server.proc is not None
        assert server.proc.stdin is not None
        server.proc.stdin.write(json.dumps({"cwd": str(tmp_path), "args": args, "env": {}, "seq": 2}) + "\n")
        server.proc.stdin.flush()
        forged = server.run(tmp_path, args, fork_env(None), timeout=30, memory_mb=None, cpu_seconds=None)
        assert forged.returncode is None
        assert forged.lost.startswith("tampering:")
        assert "did not sign" in forged.tampering
        assert not server.alive  # nothing it says is trusted any more
    finally:
        server.close()


def _server_with_a_reply_written_by_another(tmp_path: Path, text: str) -> tuple[ForkServer, Path]:
    """A fork server (an ok test in ``tmp_path``) whose reply pipe ``text`` was written to by another process,
    as a test that found the pipe would."""
    from coharden.execution.sandbox import Confinement

    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    server = ForkServer(sys.executable, env=dict(os.environ), network=False,
                        confine=Confinement(writable=(tmp_path,)))
    assert server.proc is not None
    reply_pipe = open(f"/proc/{server.proc.pid}/fd/1", "w")  # noqa: SIM115 - the pipe the server answers on

    def write() -> None:  # from a thread: more than the pipe holds blocks until the client reads
        with contextlib.suppress(OSError), reply_pipe:  # the pipe's close too (a reader gone: EPIPE)
            reply_pipe.write(text)

    threading.Thread(target=write, daemon=True).start()
    return server, tmp_path


def _lost_to_tampering(server: ForkServer, root: Path) -> None:
    """The server's next run: lost as tampering (its reply came after the garbage: nothing is trusted)."""
    from coharden.execution.pytest_runner import fork_env

    args = ["-q", "-p", "no:cacheprovider", "test_ok.py"]
    run = server.run(root, args, fork_env(None), timeout=30, memory_mb=None, cpu_seconds=None)
    assert run.returncode is None
    assert run.lost.startswith("tampering:")
    assert not server.alive


def test_a_line_without_its_end_on_the_protocol_blocks_no_one(tmp_path: Path) -> None:
    """Were a process to write part of a line to the server's reply pipe (no newline), the client would not wait
    for the rest: it gives up at its deadline as with a silent server, and a run after that is lost, not hung."""
    import time

    server, root = _server_with_a_reply_written_by_another(tmp_path, '{"rc": 0, "timed_out": false')
    try:
        start = time.monotonic()
        assert server._read(1.0) is None
        assert time.monotonic() - start < 10
        _lost_to_tampering(server, root)
    finally:
        server.close()


@pytest.mark.parametrize("end", ["\n", ""], ids=["ended", "unended"])
def test_a_line_longer_than_the_server_writes_is_tampering(tmp_path: Path, end: str) -> None:
    """A line past the protocol's limit is no reply of the server's, whether its end comes in the chunk that
    takes it past the limit or never: the client drops it (no memory grows without bound) and says so as
    tampering; read during a run, that run is lost (as the test above shows for a line without its end)."""
    server, _ = _server_with_a_reply_written_by_another(tmp_path, "x" * (_LINE_LIMIT + 4096) + end)
    try:
        assert server._read(10.0) is None
        assert "longer than any it writes" in server.forged
    finally:
        server.close()


def test_a_test_sees_no_home_checkout_store_instance_or_secret(make_executor, example: LocalInstance,
                                                                tmp_path: Path) -> None:
    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store)
    source = resolve_repo(example.instance, None)
    targets = {"home": str(Path.home()), "instance": str(EXAMPLE), "golden fix": str(EXAMPLE / "fix.patch"),
               "source checkout": str(source / "tinyexpr"), "store": str(store.path.parent),
               "project checkout": str(Path(__file__).parents[1] / "tests"), "shadow": "/etc/shadow"}
    probe = attack(ex, f"""\
        def test_repro_look():
            seen = {{}}
            for name, path in {targets!r}.items():
                try:
                    seen[name] = sorted(os.listdir(path))[:3] if os.path.isdir(path) else open(path).read()[:20]
                except OSError as exc:
                    seen[name] = type(exc).__name__
            assert False, "SEEN " + repr(sorted(seen.items()))
        """)
    verdict = ex.verdict("", probe)
    assert verdict.isolation == "bwrap"
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    # of $HOME, only the directories that hold the test interpreter (here pyenv's) are there
    home = Path.home()
    interpreter = sorted({p.relative_to(home).parts[0] for p in interpreter_dirs(ex.python)
                          if p.is_relative_to(home) and p != home})[:3]
    for name in targets:
        assert f"('{name}', " in verdict.reason, verdict.reason
        allowed = ["[]", "''", "'FileNotFoundError'", *([repr(interpreter)] if name == "home" else [])]
        assert any(f"('{name}', {shown})" in verdict.reason for shown in allowed), verdict.reason


def test_a_file_over_the_disk_limit_cannot_be_written(make_executor, example: LocalInstance) -> None:
    ex = make_executor(max_file_mb=1)
    big = attack(ex, """\
        def test_repro_fill_disk():
            with open("big.bin", "wb") as handle:
                for _ in range(4):
                    handle.write(b"x" * (1 << 20))
        """)
    verdict = ex.verdict("", big)
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert "File too large" in verdict.reason + verdict.output_tail
    root = ex.workspace_root()
    assert not (root / "big.bin").exists() or (root / "big.bin").stat().st_size <= 1 << 20


# Files of 1 MiB (max_file_mb), 96 of them at most, a little apart so that a run the disk limit does not stop
# ends with a PASS in about two seconds; max_disk_mb=8 stops it after a few.
_FILL = """\
    def test_repro_fill_disk():
        os.makedirs(os.path.join(WHERE, "fill"), exist_ok=True)
        kept = []
        for i in range(96):
            path = os.path.join(WHERE, "fill", f"part{i}.bin")
            handle = open(path, "wb")
            handle.write(b"x" * (1 << 20))
            handle.flush()
            if UNLINK:  # still on the disk while open, yet no directory names it any more
                os.unlink(path)
                kept.append(handle)
            else:
                handle.close()
            time.sleep(0.02)
    """


# Empty files take no data block, but an inode each: 20,000 of them, 40 times 500, count as 78 MiB.
_EMPTY = """\
    def test_repro_fill_inodes():
        os.makedirs("fill", exist_ok=True)
        for i in range(40):
            for j in range(500):
                open(f"fill/{i}-{j}", "w").close()
            time.sleep(0.02)
    """


@pytest.mark.parametrize("kind", ["files", "unlinked-open-files", "empty-files"])
@pytest.mark.parametrize("fork_server", [True, False])
def test_many_files_under_the_file_limit_cannot_fill_the_disk(make_executor, tmp_path: Path, fork_server: bool,
                                                               kind: str) -> None:
    """max_file_mb bounds one file; max_disk_mb bounds them all (deleted files still open, and inodes, included):
    the run is killed (a forked one alone: its server serves the next run), its verdict says why and is not
    stored, and its files leave the host's disk."""
    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store, max_file_mb=1, max_disk_mb=8, fork_server=fork_server)
    golden = ex.golden_test()
    assert ex.verdict("", golden).outcome is Outcome.FAIL
    server = ex.site.current
    assert (server is not None) is fork_server
    if kind == "empty-files":
        body = textwrap.dedent(_EMPTY)
    else:
        body = f"UNLINK = {kind != 'files'}\nWHERE = '.'\n\n\n" + textwrap.dedent(_FILL)
    fill = attack(ex, body)
    verdict = ex.verdict("", fill)
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short() + verdict.output_tail
    assert "more than 8 MiB" in verdict.reason, verdict.reason  # the watcher stopped it, not a full disk
    assert "(max_disk_mb" in verdict.reason, verdict.reason
    assert store.get_verdict(ex.key("", fill)) is None  # never stored: a later run grades it afresh
    assert not (ex.workspace_root() / "fill").exists()  # nothing of it stays on the host's disk
    if fork_server:
        assert ex.site.current is server  # only the run was killed
        assert server is not None
        assert server.alive
        assert ex.server_losses == []
    fixed = ex.verdict(ex.instance.patch, golden)
    assert fixed.outcome is Outcome.PASS, fixed.short()
    assert ex.verdict("", golden).outcome is Outcome.FAIL


def test_the_fork_server_s_scratch_directory_counts_and_keeps_nothing(make_executor) -> None:
    """The scratch directory where a forked run's results land is writable to every run of the server and lives as
    long as it: what a test writes there counts toward max_disk_mb and is gone after the run, so runs that each
    stay under the limit cannot pile files up on the host's disk."""
    ex = make_executor(max_file_mb=1, max_disk_mb=8)
    assert ex.verdict("", ex.golden_test()).outcome is Outcome.FAIL
    server = ex.site.current
    assert server is not None
    scratch = "os.path.dirname(os.path.dirname(os.environ['COHARDEN_STREAM']))"
    small = attack(ex, f"""\
        def test_repro_leave_files():
            for i in range(3):
                with open(os.path.join({scratch}, f"left{{i}}.bin"), "wb") as handle:
                    handle.write(b"x" * (1 << 20))
        """)
    assert ex.verdict("", small).outcome is Outcome.PASS
    assert not list(server.scratch.glob("left*"))
    big = attack(ex, f"UNLINK = False\nWHERE = {scratch}\n\n\n" + textwrap.dedent(_FILL))
    verdict = ex.verdict("", big)
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short() + verdict.output_tail
    assert "(max_disk_mb" in verdict.reason, verdict.reason
    assert not list(server.scratch.glob("fill*"))
    assert ex.site.current is server


def test_a_weaker_sandbox_is_refused_unless_accepted(make_executor) -> None:
    from coharden.errors import CoHardenError

    with pytest.raises(CoHardenError, match="--allow-weak-sandbox"):
        make_executor(bwrap=False)
    ex = make_executor(bwrap=False, allow_weak_sandbox=True)
    verdict = ex.verdict("", ex.golden_test())
    assert verdict.outcome is Outcome.FAIL
    assert verdict.isolation in ("netns", "guard")  # the confinement it ran under, on the verdict


def test_coharden_installed_under_the_temp_directory_grades(tmp_path: Path) -> None:
    """The sandbox hides the host's /tmp behind a private one; coharden's own runtime files (the stream plugin,
    the fork server) are shown wherever coharden is installed, a copy under /tmp included (issue 34)."""
    import json
    import shutil
    import subprocess
    import sys

    copy = tmp_path / "clone" / "src"
    shutil.copytree(Path(__file__).parents[1] / "src" / "coharden", copy / "coharden",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert str(copy).startswith(tempfile_root())
    env = {**os.environ, "PYTHONPATH": str(copy), "COHARDEN_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "coharden", "verify", str(EXAMPLE), "--test", "golden", "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["buggy"]["outcome"] == "FAIL", proc.stdout[-2000:]
    assert result["fixed"]["outcome"] == "PASS", proc.stdout[-2000:]
    assert result["fixed"]["isolation"] == "bwrap"


def tempfile_root() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_the_cli_refuses_a_weaker_sandbox_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "coharden.yaml"
    config.write_text("bwrap: false\n")
    base = [sys.executable, "-m", "coharden", "verify", str(EXAMPLE), "--test", "golden", "--config", str(config)]
    env = {**os.environ, "COHARDEN_CACHE": str(tmp_path / "cache")}
    refused = subprocess.run(base, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert "--allow-weak-sandbox" in refused.stderr
    accepted = subprocess.run([*base, "--allow-weak-sandbox", "--json"], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert '"isolation": "netns"' in accepted.stdout or '"isolation": "guard"' in accepted.stdout


# --- recorded values are data (issue 32, item 3) ------------------------------------------------------------

def test_a_recorded_value_whose_pickle_runs_code_is_dropped_and_counted(make_executor,
                                                                       example: LocalInstance) -> None:
    """The candidate's test calls a function the fix touches with a value whose pickle runs a command when it
    loads (``__reduce__``). Recorded values once went into mutants as pickles, so the command would have run
    in every mutant run against the reference test. The recorder never pickles: the value (a class of the
    test, not of the repository) has no safe encoding, so its call is dropped and counted by reason, nothing
    of it reaches a mutant, and ``__reduce__`` is never even called."""
    from coharden.mutation.pool import build_pool
    from coharden.schema.mutant import Operator

    ex = make_executor()
    test = attack(ex, """\
        from tinyexpr import StrPrinter


        class Payload:
            num, den = symbols("a b")

            def __reduce__(self):
                open(os.path.join(os.getcwd(), "reduce-was-called"), "w").close()
                return (os.system, ("touch " + os.path.join(os.getcwd(), "pickle-ran"),))

            def __eq__(self, other):
                return isinstance(other, Payload)

            def __hash__(self):
                return 0

            def __repr__(self):
                return "Payload()"


        def test_repro_payload():
            assert StrPrinter()._print_Div(Payload()) == "a/b"
            a, b, c = symbols("a b c")
            assert sstr(a / (b * c)) == "a/(b*c)"
        """)
    ops = [Operator.INPUT_SPECIFIC_SHORTCUT, Operator.NARROWED_SCOPE, Operator.CALLER_PATCH]
    pool = build_pool(ex, example.instance.patch, [test], operators=ops)
    assert pool.values_dropped.get("type_outside_repository", 0) >= 1, pool.summary()
    assert any("Payload" in name for name in pool.dropped_types), pool.summary()
    root = ex.workspace_root()
    assert not (root / "reduce-was-called").exists()
    assert not (root / "pickle-ran").exists()
    for mutant in pool.mutants:
        assert "pickle" not in mutant.patch
        assert "Payload" not in mutant.patch
        assert "system" not in mutant.patch
    assert "values_dropped" in pool.summary()


def test_forged_encodings_naming_code_outside_the_repository_never_reach_mutants(tmp_path: Path) -> None:
    """The records file lies in the worktree: a test can write encodings by hand. One that names a module
    outside the repository (``os``), a test module, a module the repository lacks, or a representation that is
    not structural (an attribute call) is dropped; a well-formed one of the repository is kept."""
    import json

    from coharden.mutation.recording import module_files, packages_of, parse_records

    packages = packages_of([{"path": "tinyexpr/printer.py", "qualname": "f"}])
    exists = module_files(packages, lambda path: "x" if path in ("tinyexpr/__init__.py", "tinyexpr/expr.py")
                          else None, set())

    def line(enc: object) -> str:
        return json.dumps({"file": str(tmp_path / "tinyexpr/printer.py"), "qualname": "f", "kind": "return",
                           "key": "(1,)", "params": ["x"], "args_enc": json.dumps(enc), "value_enc": "1"})

    forged = [
        ["o", "os", {"system": "os"}, "system('id')"],
        ["o", "tinyexpr", {"system": "os"}, "system('id')"],
        ["o", "tinyexpr", {"Sym": "tinyexpr.tests.test_x"}, "Sym('a')"],
        ["o", "tinyexpr", {"Sym": "tinyexpr.planted"}, "Sym('a')"],
        ["o", "tinyexpr", {"Sym": "tinyexpr.expr"}, "Sym('a').__class__.__init__.__globals__"],
        ["e", "builtins", "builtins", "eval", ["t", ["1"]]],
        ["t", [["o", "tinyexpr", {"__import__": "tinyexpr"}, "__import__('os')"]]],
    ]
    kept = ["t", [["o", "tinyexpr", {"Sym": "tinyexpr.expr"}, "Sym('a')"], None]]
    records = parse_records("\n".join(line(enc) for enc in [*forged, kept]), tmp_path, packages, exists)
    assert [json.loads(r["args_enc"]) for r in records] == [kept]


# --- secrets in the environment (issue 32, item 4) -------------------------------------------------------------
SECRETS = {"OPENAI_API_KEY": "sk-attack-openai", "AWS_SECRET_ACCESS_KEY": "attack-aws-secret",
           "GITHUB_TOKEN": "ghp_attack_token", "COHARDEN_LLM_API_KEY": "attack-coharden-key",
           "DATABASE_URL": "postgres://user:attack-db-password@host/db", "SSH_AUTH_SOCK": "/tmp/attack-agent.sock",
           "LC_ATTACK_KEY": "attack-in-an-allowed-prefix"}


@pytest.mark.parametrize("fork_server", [True, False])
def test_secrets_in_coharden_s_environment_never_reach_a_test(make_executor, example: LocalInstance,
                                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                fork_server: bool) -> None:
    """A test prints its whole environment into its failure message: none of coharden's keys are there (nor in
    the store), the allow-listed variables are, and a variable the user names with ``pass_env`` is."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COHARDEN_PASSED_ON_PURPOSE", "passed-on-purpose")
    monkeypatch.setenv("LANG", "C.UTF-8")
    store = Store(tmp_path / "store.sqlite")
    ex = make_executor(store, fork_server=fork_server, pass_env=["COHARDEN_PASSED_ON_PURPOSE"])
    dump = attack(ex, """\
        def test_repro_dump_environment():
            assert False, "ENV " + repr(sorted(os.environ.items()))
        """)
    verdict = ex.verdict("", dump)
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    seen = verdict.reason + verdict.output_tail
    assert "ENV " in seen
    for value in SECRETS.values():
        assert value not in seen
    assert "passed-on-purpose" in seen
    assert "('LANG', 'C.UTF-8')" in seen
    rows = repr(store_rows(store.path))
    assert not [value for value in SECRETS.values() if value in rows]


def test_agent_commands_see_no_secret_no_home_and_cannot_write_outside(example: LocalInstance, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An external agent's command (the default: sandboxed, with the network) dumps its environment, reads a
    private file outside its workspace and lists the home directory, and writes beside its workspace: it sees
    no key, no private file, and its writes land nowhere but in the workspace."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    private = tmp_path / "private"
    private.mkdir()
    (private / "id_rsa").write_text("attack-private-key-material")
    outside = tmp_path / "planted.txt"
    command = (f"env; cat {private / 'id_rsa'}; ls -a {Path.home()}; echo planted > {outside}; "
               "echo in-workspace > inside.txt; true")
    agent = ExternalCommandAgent(command, timeout=60)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = agent.run(AgentTask(problem_statement="dump"), ws, "test-only", PassCritic())
        inside = (ws.root / "inside.txt").read_text()
    (observed,) = [e for e in result.events if e["kind"] == "observation"]
    output = observed["output"]
    assert "PATH=" in output  # the command ran and printed its environment
    for value in SECRETS.values():
        assert value not in output
    assert "attack-private-key-material" not in output
    assert not outside.exists()
    assert inside == "in-workspace\n"
    # of $HOME, only the directories holding the interpreter the command is shown (coharden's) are there
    home_entries = {p.relative_to(Path.home()).parts[0] for p in interpreter_dirs(sys.executable)
                    if p.is_relative_to(Path.home()) and p != Path.home()}
    for entry in (p.name for p in Path.home().iterdir()):
        if entry not in home_entries:
            assert f"\n{entry}\n" not in f"\n{output}\n"


def test_the_default_agent_s_commands_run_in_the_tests_sandbox(example: LocalInstance, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, mock_llm) -> None:
    """The default agent (mini-swe-agent over coharden's client): the trajectory the model sees holds no key of
    coharden's (the model's own included) and nothing of the user's files."""
    mini = pytest.importorskip("coharden.agent.mini", reason="the default agent needs mini-swe-agent")
    from coharden.agent import AgentTask
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace
    from coharden.llm import LLMClient, LLMConfig

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("COHARDEN_TEST_ATTACK_KEY", "attack-model-key")
    private = tmp_path / "private.env"
    private.write_text("attack-dotenv-secret")
    run = f"env; cat {private}; echo planted > {tmp_path / 'planted.txt'}; true"
    server = mock_llm([{"reply": f"THOUGHT: look.\n\n```mswea_bash_command\n{run}\n```", "times": 1},
                       {"reply": "THOUGHT: done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
                                 "\n```", "times": 1}])
    client = LLMClient(LLMConfig(model="openai/gpt-4o-mini", api_base=server.base_url,
                                 api_key_env="COHARDEN_TEST_ATTACK_KEY", max_tokens=256, timeout=10, max_retries=0))
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = mini.MiniSweAgent(client).run(AgentTask(problem_statement="dump"), ws, "test-only", PassCritic())
    output = next(e for e in result.events if e["kind"] == "observation")["output"]
    assert "PATH=" in output
    seen_by_model = repr(server.requests[-1].messages)
    for value in [*SECRETS.values(), "attack-model-key", "attack-dotenv-secret"]:
        assert value not in output
        assert value not in seen_by_model
    assert not (tmp_path / "planted.txt").exists()


# --- the fix in the repository's later history (issue 32, item 4) ------------------------------------------------
def test_the_fix_committed_after_the_base_is_not_in_the_worktrees_objects(tmp_path: Path) -> None:
    """As in every SWE-bench clone, the repository holds the commits after the instance's base, the fix among
    them. A test (and an agent) lists every object git can reach from its worktree, the alternates included:
    the fixed file's content is not among them, while git in the worktree still works on the base commit."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace
    from coharden.schema.instance import Instance
    from conftest import make_repo, run_git

    repo, base = make_repo(tmp_path / "repo", {"calc.py": "def half(x):\n    return x // 2\n",
                                               "tests/test_calc.py": "from calc import half\n"})
    (repo / "calc.py").write_text("def half(x):\n    return x / 2  # FIXED-UPSTREAM\n")
    run_git(repo, "commit", "--quiet", "--no-gpg-sign", "-am", "the fix")
    dump = textwrap.dedent("""\
        import subprocess


        def test_repro_history():
            listed = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch-check"], capture_output=True,
                                    text=True).stdout.split()
            blobs = [subprocess.run(["git", "cat-file", "-p", sha], capture_output=True, text=True).stdout
                     for sha in listed[::3]]
            status = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True)
            assert False, f"OBJECTS {len(listed) // 3} STATUS {status.returncode} " + repr(blobs)
        """)
    settings = Settings(timeout=30, cache_dir=tmp_path / "cache", workers=1)
    instance = Instance(instance_id="calc__half", repo=str(repo), base_commit=base, patch="", test_patch="",
                        problem_statement="half")
    with InstanceExecutor(instance, repo, settings, None) as ex:
        probe = ex.test_patch(make_patch([("tests/test_history.py", None, dump)]), name="probe")
        verdict = ex.verdict("", probe)
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert "OBJECTS " in verdict.reason
    assert "STATUS 0" in verdict.reason, verdict.reason
    assert "x // 2" in verdict.reason  # the base commit's files are there
    assert "FIXED-UPSTREAM" not in verdict.reason

    agent = ExternalCommandAgent("for o in $(git cat-file --batch-all-objects --batch-check | cut -d' ' -f1); "
                                 "do git cat-file -p $o; done; git status --short", timeout=60)
    with Workspace(repo, base) as ws:
        result = agent.run(AgentTask(problem_statement="half"), ws, "test-only", PassCritic())
    output = next(e for e in result.events if e["kind"] == "observation")["output"]
    assert "x // 2" in output
    assert "FIXED-UPSTREAM" not in output


# --- a reset that nothing survives (issue 32) ------------------------------------------------------------------

PLANT_BYTECODE = """\
    def test_repro_plant_bytecode():
        import importlib.util, marshal, subprocess
        source = os.path.join("tinyexpr", "printer.py")
        code = compile(open(source).read() + "\\nStrPrinter._print_Div = lambda self, e: 'PLANTED'\\n",
                       os.path.abspath(source), "exec")
        cache = os.path.join("tinyexpr", "__pycache__")
        os.makedirs(cache, exist_ok=True)
        # an unchecked hash-based .pyc (PEP 552): the interpreter loads it without looking at the source
        with open(os.path.join(cache, f"printer.{sys.implementation.cache_tag}.pyc"), "wb") as handle:
            handle.write(importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + b"\\0" * 8
                         + marshal.dumps(code))
        # a nested repository: git clean -fdx skips it (a second -f is needed)
        subprocess.run(["git", "init", "-q", cache], check=True)
    """


def test_bytecode_planted_in_a_nested_repository_does_not_survive_the_reset(make_executor,
                                                                              example: LocalInstance) -> None:
    ex = make_executor()
    assert ex.verdict("", attack(ex, PLANT_BYTECODE)).outcome is Outcome.PASS
    golden = ex.golden_test()
    verdict = ex.verdict(example.instance.patch, golden)
    assert verdict.outcome is Outcome.PASS, verdict.short() + verdict.output_tail
    assert not (ex.workspace_root() / "tinyexpr" / "__pycache__").exists()


def test_git_attributes_planted_by_a_test_do_not_rewrite_the_next_checkout(make_executor, example: LocalInstance,
                                                                           tmp_path: Path) -> None:
    """A ``.gitattributes`` left in the worktree made the next reset write CRLF line endings (and ``ident``
    expand ``$Id$``): the golden fix then did not apply, and that APPLY_ERROR was stored for the golden test."""
    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store)
    golden = ex.golden_test()  # made before the attack (laying a test patch down resets twice, which hid it)
    planted = attack(ex, """\
        def test_repro_plant_attributes():
            for directory in ("tinyexpr", "tests"):
                with open(os.path.join(directory, ".gitattributes"), "w") as handle:
                    handle.write("*.py text eol=crlf working-tree-encoding=UTF-16\\n")
            with open(os.path.join("tinyexpr", "printer.py"), "a") as handle:
                handle.write("# changed, so that the reset writes it again\\n")
            with open(".gitattributes", "a") as handle:  # the root one too (untracked here)
                handle.write("*.py text eol=crlf\\n")
        """)
    assert ex.verdict("", planted).outcome is Outcome.PASS
    verdict = ex.verdict(example.instance.patch, golden)
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert "APPLY_ERROR" not in str(store_rows(store.path))
    ex.verdict("", planted)
    ex.workspace.reset()
    root = ex.workspace_root()
    assert git(["status", "--porcelain", "--ignored"], root).stdout == ""
    assert (root / "tinyexpr" / "printer.py").read_text() == ex.base_file("tinyexpr/printer.py")


def test_a_worktree_locked_by_a_test_is_reset_all_the_same(make_executor, example: LocalInstance) -> None:
    """A test runs as the same user as coharden: directories it makes unwritable or unreadable must not stop the
    reset (a RepoError for every later run) nor keep what they hold."""
    ex = make_executor()
    locked = attack(ex, """\
        def test_repro_lock():
            os.makedirs("junk/deep", exist_ok=True)
            open("junk/deep/left.py", "w").write("x = 1\\n")
            os.chmod("junk/deep", 0)
            os.chmod("junk", 0o500)
            with open(os.path.join("tinyexpr", "printer.py"), "a") as handle:
                handle.write("# changed\\n")
            os.chmod("tinyexpr", 0o500)
        """)
    assert ex.verdict("", locked).outcome is Outcome.PASS
    verdict = ex.verdict(example.instance.patch, ex.golden_test())
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert not (ex.workspace_root() / "junk").exists()


def test_an_apply_error_after_another_test_is_checked_on_a_fresh_checkout(make_executor, example: LocalInstance,
                                                                        tmp_path: Path, monkeypatch) -> None:
    """Whatever a reset misses, an APPLY_ERROR is stored only when a fresh checkout gives it too."""
    from coharden.execution import workspace as workspace_module

    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store)
    assert ex.verdict("", ex.golden_test()).outcome is Outcome.FAIL
    real_reset = workspace_module.Workspace.reset

    def leaky_reset(self) -> None:  # a reset that some future trick defeats: it leaves printer.py changed
        if not self._dirty:
            return
        real_reset(self)
        target = self.root / "tinyexpr" / "printer.py"
        target.write_text(target.read_text().replace("den = self.parenthesize", "den  = self.parenthesize"))

    monkeypatch.setattr(workspace_module.Workspace, "reset", leaky_reset)
    verdict = ex.verdict(example.instance.patch, ex.golden_test())
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert "APPLY_ERROR" not in str(store_rows(store.path))


def test_bytecode_a_test_writes_does_not_reach_the_next_run(make_executor) -> None:
    """A test that turns bytecode writing back on and compiles the project leaves nothing for the next run:
    the reset before it removes every ``__pycache__`` of the checkout, and pytest's cache is never written."""
    ex = make_executor()
    probe = attack(ex, """\
        def test_repro_caches():
            import py_compile
            sys.dont_write_bytecode = False
            py_compile.compile("tinyexpr/expr.py", doraise=True)
            assert os.path.isdir(os.path.join("tinyexpr", "__pycache__"))
        """)
    verdict = ex.verdict("", probe)
    assert verdict.outcome is Outcome.PASS, verdict.short() + verdict.output_tail
    assert ex.verdict("", ex.golden_test()).outcome is Outcome.FAIL  # the next run, on a reset checkout
    root = ex.workspace_root()
    assert not list(root.rglob("__pycache__"))
    assert not (root / ".pytest_cache").exists()


# --- files read back from places a test can write (issue 32) ---------------------------------------------------

REPLACE_OUTPUTS = """\
    def test_repro_replace_outputs():
        junit = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml="))
        targets = [junit, os.path.join(os.path.dirname(junit), "stream.jsonl")]
        out = os.readlink("/proc/self/fd/1")
        if out.startswith("/"):
            targets.append(out)
        for target in targets:
            try:
                os.unlink(target)
            except OSError:
                pass
            KIND
        os._exit(0)
    """


@pytest.mark.parametrize("fork_server", [True, False])
def test_outputs_replaced_by_links_to_host_files_are_not_read(make_executor, tmp_path: Path,
                                                              fork_server: bool) -> None:
    secret = tmp_path / "secret.txt"
    marker = uuid.uuid4().hex
    secret.write_text(f'{{"event": "{marker}"}}\n<testsuites><testcase name="{marker}"/></testsuites>\n')
    ex = make_executor(fork_server=fork_server)
    body = REPLACE_OUTPUTS.replace("KIND", f"os.symlink({str(secret)!r}, target)")
    verdict = ex.verdict("", attack(ex, body))
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert marker not in verdict.model_dump_json()
    assert any("link" in note for note in verdict.tampering), verdict.tampering


@pytest.mark.parametrize("fork_server", [True, False])
def test_outputs_replaced_by_fifos_do_not_hang_the_grader(make_executor, fork_server: bool) -> None:
    import threading

    ex = make_executor(fork_server=fork_server)
    test = attack(ex, REPLACE_OUTPUTS.replace("KIND", "os.mkfifo(target)"))
    got: list = []
    worker = threading.Thread(target=lambda: got.append(ex.verdict("", test)), daemon=True)
    worker.start()
    worker.join(60)
    assert got, "coharden hangs reading a fifo the test left in place of its output"
    assert got[0].outcome is Outcome.HARNESS_ERROR, got[0].short()


def test_a_junit_directory_swapped_for_a_link_is_not_followed(make_executor, tmp_path: Path) -> None:
    """The JUnit file's own directory (inside the fork server's writable scratch directory) swapped for a link
    to a host directory: nothing is read from there, and cleaning up does not fail or follow it."""
    host = tmp_path / "host"
    host.mkdir()
    marker = uuid.uuid4().hex
    (host / "junit.xml").write_text(f'<testsuites><testsuite><testcase classname="tests.test_attack" '
                                    f'name="test_repro_swap_dir"/></testsuite><!-- {marker} --></testsuites>')
    (host / "keep.txt").write_text("kept")
    ex = make_executor()
    verdict = ex.verdict("", attack(ex, f"""\
        def test_repro_swap_dir():
            junit = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml="))
            directory = os.path.dirname(junit)
            os.rename(directory, directory + ".moved")
            os.symlink({str(host)!r}, directory)
            os._exit(0)
        """))
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert marker not in verdict.model_dump_json()
    assert (host / "keep.txt").read_text() == "kept"


def test_a_process_killed_at_the_disk_limit_gets_a_clear_verdict(make_executor) -> None:
    ex = make_executor(max_file_mb=1)
    verdict = ex.verdict("", attack(ex, """\
        def test_repro_fill_disk_no_python():
            import signal, subprocess
            subprocess.run(["sh", "-c", "head -c 4000000 /dev/zero > big.bin"], check=True)
        """))
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert not (ex.workspace_root() / "big.bin").exists() or (ex.workspace_root() / "big.bin").stat().st_size \
        <= 1 << 20


@pytest.mark.parametrize("fork_server", [True, False])
def test_a_test_killed_by_the_disk_limit_is_told_so(make_executor, fork_server: bool) -> None:
    """With SIGXFSZ's default action back, the limit kills the interpreter: the verdict says why."""
    ex = make_executor(max_file_mb=1, fork_server=fork_server)
    verdict = ex.verdict("", attack(ex, """\
        def test_repro_fill_disk_killed():
            import signal
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            with open("big.bin", "wb") as handle:
                for _ in range(4):
                    handle.write(b"x" * (1 << 20))
                    handle.flush()
        """))
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert "disk limit" in verdict.reason


def test_an_agent_s_git_config_never_runs_in_coharden_s_git(example: LocalInstance, tmp_path: Path) -> None:
    """The agent may write its workspace's ``.git`` (it may use git); coharden then computes the diff outside
    the sandbox. A clean filter (or an fsmonitor, or a hook) the agent configured there must not run in it."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace

    pwned = tmp_path / "pwned"
    command = (f"git config filter.evil.clean 'touch {pwned}-filter; cat' && "
               f"git config core.fsmonitor 'touch {pwned}-fsmonitor' && "
               f"printf '#!/bin/sh\\ntouch {pwned}-hook\\n' > .git/hooks/post-index-change && "
               "chmod +x .git/hooks/post-index-change && "
               "echo '* filter=evil' > .gitattributes && echo 'changed' >> README.md; true")
    agent = ExternalCommandAgent(command, timeout=60)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = agent.run(AgentTask(problem_statement="plant"), ws, "test-only", PassCritic())
        assert "filter" in (ws.root / ".git" / "config").read_text()  # the agent did write its config
    assert "changed" in result.patch
    assert not list(tmp_path.glob("pwned*"))


def test_an_agent_command_that_fills_the_disk_is_killed(example: LocalInstance, monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Agents' commands get the tests' disk limit: many files each under the file-size limit are stopped once
    they pass the total, and the observation says why."""
    from coharden.agent import AgentTask, ExternalCommandAgent, harness
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace

    monkeypatch.setattr(harness, "AGENT_MAX_DISK_BYTES", 8 << 20)
    agent = ExternalCommandAgent("for i in $(seq 1 200); do head -c 1048576 /dev/zero > fill$i.bin; sleep 0.01; "
                                 "done; echo finished", timeout=120)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = agent.run(AgentTask(problem_statement="fill"), ws, "test-only", PassCritic())
        left = sum(p.stat().st_size for p in ws.root.glob("fill*.bin"))
    observed = next(e for e in result.events if e["kind"] == "observation")
    assert "finished" not in observed["output"]
    assert "max_disk_mb" in observed.get("exception_info", ""), observed
    assert left < 64 << 20


def test_an_agent_cannot_make_coharden_write_its_prompt_through_a_link(example: LocalInstance,
                                                                      tmp_path: Path) -> None:
    """coharden writes the external agent's prompt before every invocation, outside the sandbox: a command that
    plants a link where the prompt goes (the workspace's .coharden/PROMPT.md, its own prompt file) must not make
    that write land on a host file."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import CriticContext, SkillCritic, default_critic
    from coharden.execution.workspace import Workspace

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    command = (f"mkdir -p .coharden && ln -sf {victim} .coharden/PROMPT.md; ln -sf {victim} \"$COHARDEN_PROMPT_FILE\""
               "; echo x >> README.md; true")
    critic = SkillCritic.combine([default_critic(CriticContext("test-only"), builtins=["clean_patch"])],
                                 max_iterations=1)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = ExternalCommandAgent(command, timeout=60).run(AgentTask(problem_statement="x"), ws, "test-only",
                                                               critic)
    assert result.iterations == 1  # the follow-up was written and the command ran again
    assert victim.read_text() == "precious\n"


def test_the_default_agent_is_refused_where_its_sandbox_cannot_be_made(example: LocalInstance,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents' commands get the tests' rule: no bwrap here means no run, unless the weaker confinement is
    accepted (``allow_weak_sandbox``)."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.errors import CoHardenError
    from coharden.execution import sandbox
    from coharden.execution.workspace import Workspace

    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        with pytest.raises(CoHardenError, match="--allow-weak-sandbox"):
            ExternalCommandAgent("true", timeout=30).run(AgentTask(problem_statement="x"), ws, "test-only",
                                                         PassCritic())
        accepted = ExternalCommandAgent("echo ran", timeout=30, allow_weak_sandbox=True).run(
            AgentTask(problem_statement="x"), ws, "test-only", PassCritic())
    assert "ran" in next(e for e in accepted.events if e["kind"] == "observation")["output"]


def test_the_agent_diff_ignores_filters_of_the_user_s_git_config(example: LocalInstance, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's global git config may define a filter (git-lfs's); an agent's in-tree .gitattributes that names
    it must not make coharden's diff (outside the sandbox) run it."""
    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace

    pwned = tmp_path / "pwned"
    config = tmp_path / "gitconfig"
    config.write_text(f"[filter \"lfs\"]\n\tclean = sh -c 'touch {pwned}; cat'\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    agent = ExternalCommandAgent("echo '* filter=lfs' > .gitattributes && echo changed >> README.md", timeout=60)
    with Workspace(resolve_repo(example.instance, None), example.instance.base_commit) as ws:
        result = agent.run(AgentTask(problem_statement="x"), ws, "test-only", PassCritic())
    assert "changed" in result.patch
    assert not pwned.exists()
