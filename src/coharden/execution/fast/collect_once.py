"""Collect once, in a child of the fork server (``forkserver_main`` loads this file by path: stdlib and pytest
only, Python 3.7+, coharden not installed): :class:`CollectOnce`, the pytest plugin of a *zygote* - a child that
collects a run's tests once and forks each later run of the same tests after that collection. The server's side
(its handles on zygotes) is ``zygotes.py``; why this keeps the sandbox's guarantees is said in
``forkserver_main``'s docstring.

Size: over 400 lines because it is one plugin loaded by path into the zygote, whose collection, fork per run
and reset of what a run changed share the zygote's one session state.
"""

import gc
import json
import os
import resource
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

# the server's process helpers (forkserver_procs.py), which it loads by path before this file
procs = sys.modules["_coharden_forkserver_procs"]

def _tmp_listing(dirs):
    """The entries of the temporary directories and the home (a directory made in them shows at the top)."""
    found = []
    for directory in dirs:
        try:
            found += [os.path.join(directory, e) for e in sorted(os.listdir(directory))]  # noqa: PTH118, PTH208
        except OSError:
            pass
    return found


_MADE_ENTRIES = 200  # files and directories a collection may leave in the temporary directories (and home)
_MADE_BYTES = 1 << 20  # their total content


def _made(paths):
    """What the collection left at ``paths`` (new entries of the temporary directories or home, e.g. the
    config and cache directories a project makes when imported): [(path, mode, content or None for a
    directory)], parents first; None when it cannot be laid down again as it was (too much, a link, a device,
    a file that cannot be read)."""
    made: list = []

    def fail(error):
        raise error  # an entry that cannot be read: the zygote does not serve (CollectOnce says why)

    def file(path):
        st = os.lstat(path)
        if os.path.islink(path) or not os.path.isfile(path) or st.st_size > _MADE_BYTES:  # noqa: PTH113, PTH114
            return False
        with open(path, "rb") as handle:  # noqa: PTH123
            made.append((path, st.st_mode & 0o7777, handle.read(_MADE_BYTES + 1)))
        return True

    for top in paths:
        if os.path.islink(top) or not os.path.isdir(top):  # noqa: PTH112, PTH114
            if not file(top):
                return None
            continue
        for here, dirs, files in os.walk(top, onerror=fail):
            if os.path.islink(here):  # noqa: PTH114
                return None
            made.append((here, os.lstat(here).st_mode & 0o7777, None))
            if any(os.path.islink(os.path.join(here, d)) for d in dirs):  # noqa: PTH114, PTH118
                return None
            if not all(file(os.path.join(here, name)) for name in sorted(files)):  # noqa: PTH118
                return None
            if len(made) > _MADE_ENTRIES:
                return None
    if len(made) > _MADE_ENTRIES or sum(len(m[2] or b"") for m in made) > _MADE_BYTES:
        return None
    return made


def _lay_down(made):
    """In a run forked from a zygote: the files and directories its collection made, as it left them (the
    server wipes the temporary directories after every run; a fresh process's collection would make them
    again)."""
    for path, mode, content in made:
        if content is None:
            os.makedirs(path, exist_ok=True)  # noqa: PTH103
            os.chmod(path, mode)  # noqa: PTH101
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            try:
                os.write(fd, content)
            finally:
                os.close(fd)


def _instrument(config, plugin, env):
    """Load an instrumenting plugin (the recorder) into a run forked from the zygote, as ``-p`` loads it into a
    fresh session: its variables set, its directory first on the path, registered with the collected session's
    plugin manager (pytest calls its ``pytest_configure`` then: a historic hook). Its hooks from
    ``pytest_runtest_call`` on run as in a fresh session; the collection it would have seen is the zygote's."""
    import importlib

    for name in plugin["env"]:
        if name in env:
            os.environ[name] = env[name]
    sys.path.insert(0, plugin["path"])
    config.pluginmanager.register(importlib.import_module(plugin["plugin"]), plugin["plugin"])


