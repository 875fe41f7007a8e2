"""Hostile tests against the sandbox's walls: what a test process reaches (the host's files, $HOME, secrets, the
fork server's protocol), how long it lives (daemons, fork bombs, killing its parents) and what it leaves for the
next run.

Each attack is a real test patch for ``examples/printer_brackets`` run in the real sandbox; the assertions look at
the host (the store, the user's checkout, ``$HOME``, ``/tmp``, the process table).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from tests.attacks.hostile import EXAMPLE, SECRETS, attack, needs_bwrap, store_rows
from tests.conftest import processes_with

from coharden.execution.bwrap import interpreter_dirs
from coharden.execution.fast.forkserver import _LINE_LIMIT, ForkServer, ServerStart
from coharden.execution.fork_run import ForkRun
from coharden.execution.store import Store
from coharden.instances import LocalInstance, resolve_repo
from coharden.schema.verdict import Outcome

pytestmark = needs_bwrap


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

    from coharden.execution.pytest_runner import fork_env
    from coharden.execution.sandbox import Confinement

    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    server = ForkServer(ServerStart(sys.executable, env=dict(os.environ), network=False,
                                    confine=Confinement(writable=(tmp_path,))))
    try:
        args = ["-q", "-p", "no:cacheprovider", "test_ok.py"]
        honest = server.run(ForkRun(tmp_path, args, fork_env(None), timeout=30, memory_mb=None, cpu_seconds=None))
        assert honest.returncode == 0
        assert not honest.lost
        assert server.proc is not None
        assert server.proc.stdin is not None
        server.proc.stdin.write(json.dumps({"cwd": str(tmp_path), "args": args, "env": {}, "seq": 2}) + "\n")
        server.proc.stdin.flush()
        forged = server.run(ForkRun(tmp_path, args, fork_env(None), timeout=30, memory_mb=None, cpu_seconds=None))
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
    server = ForkServer(ServerStart(sys.executable, env=dict(os.environ), network=False,
                                    confine=Confinement(writable=(tmp_path,))))
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
    run = server.run(ForkRun(root, args, fork_env(None), timeout=30, memory_mb=None, cpu_seconds=None))
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
               "project checkout": str(Path(__file__).parents[2] / "tests"), "shadow": "/etc/shadow"}
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
    shutil.copytree(Path(__file__).parents[2] / "src" / "coharden", copy / "coharden",
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


# --- secrets in the environment (issue 32, item 4) -------------------------------------------------------------
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
