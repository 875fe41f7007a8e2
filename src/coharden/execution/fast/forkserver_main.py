"""Fork server, run by the TEST interpreter (stdlib + pytest only; coharden need not be installed there).

It imports pytest, warms it up once (a collection run over an empty directory imports pytest's own modules
and the environment's plugins: ``--plugins`` names them, autoload being off in its environment as in every run's,
see ``env_plugins.py``), optionally imports ``--preload`` modules (a project's dependencies) and, when a
request asks for it, the project's own modules (see ``warm`` below), then forks one child per request. A
child starts with a warm interpreter and runs ``pytest.main`` exactly as ``python -m pytest`` would: cwd
first on sys.path, the request's environment, its own session and process group, rlimits, stdout/stderr to a
file, and no other file descriptor of the server.

The server enforces each request's time limit itself (it is the only process that can name the child when it
runs in its own PID namespace). The server makes itself non-dumpable, so a child cannot ptrace it or read its
memory. With ``--sandboxed`` (it runs as the sandbox's only long-lived process, inside a bwrap PID namespace)
it kills every other process in the namespace after each child (daemons, forks left behind) and gives the next
run the sandbox state it started with (``forkserver_procs.wipe``: every writable mount of the sandbox's own
emptied, the ``--own`` paths aside - the worktree and the scratch directory, which the client resets), so no run
sees what an earlier one left there. A wipe that leaves anything behind ends the server after its reply (marked
``"retired"``; at start it reports itself unsafe): the client's next run gets a new sandbox.

Protocol (JSON lines): the client's first line is {"key": hex}, a secret of this server's life; every later
line both ways carries "seq" (the request's number, from 1; 0 for the hello) and "mac", the HMAC-SHA256 of the
line's other fields under that key, so a request or reply that anyone else wrote is rejected: a forged request
is answered with {"forged": "request"} and not run, a forged reply is taken for tampering by the client. The
key is wiped in each child before test code runs. Nothing a test can reach holds the pipes anyway: in the
sandbox the server is the namespace's init (``bwrap --as-pid-1``), non-dumpable, and a child closes them.
The server then prints {"ready": true, "safe": bool, "reason": str}. A request
{"prime": true, "cwd", "env", "warm"} imports the warm modules without forking and is answered with
{"primed": bool}. Each other request
{"cwd", "args", "env", "out", "memory_mb", "cpu_seconds", "max_processes", "timeout"} is answered with
{"pid": N} once forked and {"rc": N | null, "timed_out": bool, "warm": bool, "swapped": bool} when the child ended (rc
negative: killed by that signal; null: killed at the time limit; warm: the child started with the project's
modules imported; swapped: with changed function bodies swapped in).

Runner scripts (``--scripts``; sympy's ``bin/test``, see ``runners.Runner.forks``): the server imports no pytest, and
a request may carry ``"script"``, a path in its cwd: the child runs it as ``python script args`` would (``__main__``,
the script's directory first on the path, PYTHONWARNINGS applied as at start-up) instead of ``pytest.main``. Every
fork hashes with the seed the server started with (the test environment's fixed PYTHONHASHSEED).

Warm project imports (``execution/fast/warm.py``, loaded by path): a request may carry ``"warm": {"modules": [...],
"optional": [...], "key": str, "volatile": [paths], "base": bool}`` - the project's modules to keep imported,
more of them (the ones the instance's tests import) kept only if they import cleanly, an id of the checkout's
base state (the instance and those modules), the files this run's patches touch, and whether every file
outside the tests is the base commit's. See ``warm_state.WarmState``.

Collect once (``Settings.collect_once``; sandboxed servers only): a request may carry ``"collect": name``, the
client's name for the run's test state (its test patches). The first such request's child becomes a *zygote*
(``collect_once.CollectOnce``): it runs pytest's configuration and collection once and, at ``pytest_runtestloop``,
forks the run itself; later requests with the same name, directory, arguments (the JUnit path and -x aside) and
environment (the result stream aside) go to that zygote, which forks a run that executes the collected items
without walking the tree again, with the changed function bodies swapped in (``warm.swap_changed``). Where that
is not the same as a fresh run (a module-level change, a changed test module or conftest, a file added next to
a loaded one), the server runs the request as a plain child, collecting again. The reply then carries
"collected": "once" (served by a zygote) or why it collected. Why this keeps the sandbox's guarantees: a zygote
is a child like any (the key wiped, the protocol and every other zygote's pipes closed, its own session); it
ran only its own tests' code, so what it reports (on a pipe of its own, read by the server, which alone signs
replies) is that test's own claim about its own run, like an exit code; the server enforces the time limit
itself; between runs every zygote is stopped (SIGSTOP, waited for) and every other process in the namespace is
killed, so no code of one test runs while another test's run is prepared or runs (a run that sends a zygote
SIGCONT has it stopped again after); zygotes are non-dumpable (no ptrace, no /proc/PID/mem); at most
``zygotes.ZYGOTES`` are kept (a candidate's and a reference's runs alternate on one server).

This file: the protocol, the request loop, forking the children. Its siblings in ``execution/fast/``, one job
each: ``fork_child.py`` (what a forked child does: limits, environment, warm swap, pytest),
``forkserver_procs.py`` (wait, kill, reap; a fresh sandbox state per run), ``warm_state.py`` (the warm imports
kept), ``collect_once.py`` (a zygote's plugin), ``zygotes.py`` (the server's handles on them), ``warm.py`` +
``warm_bodies.py``. The test interpreter has no coharden, and a module imported by name could come from the
checkout under test, so :func:`load_sibling` loads each by its path (the package directory, read-only in the
sandbox) as the server starts, before any test code runs (``warm.py``: at the first warm request).
"""