def _profiling(profile):
    """True while ``profile`` (cProfile) still sees every call: nothing replaced it as the profiler."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        return monitoring.get_tool(monitoring.PROFILER_ID) is not None
    return sys.getprofile() is profile


def _fresh_clock(obj, names):
    """Restart the session clocks a report prints (``in 0.12s``): a run forked from a zygote starts now."""
    for name in names:
        old = getattr(obj, name, None)
        if old is None:
            continue
        try:
            setattr(obj, name, time.time() if isinstance(old, float) else type(old)())
        except Exception:  # noqa: BLE001 - cosmetic only
            pass


def _freeze_heap():
    """Move the zygote's heap out of the collector's sight (``gc.freeze``, Python 3.7+) before it forks runs. A
    collection in a forked run walks every tracked object and writes into its header, so the run copies, page by
    page, the whole heap it shares with the zygote (sympy's: most of a forked run's wall). Frozen objects are
    never collected in a run (cyclic garbage among the objects the zygote had, and their finalizers: a run may
    see them later than a fresh process would, as a collection's timing differs anyway); :func:`_see_frozen`
    keeps them in sight of the functions a test can look at the heap with."""
    if hasattr(gc, "freeze"):
        gc.freeze()


def _see_frozen():
    """In a run forked from a frozen zygote: ``gc.get_objects`` and ``gc.get_referrers`` first give the frozen
    objects back to the collector (``gc.unfreeze``), so a test finds what it would in a fresh process (the
    pytest ``Config``, a module's functions); the heap is then copied as it would have been without the freeze."""
    if not getattr(gc, "get_freeze_count", lambda: 0)():
        return
    for name in ("get_objects", "get_referrers"):
        original = getattr(gc, name)

        def seeing(*args, _original=original, **kwargs):
            gc.unfreeze()
            return _original(*args, **kwargs)

        seeing.__name__ = seeing.__qualname__ = name
        seeing.__doc__ = original.__doc__
        setattr(gc, name, seeing)


@dataclass(frozen=True)
class _Handshake:
    """A forked run's ends of its two pipes to its zygote: it writes to ``status`` whether it is set up, then waits
    for the zygote's go on ``go`` (:meth:`CollectOnce._grandchild`)."""

    status: int
    go: int


class CollectOnce:
    """pytest plugin of a zygote: the server's child that collects a run's tests once and then forks one
    grandchild per run of the same tests, which executes the collected items without walking the tree again.

    The zygote runs the request that started it through pytest's configuration and collection as any child
    does; at ``pytest_runtestloop`` (collection done) it checks that forking is safe - no thread started, no file
    left in the temporary directories (a run after the server's wipe would miss it) - and takes a
    :class:`warm.Snapshot` of every module loaded from the checkout (test modules and conftests included) with
    the functions that ran while they loaded (cProfile). Unsafe: it runs the tests itself and exits, as a plain
    child would. Else, per run: the changed module files (``warm.changed_files``; a changed test module or
    conftest, or an added or removed file next to a loaded one, is stale: the server collects again), then a
    fork; the grandchild points its output, the result stream and the JUnit file at this run's, swaps the changed
    function bodies in (``warm.swap_changed``; where it cannot, it leaves before running anything and the server
    runs the request as a plain child, collecting again) and returns to pytest, which runs the items, writes the
    reports and exits with the session's code. The zygote reports to the server on its own pipe: {"stale"},
    {"fallback"}, or {"pid", "swapped"} then {"rc"}; these are the run's own claims, like its exit code. It never
    holds the protocol's key or pipes, is non-dumpable, and is kept stopped (SIGSTOP) between its runs."""

    def __init__(self, request, start):
        """``request``: the run that started this zygote; ``start``: what the server handed it
        (``zygotes.ZygoteStart``)."""
        self.request = request
        self.spare = {1, os.getpid(), os.getppid(), *start.spare}  # the server, this zygote, the server's other ones
        self.replies = start.replies
        self.requests = start.requests
        self.module = start.module
        self.called = start.called  # code objects the server's warm import ran; None: unknown (no body is swapped)
        self.pending = b""
        self.tmp_dirs = [d for d in {"/tmp", tempfile.gettempdir(), os.environ.get("HOME", "")}
                         if d and os.path.isdir(d)]  # noqa: PTH112
        self.tmp_before = _tmp_listing(self.tmp_dirs)
        self.made: list = []  # what the collection left there, laid down again in each run (_made)
        self.out = os.fstat(1)
        self.profile = None
        try:
            import cProfile

            self.profile = cProfile.Profile()
            self.profile.enable()
        except Exception:  # noqa: BLE001 - another profiler is active: nothing may be swapped
            self.profile = None

    def _unsafe(self, session):
        if threading.active_count() != 1:
            return "a thread runs after collection"
        others = [p for p in procs.namespace_pids() if p not in self.spare and procs.state(p) not in ("Z", "X", "")]
        if others:  # a process the collection started (a daemon): the server's clean-up after a run would kill it
            return "a process runs beside the collection"
        after = _tmp_listing(self.tmp_dirs)
        if set(self.tmp_before) - set(after):
            return "collection removed files from the temporary directories"
        self.made = _made([p for p in after if p not in self.tmp_before])
        if self.made is None:
            return "collection left files in the temporary directories that cannot be laid down again"
        if getattr(session, "shouldstop", False) or getattr(session, "shouldfail", False):
            return "the session stops"
        return ""

    def pytest_runtestloop(self, session):
        profiling = self.profile is not None and _profiling(self.profile)
        if self.profile is not None:
            self.profile.disable()
        unsafe = ""
        try:
            unsafe = self._unsafe(session)
            prepared = None if unsafe else self._prepare(session, profiling)
        except Exception as exc:  # noqa: BLE001 - whatever failed, this process runs the tests itself
            unsafe, prepared = f"could not prepare: {type(exc).__name__}", None
        if prepared is None:
            try:  # the server says why no zygote serves these tests (its collect log)
                self._send({"unsafe": unsafe[:200]})
            except OSError:
                pass
            if self.request.get("instrument"):  # collected as the plain run: the plugin now, as a fork loads it
                _instrument(session.config, self.request["instrument"], self.request.get("env") or {})
            return None  # this process runs the tests itself, as a plain child
        zygote = os.getpid()
        try:
            self._serve(session, *prepared)  # returns in a run's process only
        except BaseException:  # noqa: BLE001 - a zygote that cannot serve ends (the server collects again)
            if os.getpid() == zygote:
                os._exit(70)
            raise
        return None  # pytest goes on: runs the collected items, reports, exits

    def _prepare(self, session, profiling):
        """(snapshot, collected test files) of a zygote about to serve."""
        root = os.path.abspath(os.getcwd())  # noqa: PTH100, PTH109
        snapshot = self.module.loaded_snapshot(root, self.profile if profiling else None, self.called)
        if self.called is None:
            snapshot.called = None
        self.profile = None
        # -x is pytest's --maxfail=1: the runs forked from this session set it as theirs asks (when the collection
        # failed nowhere, where it would have stopped the session already)
        self.exitfirst = "-x" in self.request.get("args", [])
        self.toggle = not self.exitfirst and not session.testsfailed
        self.maxfail = session.config.option.maxfail
        collected = set()
        for item in session.items:
            path = getattr(item, "path", None) or getattr(item, "fspath", None)
            if path is not None:
                collected.add(os.path.abspath(str(path)))  # noqa: PTH100
        stream = sys.modules.get("coharden_stream")
        if stream is not None:  # each run opens its own (a run with a stream and no plugin leaves: fallback)
            stream.redirect(None)
        procs.set_dumpable(0)
        bodies = getattr(self.module, "bodies", None)
        if snapshot.called is not None and bodies is not None:  # a run finds its changed functions here
            snapshot.functions = bodies.function_index(set(snapshot.files))
        _freeze_heap()
        return snapshot, collected

    def _serve(self, session, snapshot, collected):
        """The zygote's loop: fork a run per request (the first: the request that started it)."""
        request = self.request
        changed: dict[str, Any] = {}
        while True:
            if request is not None:
                sys.stdout.flush()
                sys.stderr.flush()
                status, go = os.pipe(), os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(status[0])
                    os.close(go[1])
                    self._grandchild(session, request, snapshot, changed, _Handshake(status[1], go[0]))
                    return
                os.close(status[1])
                os.close(go[0])
                ready = os.read(status[0], 256)
                os.close(status[0])
                if ready not in (b"1", b"2"):
                    os.close(go[1])
                    self._reap(pid)
                    self._send({"fallback": ready[1:].decode(errors="replace")[:200] or "the run was not set up"})
                else:
                    # the server knows the run's pid before any of its code runs: a run that kills this zygote
                    # is the server's to wait for (it inherits the orphan)
                    self._send({"pid": pid, "swapped": ready == b"1"})
                    os.write(go[1], b"1")
                    os.close(go[1])
                    self._send({"rc": self._reap(pid)})
            request = self._next()
            if request is None:
                os._exit(0)
            changed = self._check(snapshot, request, collected)
            if isinstance(changed, str):
                self._send({"stale": changed})
                request = None

    def _reap(self, pid):
        _, status = os.waitpid(pid, 0)
        try:
            os.killpg(pid, signal.SIGKILL)  # what the run left in its process group
        except OSError:
            pass
        return procs.exit_code(status)

    def _check(self, snapshot, request, collected):
        """The files changed since collection (path -> digest), or why the collected session does not fit."""
        if os.path.abspath(request.get("cwd") or "") != snapshot.root:  # noqa: PTH100
            return "another directory"
        if ("-x" in request.get("args", [])) != self.exitfirst and not self.toggle:
            return "collected with -x, or with a collection error: a run without it collects again"
        changed = self.module.changed_files(snapshot, snapshot.root)
        if changed is None:
            return "a loaded file is gone, or a file was added or removed next to one"
        for path in changed:
            if path in collected or os.path.basename(path) == "conftest.py":  # noqa: PTH119
                return "a test module or conftest changed"
        if changed:
            self.module.analyse_snapshot(snapshot, list(changed))
        return changed

    def _send(self, message):
        os.write(self.replies, (json.dumps(message) + "\n").encode())

    def _next(self):
        while b"\n" not in self.pending:
            try:
                chunk = os.read(self.requests, 1 << 16)
            except OSError:
                return None
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        try:
            request = json.loads(line.decode())
        except ValueError:
            return None
        return request if isinstance(request, dict) else None

    def _grandchild(self, session, request, snapshot, changed, handshake):
        """In a run forked from the zygote: this run's limits and files, the changed bodies swapped in; writes
        b"1" (swapped), b"2" (nothing to swap) or b"0" (cannot: it leaves) to ``handshake.status``, then waits for
        the zygote's go (on ``handshake.go``) before the tests run."""
        status, go = handshake.status, handshake.go
        ok = b"0"
        try:
            os.setsid()
            procs.set_dumpable(1)
            os.close(self.replies)
            os.close(self.requests)
            if request.get("cpu_seconds"):
                cpu = int(request["cpu_seconds"])
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for fd in [1, 2, *self._descriptors()]:
                if fd not in (out, status, go) and self._is_output(fd):
                    os.dup2(out, fd)  # the zygote's output, wherever pytest kept a copy of it (capture, faulthandler)
            os.close(out)
            config = session.config
            if self.toggle:
                config.option.maxfail = 1 if "-x" in request.get("args", []) else self.maxfail
            env = request.get("env") or {}
            if env.get("COHARDEN_STREAM"):
                os.environ["COHARDEN_STREAM"] = env["COHARDEN_STREAM"]
                sys.modules["coharden_stream"].redirect(env["COHARDEN_STREAM"])
            junit = [a.split("=", 1)[1] for a in request.get("args") or [] if str(a).startswith("--junitxml=")]
            if junit:
                xml = [p for p in config.pluginmanager.get_plugins() if type(p).__name__ == "LogXML"]
                if not xml:
                    raise RuntimeError("no JUnit plugin to point at this run's file")
                xml[0].logfile = os.path.normpath(os.path.abspath(junit[-1]))  # noqa: PTH100
                _fresh_clock(xml[0], ["suite_start", "suite_start_time"])
            _fresh_clock(config.pluginmanager.get_plugin("terminalreporter"), ["_session_start", "_sessionstarttime"])
            capture = config.pluginmanager.get_plugin("capturemanager")
            if capture is not None and hasattr(capture, "read_global_capture"):
                capture.read_global_capture()  # what a killed earlier run left in the capture files
            factory = getattr(config, "_tmp_path_factory", None)
            if factory is not None and getattr(factory, "_basetemp", None) is not None:
                factory._basetemp = None  # made on first use, in this run's (wiped) temporary directory
            swapped = False
            if changed:
                why: list[str] = []
                try:
                    swapped = self.module.swap_changed(snapshot, changed, why)
                except Exception as exc:  # noqa: BLE001 - whatever it changed, this process leaves
                    why.append(repr(exc))
                if not swapped:
                    raise RuntimeError("not swappable: " + "; ".join(why))
            _lay_down(self.made)
            _see_frozen()
            if request.get("instrument"):  # last: a run that leaves must not have started the plugin (its records)
                _instrument(config, request["instrument"], env)
            ok = b"1" if swapped else b"2"
        except BaseException as exc:  # noqa: BLE001 - leave before any test runs; the server runs it itself
            ok = b"0" + str(exc).encode(errors="replace")[:200]
        os.write(status, ok)
        os.close(status)
        if ok[:1] == b"0":
            os._exit(0)
        go_ahead = os.read(go, 1)
        os.close(go)
        if go_ahead != b"1":  # the zygote is gone: nobody told the server about this run
            os._exit(0)

    def _descriptors(self):
        try:
            return sorted(int(fd) for fd in os.listdir("/proc/self/fd") if fd.isdigit())  # noqa: PTH208
        except OSError:
            return list(range(3, 256))

    def _is_output(self, fd):
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.out.st_dev, self.out.st_ino)
