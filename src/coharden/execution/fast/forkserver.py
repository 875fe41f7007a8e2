"""Client side of the fork server (see :mod:`coharden.execution.fast.forkserver_main`).

One server per worker: it pays the interpreter start-up and pytest's import and plugin loading once, then
every test run is a fork. When the server cannot start or reports that forking is unsafe, callers fall back
to a fresh ``python -m pytest`` process per run.

With a :class:`~coharden.execution.sandbox.Confinement` the server runs in the bwrap sandbox (where it can),
so every fork is confined too; the server owns a scratch directory (``scratch``, writable inside) where
callers put the files a run writes besides the worktree (JUnit XML, the result stream, the output). A run
during which the server dies (a test killed it) comes back with ``lost`` set; the next run starts a new one.
A run that writes more than the confinement's ``max_disk_bytes`` into the worktree and the scratch directory
(:mod:`~coharden.execution.disklimit`) is killed from outside - the forked child and everything below it, never
the server - and comes back with ``disk`` set; the server reports it as any killed child and serves the next.

Size: over 400 lines because every method works the one server process and its signed pipe (start, the
protocol, a run with its disk watch and kill, close), whose state (sequence number, pending bytes, what was
forged) a split would have to share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from coharden.execution.bwrap import PRIVATE_HOME, sandbox_env
from coharden.execution.disklimit import INTERVAL, DiskWatch, children, descendants, kill_below
from coharden.execution.fast.forkserver_main import protocol_mac
from coharden.execution.fork_run import ForkRun
from coharden.execution.leftovers import mark_owner
from coharden.execution.pidslimit import PidsCgroup
from coharden.execution.readback import UnsafeFile, read_text
from coharden.execution.removal import remove_tree_quietly
from coharden.execution.sandbox import (
    OUTPUT_LIMIT,
    Confinement,
    ProcessResult,
    command_line_problem,
    sandbox_wrap,
    spawn_long_lived,
)

_GRACE = 30.0  # seconds the server gets beyond a run's limit to report it, before it is presumed hijacked
_LINE_LIMIT = 1 << 20  # bytes of one protocol line; the server's lines are small, a longer one is not its own


SERVER_DIED = "the fork server died during the run (a test process killed it)"
SERVER_SILENT = "the fork server stopped answering during the run (a test process hijacked it)"
SERVER_GONE = "the fork server was gone when the run was sent to it"
"""Why a run has no result of its own when its server died under it (never ``tampering``): the executor restarts
the server and runs the test once more (see ``InstanceExecutor.verdicts``)."""

class ForkServerError(RuntimeError):
    pass




def _read_output(out: Path, scratch: Path) -> tuple[str, str]:
    """(a run's output, why it was not read): the output file lies in the scratch directory, where a test can
    swap it for a link to a host file (which coharden would store in the verdict) or a fifo (a read that never
    returns)."""
    try:
        return read_text(out, anchor=scratch, limit=OUTPUT_LIMIT, tail=True), ""
    except UnsafeFile as exc:
        return "", f"the run's output file was replaced: {exc.why} (not read)"
    except OSError:
        return "", ""



@dataclasses.dataclass(frozen=True)
class ServerStart:
    """How a fork server starts: the test interpreter ``python`` with ``env``, ``network`` and its sandbox
    (``confine``; None: none), what its warm-up imports, and how long that may take (``start_timeout`` seconds).

    The warm-up: ``preload``, modules to import (a project's dependencies); ``plugins``, the ``-p`` names its pytest
    warm-up loads (with ``env`` turning autoload off, as its runs do; see :mod:`coharden.execution.env_plugins`);
    ``scripts``: the runs are a repository's own runner script (``ForkRun.script``), not pytest: the server imports
    no pytest. ``project``: the checkout under test; a server whose warm-up imported one of its top-level modules
    (an installed copy of the project: pytest's own repository, a pytest plugin) is not used, since every fork
    would run that copy instead of the checkout's files."""

    python: str
    env: dict[str, str]
    network: bool
    confine: Confinement | None = None
    preload: list[str] | None = None
    plugins: list[str] | None = None
    scripts: bool = False
    project: Path | None = None
    start_timeout: float = 120.0


class ForkServer:
    def __init__(self, start: ServerStart) -> None:
        """A server started as ``start`` says. Its forks share its hash seed (a process's is fixed at start):
        :attr:`hash_seed`, the ``PYTHONHASHSEED`` it starts with (the test environment's fixed one), the value a
        run's environment must name to be forked."""
        env, confine = start.env, start.confine
        # <root>/io is writable inside the sandbox, <root>/shared read-only; the owner mark stays out of reach
        self._root = Path(tempfile.mkdtemp(prefix="coharden-io-"))
        mark_owner(self._root)
        self.scratch = self._root / "io"
        self.scratch.mkdir()
        self.cgroup: PidsCgroup | None = None
        self.proc: subprocess.Popen | None = None
        script = Path(__file__).with_name("forkserver_main.py")
        cmd = [start.python, str(script)]
        if start.preload:
            cmd.append("--preload=" + ",".join(start.preload))
        if start.project is not None:
            cmd.append(f"--project={start.project}")
        self.hash_seed: str | None = env.get("PYTHONHASHSEED") or None
        if start.scripts:
            cmd.append("--scripts")
        if start.plugins:
            cmd.append("--plugins=" + ",".join(start.plugins))
        # files coharden hands to runs (an instrumenting plugin): visible inside, read-only there
        self.shared = self._root / "shared"
        self.shared.mkdir()
        if confine is not None:
            confine = dataclasses.replace(confine.with_writable(self.scratch),
                                          readable=(*confine.readable, self.shared))
        self.confine = confine
        # the server is the sandbox's init: no bwrap process beside it holds its pipes for a test to find
        cmd, env, self.isolation = sandbox_wrap(cmd, env, start.network, confine, as_pid_1=True)
        self._key = secrets.token_bytes(32)
        self._seq = 0  # the last request's number; replies carry it
        self.forged = ""  # why a line on the protocol was not the server's (tampering), once one was seen
        self._pending = b""  # what the server wrote past its last complete line
        self.env_overrides: dict[str, str] = {}
        self.warm_runs = 0  # runs whose fork started with the project's modules imported
        self.swapped_runs = 0  # of those, runs whose changed function bodies were swapped in (warm.swap_changed)
        self.collected_runs = 0  # runs forked after a collection done once (collect once: collect_once.CollectOnce)
        self.collect_log: list[str] = []  # per run that asked to collect once: "once", or why it collected
        self.retired = ""  # why the server ended after a run: its sandbox could not be wiped clean for the next
        if self.isolation == "bwrap":
            assert confine is not None
            # the paths the server's per-run wipe leaves alone: the worktree and the scratch directory, which
            # coharden resets itself (the reset, _sweep_scratch)
            cmd += ["--sandboxed", "--own=" + json.dumps([str(p) for p in confine.writable]),
                    "--home=" + PRIVATE_HOME]
            self.env_overrides = sandbox_env(confine)
        self._guard = env["PYTHONPATH"].split(os.pathsep)[0] if self.isolation == "guard" else ""
        try:
            if confine is not None and confine.max_processes:
                # the server, its run and what the run starts; the run's own share is also its RLIMIT_NPROC
                self.cgroup = PidsCgroup.create(confine.max_processes + 8)
            # from a process-lifetime thread: a sandbox dies with the thread that started it (a warm-up's)
            self.proc = spawn_long_lived(cmd, Path.cwd(), env, confine=confine, cgroup=self.cgroup,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True, bufsize=1)
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"key": self._key.hex()}) + "\n")
            self.proc.stdin.flush()
            hello = self._read(start.start_timeout)
        except BaseException:
            self.close()
            raise
        if hello is None or not hello.get("ready"):
            self.close()
            raise ForkServerError("fork server did not start")
        if not hello.get("safe"):
            self.close()
            raise ForkServerError(hello.get("reason") or "fork server reports forking is unsafe")

    def _read(self, timeout: float | None, *, tick: Callable[[], None] | None = None) -> dict | None:
        """The server's next line, or None (nothing within ``timeout``, or a line it did not sign). ``tick``
        is called every :data:`~coharden.execution.disklimit.INTERVAL` seconds while nothing arrives."""
        line = self._line(None if timeout is None else time.monotonic() + timeout, tick)
        if line is None:
            return None
        try:
            message = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8: the server writes neither
            message = None
        signed = isinstance(message, dict) and hmac.compare_digest(str(message.get("mac", "")),
                                                                   protocol_mac(self._key, message))
        if signed and "forged" in message:
            self.forged = "a request to the fork server that coharden did not sign (a test wrote to the protocol)"
            return None
        if not signed or message.get("seq") != self._seq:
            self.forged = "a fork server reply that the server did not sign (a test wrote to the protocol)"
            return None
        return message

    def _line(self, deadline: float | None, tick: Callable[[], None] | None) -> bytes | None:
        """The server's next line (without its newline), or None at the deadline, at the end of the stream or
        past :data:`_LINE_LIMIT`. The pipe is read in chunks, never with ``readline``: a line without its end (a
        test that wrote part of one to the protocol, a server stopped mid-line) would block that forever."""
        assert self.proc is not None
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        # a selector (poll/epoll), not select(): a long-lived process (a batch, a test session) may hold
        # descriptors numbered above FD_SETSIZE (1024), which select() cannot watch
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            # only an end within the limit ends a line (one may come in the chunk that takes it past the limit)
            while self._pending.find(b"\n", 0, _LINE_LIMIT + 1) < 0:
                if len(self._pending) > _LINE_LIMIT:
                    self._pending = b""
                    self.forged = "a line on the fork server's protocol longer than any it writes"
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                step = left if tick is None else (INTERVAL if left is None else min(left, INTERVAL))
                if not selector.select(step):
                    if tick is not None:
                        tick()
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    chunk = b""
                if not chunk:
                    return None
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def _send(self, request: dict) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        self._seq += 1
        request = {**request, "seq": self._seq}
        request["mac"] = protocol_mac(self._key, request)
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _request_env(self, env: Mapping[str, str]) -> dict[str, str]:
        env = {**env, **self.env_overrides}
        if self._guard:  # the socket guard stays first on the path of every run
            env["PYTHONPATH"] = os.pathsep.join(p for p in (self._guard, env.get("PYTHONPATH", "")) if p)
        return env

    def prime(self, cwd: Path, env: dict[str, str], warm: dict, *, timeout: float) -> bool:
        """Have the server import the project's ``warm`` modules from ``cwd`` now (the checkout must be at its
        base state: ``warm["base"]``), without running anything, so that the runs after it - a fix's, its
        mutants' - start warm even when none of them runs the base state. True when the server holds them; a
        server that does not answer within ``timeout`` is closed (the next run starts a new one)."""
        if not self.alive:
            return False
        assert self.proc is not None
        assert self.proc.stdin is not None
        request = {"prime": True, "cwd": str(cwd), "env": self._request_env(env), "warm": warm}
        try:
            self._send(request)
        except OSError:
            return False
        reply = self._read(timeout)
        if reply is None or "primed" not in reply:
            self.close()
            return False
        return bool(reply["primed"])

    def run(self, run: ForkRun) -> ProcessResult:
        """One pytest run (or runner script's, ``run.script``) as a fork; output goes to ``run.out`` (default: a
        file in the scratch directory). What the run is: :class:`~coharden.execution.fork_run.ForkRun`."""
        assert self.proc is not None
        assert self.proc.stdin is not None
        # a fork takes its arguments over the pipe, never through exec: the same limit as a fresh process all the
        # same, so that a verdict does not depend on whether the run was forked
        problem = command_line_problem([sys.executable, "-m", "pytest", *run.args], self._request_env(run.env))
        if problem:
            return ProcessResult(None, f"coharden: {problem}", 0.0, False, self.isolation, lost=problem)
        out = run.out
        own_out = out is None
        if out is None:
            handle, name = tempfile.mkstemp(prefix="out-", dir=self.scratch)
            os.close(handle)  # the fork opens the file itself; keeping this descriptor leaked one per run
            out = Path(name)
        present = set(self.scratch.iterdir())  # the caller's files for this run (its JUnit directory) among them
        start = time.monotonic()
        try:
            request = self._run_request(run, out)
            watch = self._disk_watch(run.cwd)
            try:
                self._send(request)
            except (BrokenPipeError, OSError) as exc:
                raise ForkServerError("fork server is gone") from exc
            forked = self._read(30)
            if forked is None or "pid" not in forked:
                if self.forged:
                    self.close()
                    return ProcessResult(None, "", time.monotonic() - start, False, self.isolation,
                                         lost="tampering: " + self.forged, tampering=self.forged)
                raise ForkServerError("fork server did not fork")

            def look() -> None:
                if watch is not None and not watch.exceeded and watch.check():
                    self._kill_run()

            try:
                done = self._read(run.timeout + _GRACE, tick=look if watch is not None else None)
            except BaseException:
                self.close()
                raise
            lost = ""
            if done is None or "rc" not in done:
                # the server died (a test killed it), stopped answering, or the protocol carried a line it did
                # not sign: nothing it said can be trusted now
                if self.forged:
                    lost = "tampering: " + self.forged
                elif self._exited_soon():
                    lost = SERVER_DIED
                else:
                    lost = SERVER_SILENT
            elif self.cgroup is not None and self.proc is not None and self.isolation != "bwrap":
                # outside bwrap (where the server clears its own namespace): daemons that left the group
                self.cgroup.kill_all(spare=[self.proc.pid])
            duration = time.monotonic() - start
            output, replaced = _read_output(out, self.scratch)
            if lost:
                self.close(keep_scratch=True)
        finally:
            if own_out:
                out.unlink(missing_ok=True)
            self._sweep_scratch(present)
        disk = watch.reason() if watch is not None and watch.exceeded else ""
        if lost or done is None:  # done is None only when lost says why
            return ProcessResult(None, output, duration, False, self.isolation, lost=lost,
                                 tampering=self.forged, disk=disk)
        self._tally(done)
        timed_out = bool(done.get("timed_out"))
        rc = done.get("rc")
        return ProcessResult(None if timed_out or rc is None else int(rc), output, duration, timed_out,
                             self.isolation, tampering=replaced, disk=disk)

    def _run_request(self, run: ForkRun, out: Path) -> dict:
        """The request line of ``run`` with its output in ``out``: where and what to run, its limits, and (when
        given) its warm imports and collection name, the instrumenting plugin a zygote may load into a run it
        serves (its module name, directory and environment: ``zygotes.zygote_key`` leaves them out, so a
        recording is a fork of the zygote that collected the same tests for plain runs) and its runner script."""
        request = {"cwd": str(run.cwd), "args": list(run.args), "env": self._request_env(run.env), "out": str(out),
                   "memory_mb": run.memory_mb, "cpu_seconds": run.cpu_seconds, "timeout": run.timeout,
                   "max_processes": self.confine.max_processes if self.confine else None,
                   "max_file_bytes": self.confine.max_file_bytes if self.confine else None}
        if run.warm:
            request["warm"] = run.warm
        if run.collect:
            request["collect"] = run.collect
            if run.instrument:
                request["instrument"] = run.instrument
        if run.script:
            request["script"] = run.script
        return request

    def _tally(self, done: dict) -> None:
        """Count how a finished run started (warm, swapped, collected once) from the server's reply; a server that
        says it ended after the run (``retired``: its sandbox could not be wiped clean) is closed."""
        self.warm_runs += bool(done.get("warm"))
        self.swapped_runs += bool(done.get("swapped"))
        self.collected_runs += done.get("collected") == "once"
        if done.get("collected"):
            self.collect_log.append(str(done["collected"]))
            del self.collect_log[:-1000]  # a long batch's server: the last runs'
        if done.get("retired"):  # its wipe failed: it ended after this run, whose result stands
            self.retired = str(done["retired"])
            self.close(keep_scratch=True)  # the caller reads this run's files there; not alive: a new server next

    def _sweep_scratch(self, keep: set[Path]) -> None:
        """Remove what a run left in the scratch directory besides ``keep``: it is writable to every run of the
        server and outlives them, so files a test put there would pile up on the host's disk run after run, each
        run under the disk limit (a run's own JUnit directory goes with the caller's cleanup)."""
        with contextlib.suppress(OSError):
            for entry in self.scratch.iterdir():
                if entry in keep:
                    continue
                remove_tree_quietly(entry)  # a test's tree of any depth, a link as a link

    def _disk_watch(self, cwd: Path) -> DiskWatch | None:
        """The watch over what the next run writes into the worktree and the scratch directory (None without a
        disk limit)."""
        if self.confine is None or not self.confine.max_disk_bytes:
            return None
        return DiskWatch((cwd, *self.confine.writable), self.confine.max_disk_bytes, skip=self.confine.protected,
                         pids=self._run_pids)

    def _server_pid(self) -> int | None:
        """The host pid of the server process: bwrap's only child in a bwrap sandbox (``--as-pid-1``: the
        namespace's init), else the process started."""
        if self.proc is None:
            return None
        if self.isolation != "bwrap":
            return self.proc.pid
        found = children(self.proc.pid)
        return found[0] if found else None

    def _spared(self) -> list[int]:
        assert self.proc is not None
        return [self.proc.pid, *filter(None, [self._server_pid()])]

    def _run_pids(self) -> list[int]:
        """Host pids of the run in progress: every process of the sandbox but bwrap's and the server's."""
        if self.proc is None:
            return []
        spared = self._spared()
        if self.cgroup is not None:
            return [p for p in self.cgroup.pids() if p not in spared]
        return [p for p in descendants(self.proc.pid) if p not in spared]

    def _kill_run(self) -> None:
        """Kill the run in progress (the forked child, what it started, daemons reparented to the server) and
        nothing else: the server reaps its child, reports it killed and serves the next run."""
        if self.proc is None:
            return
        spared = self._spared()
        if self.cgroup is not None:
            self.cgroup.kill_all(spare=spared)
        else:
            kill_below(self.proc.pid, spare=spared)

    def _exited_soon(self) -> bool:
        """True when the server process is gone (or goes within a moment), False when it hangs."""
        if self.proc is None:
            return True
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=0.5)
        return self.proc.poll() is not None

    def close(self, *, keep_scratch: bool = False) -> None:
        """Stop the server (and every process of its sandbox); ``keep_scratch`` leaves the scratch directory
        to the caller's current run (it is removed by the final close)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self.cgroup is not None:
            self.cgroup.close()
            self.cgroup = None
        if not keep_scratch:
            remove_tree_quietly(self._root)