import hashlib
import hmac
import json
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

_NOT_PROJECT = {"conftest", "setup", "test", "tests", "testing", "doc", "docs", "examples", "benchmarks",
                "scripts", "tasks", "tools", "build", "dist"}


def _project_modules(root):
    """Top-level module names a checkout provides (at its root, or under src/ or lib/)."""
    names = set()
    for base in (root, os.path.join(root, "src"), os.path.join(root, "lib")):  # noqa: PTH118
        try:
            entries = os.listdir(base)  # noqa: PTH208
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".py"):
                names.add(entry[:-3])
            elif os.path.isfile(os.path.join(base, entry, "__init__.py")):  # noqa: PTH113, PTH118
                names.add(entry)
    return names - _NOT_PROJECT


def protocol_mac(key, message):
    """The HMAC of a protocol line's fields (all but "mac"), in a canonical JSON form (the client imports
    this one, so both sides compute it alike)."""
    body = json.dumps({k: v for k, v in message.items() if k != "mac"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


class _Channel:
    """The server's side of the authenticated protocol (see the module docstring)."""

    def __init__(self, proto, key):
        self.proto = proto
        self.key = key
        self.seq = 0

    def send(self, message):
        message = dict(message, seq=self.seq)
        message["mac"] = protocol_mac(self.key, message)
        self.proto.write(json.dumps(message) + "\n")

    def accept(self, request):
        """True for the next request the client wrote (its number and MAC), False for anything else."""
        if not isinstance(request, dict) or request.get("seq") != self.seq + 1 \
                or not hmac.compare_digest(str(request.get("mac", "")), protocol_mac(self.key, request)):
            return False
        self.seq += 1
        return True


@dataclass(frozen=True)
class _Server:
    """What the server forks a child from: its ``channel`` (the protocol's pipe and key, which a child closes and
    wipes before any test code runs), its ``warm`` imports (``warm_state.WarmState``) and the ``zygotes`` it holds
    (zygote key -> ``zygotes.Zygote``, oldest first)."""

    channel: _Channel
    warm: Any
    zygotes: dict


def _read_key(stream):
    try:
        return bytearray.fromhex(json.loads(stream.readline())["key"])
    except (ValueError, KeyError, TypeError):
        return None


def load_sibling(name):
    """``execution/fast/NAME.py`` loaded by path as ``_coharden_NAME`` (why: see the module docstring)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")  # noqa: PTH118, PTH120, PTH100
    spec = importlib.util.spec_from_file_location("_coharden_" + name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


procs = load_sibling("forkserver_procs")  # before collect_once and zygotes, which find it in sys.modules
load_sibling("warm_bodies")  # the body swapping, before warm.py, which finds it in sys.modules
collect = load_sibling("collect_once")  # collect once: a zygote's pytest plugin
zyg = load_sibling("zygotes")  # collect once: the server's handles on its zygotes
warm_state = load_sibling("warm_state")  # the project's modules kept imported
fork_child = load_sibling("fork_child")  # what a forked child does, after procs, collect_once and zygotes


def main():
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    procs.set_dumpable(0)
    key = _read_key(sys.stdin)
    if not key:
        return  # not started by coharden's client
    channel = _Channel(proto, key)
    here = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - stdlib-only script
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # noqa: PTH100
    options = {}
    for arg in sys.argv[1:]:
        name, eq, value = arg[2:].partition("=")
        options[name] = value if eq else "1"
    sandboxed = "sandboxed" in options
    home = options.get("home", "/tmp/coharden-home")
    # the sandbox's state before any code but the server's ran: what every run starts from
    fresh = procs.Fresh(json.loads(options.get("own") or "[]")) if sandboxed else None
    safe, reason = _warm_up(options)
    left = procs.wipe(fresh, home) if fresh is not None else []
    if left and safe:
        safe, reason = False, _unwiped(left)
    channel.send({"ready": True, "safe": safe, "reason": reason})
    if not safe:
        return
    warm = warm_state.WarmState(load_sibling)
    zygotes: dict[Any, Any] = {}  # collect once: zygote key -> collect_once.Zygote, oldest first
    server = _Server(channel, warm, zygotes)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        if not channel.accept(request):
            channel.send({"forged": "request"})
            continue
        try:
            mode = warm.prepare(request)
        except Exception:  # noqa: BLE001 - a failed warm import leaves the child cold
            warm.drop()
            mode = ""
        if request.get("prime"):  # import now, run nothing (the checkout is at its base state)
            channel.send({"primed": mode == "warm"})
            continue
        zkey = zyg.zygote_key(request) if sandboxed and request.get("collect") and hasattr(os, "set_blocking") \
            else None
        why: list[str] = []  # why a zygote did not serve the run
        done = None
        for held in zyg.slots(zygotes, zkey):  # the zygote that served last first
            done = zyg.serve_from_zygote(zygotes, held, request, channel, why)
            if done is not None:
                break
        if done is None:
            made = zyg.free_slot(zygotes, zkey, why)
            done = _run_child(server, request, mode, made)
            if zkey is not None:
                why += [f"no zygote: {done.pop('unsafe')}"] if done.get("unsafe") else []
                done["collected"] = ("collected (" + "; ".join(why) + ")" if why else "collected") \
                    + (", a zygote" if made is not None and made in zygotes else "")
        # between runs no zygote runs (a run may have sent one SIGCONT) and nothing else lives
        for held, zygote in list(zygotes.items()):
            if not zygote.stop():
                zygote.kill()
                del zygotes[held]
        if sandboxed:
            if not procs.kill_rest([z.pid for z in zygotes.values()]):
                for zygote in zygotes.values():
                    zygote.kill()
                zygotes.clear()
            left = procs.wipe(fresh, home)
            if left:  # this run's result stands; no later run may start from its residue
                done["retired"] = _unwiped(left)
        channel.send(done)
        if done.get("retired"):
            return  # the client starts a new sandbox for the next run


def _unwiped(left):
    """Why a server serves no (further) run: what its wipe left in the sandbox's scratch mounts."""
    return ("the sandbox's scratch mounts could not be emptied (" + ", ".join(left[:5])
            + (", ..." if len(left) > 5 else "") + "); the next run gets a new sandbox")


def _warm_up(options):
    """Import pytest (its modules, the environment's plugins: ``--plugins``, or every installed one where autoload
    is on) and the ``--preload`` modules: (safe to fork, why not)."""
    safe, reason = True, ""
    try:
        if "scripts" not in options:  # a server of a repository's own runner script needs no pytest
            import pytest

            # the environment's plugins by name, with autoload off in the server's environment as in its runs'
            plugins = [arg for name in filter(None, options.get("plugins", "").split(",")) for arg in ("-p", name)]
            with tempfile.TemporaryDirectory() as empty:  # a collection over an empty directory imports them
                pytest.main(["-q", "-p", "no:cacheprovider", *plugins, "--co", empty])
        for module in filter(None, options.get("preload", "").split(",")):
            __import__(module)
    except BaseException as exc:  # noqa: BLE001
        safe, reason = False, f"warm-up failed: {exc!r}"
    if safe and options.get("project"):
        imported = sorted(_project_modules(options["project"]) & set(sys.modules))
        if imported:
            safe, reason = False, (f"the warm-up imported the project under test ({', '.join(imported)}: an "
                                   "installed copy, e.g. a pytest plugin); runs need fresh processes")
    if safe and threading.active_count() != 1:
        safe, reason = False, "threads are running after warm-up; forking would not be safe"
    if safe and not hasattr(os, "fork"):
        safe, reason = False, "os.fork is not available"
    return safe, reason


def _run_child(server, request, mode, zkey, announce=True):
    """Run ``request`` as a fork of ``server`` (today's path); with ``zkey`` the child becomes a zygote
    (:class:`collect_once.CollectOnce`), kept in the server's zygotes when it serves on after this run. Returns the
    reply. ``announce``: send the client the {"pid"} line (not when a zygote that could not serve already did)."""
    channel, warm, zygotes = server.channel, server.warm, server.zygotes
    swap_status = os.pipe() if mode == "swap" and zkey is None else None
    ends = (os.pipe(), os.pipe()) if zkey is not None else None  # (replies, requests)
    pid = os.fork()
    if pid == 0:
        channel.proto.close()
        child_warm: tuple[Any, int | None] | None = None
        zygote = None
        if swap_status is not None:
            os.close(swap_status[0])
            child_warm = (warm, swap_status[1])
        elif mode in ("purge", "swap"):  # a zygote imports afresh what a plain child would swap: its own profile
            child_warm = (warm, None)
        if ends is not None:
            (_, replies), (requests, _) = ends
            called = set()
            if mode == "warm":
                called = warm.snapshot.called
            zygote = zyg.ZygoteStart(replies, requests, warm.module or load_sibling("warm"), called,
                                     [z.pid for z in zygotes.values()])
        fork_child.child(request, child_warm, channel.key, zygote)
    if swap_status is not None:
        os.close(swap_status[1])
    if announce:
        channel.send({"pid": pid})
    timeout = float(request.get("timeout") or 1e9)
    if ends is not None:
        (replies, replies_w), (requests_r, requests) = ends
        os.close(replies_w)
        os.close(requests_r)
        made = zyg.Zygote(zkey, pid, requests, replies)
        result, alive = zyg.wait_zygote_run(made, time.monotonic() + timeout)
        if "fallback" in result:  # it could not set up its first run: that run is a plain child's
            made.kill()
            return _run_child(server, request, mode, None, announce=False)
        if alive:
            zygotes[zkey] = made
            while len(zygotes) > zyg.ZYGOTES:
                zygotes.pop(next(iter(zygotes))).kill()
        return {"rc": result.get("rc"), "timed_out": bool(result.get("timed_out")), "warm": mode == "warm",
                "swapped": False, **({"unsafe": result["unsafe"]} if result.get("unsafe") else {})}
    status = procs.wait(pid, timeout)
    timed_out = status is None
    if timed_out:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
    try:
        os.killpg(pid, signal.SIGKILL)  # what the tests left behind in their process group
    except OSError:
        pass
    rc = None if timed_out else procs.exit_code(status)
    swapped = False
    if swap_status is not None:
        swapped = os.read(swap_status[0], 1) == b"1"
        os.close(swap_status[0])
    warmed = mode == "warm" or swapped
    return {"rc": rc, "timed_out": timed_out, "warm": warmed, "swapped": swapped}


if __name__ == "__main__":
    main()
