"""The fork server's side of collect once (``forkserver_main`` loads this file by path: stdlib only, Python 3.7+):
:class:`Zygote`, its handle on one zygote (a child running :class:`collect_once.CollectOnce`), :func:`zygote_key`
(which runs a zygote may serve), :func:`serve_from_zygote` and :func:`wait_zygote_run`. The server alone signs
replies and enforces time limits: what a zygote reports is its run's own claim, like an exit code.
"""

import hashlib
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

# the server's process helpers (forkserver_procs.py), which it loads by path before this file
procs = sys.modules["_coharden_forkserver_procs"]

ZYGOTES = 4  # zygotes a server keeps at once (a candidate's and a reference's runs alternate on one server,
# each test state with up to SLOTS code states)
SLOTS = 2  # zygotes of one test state: the code it was first collected on, and one other (see free_slot)
_LINE_LIMIT = 1 << 16
_READY_TIMEOUT = 60.0  # seconds a zygote gets to fork a run and swap bodies before the server runs it itself


def zygote_key(request):
    """What must be equal for a zygote's collected session to serve a run: the client's name for the test state
    (``collect``: its test patches), the run's directory, arguments (the JUnit path aside), environment (the
    result stream aside), warm imports and the limits the zygote set on itself (all but CPU time)."""
    request = plain_request(request)  # an instrumented run is served by the zygote of the plain runs of its tests
    args = ["--junitxml=" if str(a).startswith("--junitxml=") else a for a in request.get("args") or []
            if a != "-x"]  # a zygote serves runs with and without -x (``CollectOnce._maxfail``)
    env = {k: v for k, v in (request.get("env") or {}).items() if k != "COHARDEN_STREAM"}
    spec = request.get("warm") or {}
    body = [request.get("collect"), request.get("cwd"), args, env, spec.get("key"), spec.get("modules"),
            spec.get("optional"), request.get("memory_mb"), request.get("max_file_bytes"),
            request.get("max_processes")]
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def instrumenting(request):
    """A request's instrumenting plugin (``{"plugin": module, "path": its directory, "env": [its variables]}``),
    or None (also when malformed: the run is then a plain one, collected as every run is)."""
    plugin = request.get("instrument")
    if not isinstance(plugin, dict) or not isinstance(plugin.get("plugin"), str) \
            or not plugin["plugin"].isidentifier() or not isinstance(plugin.get("path"), str) \
            or not isinstance(plugin.get("env"), list) or not all(isinstance(k, str) for k in plugin["env"]):
        return None
    return plugin


def plain_request(request):
    """``request`` as the plain run of the same tests: without its instrumenting plugin (its ``-p``, variables
    and directory). A zygote made for an instrumented run collects this, so it serves plain runs too, and the
    plugin is loaded into the instrumented run's fork only (``collect_once._instrument``)."""
    plugin = instrumenting(request)
    if plugin is None:
        return request
    args = list(request.get("args") or [])
    args = [a for i, a in enumerate(args) if not ((a == "-p" and args[i + 1:i + 2] == [plugin["plugin"]])
                                                  or (a == plugin["plugin"] and args[i - 1:i] == ["-p"]))]
    env = {k: v for k, v in (request.get("env") or {}).items() if k not in plugin["env"]}
    for name in ("COHARDEN_PLUGIN_PATH", "PYTHONPATH"):
        if name in env:
            env[name] = os.pathsep.join(p for p in env[name].split(os.pathsep) if p != plugin["path"])
    return {**{k: v for k, v in request.items() if k != "instrument"}, "args": args, "env": env}


@dataclass(frozen=True)
class ZygoteStart:
    """What the server hands the child that becomes a zygote (:class:`collect_once.CollectOnce`): its ends of the
    two pipes to the server (``replies``: it writes its reports there; ``requests``: it reads the later runs there),
    the ``module`` that snapshots and swaps (``warm.py``), ``called`` (the code objects the server's warm import ran;
    None: unknown, no body is swapped) and ``spare``, the pids of the server's other zygotes (which may run beside
    its collection)."""

    replies: int
    requests: int
    module: Any
    called: Any
    spare: list


class Zygote:
    """The server's handle on one zygote (:class:`CollectOnce`): its pid (a child of the server), the pipe the
    server writes requests to, the pipe it reads the zygote's reports from."""

    def __init__(self, key, pid, requests, replies):
        self.key = key
        self.pid = pid
        self.requests = requests
        self.replies = replies
        self.pending = b""
        self.status = None  # the wait status once it ended
        os.set_blocking(requests, False)  # a zygote that stops reading cannot block the server
        os.set_blocking(replies, False)

    def exited(self):
        if self.status is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done, status = self.pid, signal.SIGKILL  # reaped elsewhere: gone
            if done:
                self.status = status
        return self.status is not None

    def send(self, message):
        try:
            os.write(self.requests, (json.dumps(message) + "\n").encode())
            return True
        except OSError:
            return False

    def read(self, deadline):
        """("line", message), ("gone", None) when it ended, ("timeout", None) or ("garbage", None)."""
        poller = select.poll()
        poller.register(self.replies, select.POLLIN)
        eof = False
        while True:
            if b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                try:
                    message = json.loads(line.decode())
                except ValueError:
                    return "garbage", None
                return ("line", message) if isinstance(message, dict) else ("garbage", None)
            if len(self.pending) > _LINE_LIMIT:
                return "garbage", None
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", None
            if eof:
                if self.exited():
                    return "gone", None
                time.sleep(min(left, 0.005))
                continue
            if poller.poll(min(left, 0.05) * 1000):
                try:
                    chunk = os.read(self.replies, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if chunk:
                    self.pending += chunk
                else:
                    eof = True
            elif self.exited():
                eof = True

    def cont(self):
        try:
            os.kill(self.pid, signal.SIGCONT)
        except OSError:
            pass

    def stop(self):
        """Stop it (SIGSTOP) and wait until it is: a stopped zygote runs nothing between its runs. False: it ended
        (or would not stop and was killed)."""
        if self.exited():
            return False
        try:
            os.kill(self.pid, signal.SIGSTOP)
        except OSError:
            return False
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                self.status = signal.SIGKILL
                return False
            if done and not os.WIFSTOPPED(status):
                self.status = status
                return False
            if done or procs.state(self.pid) in ("T", "t"):
                return True
            time.sleep(0.001)
        self.kill()
        return False

    def kill(self):
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        if self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.status = signal.SIGKILL
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass


def _number(value):
    return isinstance(value, int) and not isinstance(value, bool)


def wait_zygote_run(zygote, deadline, run_pid=None):
    """Wait for the end of a run a zygote serves: ({"rc": N} - with {"unsafe": why} when it ran the tests itself -,
    {"timed_out": True} or {"fallback": why}) and
    whether the zygote lives on. ``run_pid``: the run's pid when the zygote already said it forked (else its
    {"pid"} line comes first). A zygote that ends mid-run (a test killed its parent) leaves its run to the server
    (the namespace's init inherits the orphan), whose own exit status is waited for."""
    unsafe = None
    while True:
        kind, message = zygote.read(deadline)
        if kind != "line":
            break
        if run_pid is None and unsafe is None and isinstance(message.get("unsafe"), str):
            unsafe = message["unsafe"][:200]  # it runs the tests itself: why it cannot serve more runs
            continue
        if run_pid is None and _number(message.get("pid")) and message["pid"] > 1:
            run_pid = message["pid"]
            continue
        if run_pid is None and "fallback" in message:
            return {"fallback": str(message["fallback"])[:200]}, True
        if _number(message.get("rc")):
            return {"rc": message["rc"]}, True
        kind = "garbage"
        break
    if kind == "timeout":
        zygote.kill()
        return {"timed_out": True}, False
    zygote.kill()
    if kind == "gone" and run_pid is not None:
        try:
            status = procs.wait(run_pid, max(0.0, deadline - time.monotonic()))
        except ChildProcessError:  # not the server's child: the zygote reaped it, or it is no run of the zygote's
            return {"rc": -signal.SIGKILL}, False
        if status is None:
            return {"timed_out": True}, False
        return {"rc": procs.exit_code(status)}, False
    if kind == "gone":  # the zygote ran the tests itself (forking was unsafe), or crashed
        return {"rc": procs.exit_code(zygote.status), **({"unsafe": unsafe} if unsafe is not None else {})}, False
    return {"rc": -signal.SIGKILL}, False


def _slot_keys(zkey):
    return [zkey] + [f"{zkey}:{n}" for n in range(2, SLOTS + 1)]


def slots(zygotes, zkey):
    """The zygotes that may serve a run of test state ``zkey``, the one that served last first (``zygotes`` is
    kept in order of use: a zygote that serves is put back at its end, one that refuses at its front)."""
    if zkey is None:
        return []
    mine = set(_slot_keys(zkey))
    return [held for held in reversed(list(zygotes)) if held in mine]


def free_slot(zygotes, zkey, why):
    """The key under which the collecting run of test state ``zkey`` becomes a zygote, or None (no zygote).

    The first run of a test state makes its zygote. A run that every zygote of its state refused because the
    changed code could not be swapped in (a change outside function bodies: the fix of sympy-14976 or
    astropy-13977 changes a module's top level, so its F->P run and every mutant of it collected again) makes a
    second one, from the code it runs: the mutants of that fix, which differ from it in function bodies, are then
    served. A slot is filled once and never replaced, so runs that alternate between code states make at most
    SLOTS zygotes, never one per run (a replacing zygote was tried: 93f4c02, reverted in a6a328d)."""
    if zkey is None:
        return None
    keys = _slot_keys(zkey)
    free = [held for held in keys if held not in zygotes]
    if len(free) == len(keys):
        return free[0]
    return free[0] if free and why and all(w.startswith("not swappable") for w in why) else None


def serve_from_zygote(zygotes, zkey, request, channel, why):
    """Run ``request`` as a fork of the zygote that collected its tests; None when the zygote cannot serve it
    (stale: dropped; the changed bodies cannot be swapped: kept for later runs) - the server runs it itself."""
    zygote = zygotes.pop(zkey)
    zygote.cont()
    if not zygote.send({k: v for k, v in request.items() if k not in ("mac", "seq")}):
        zygote.kill()
        return None
    # a zygote that does not fork the run in time costs no more than the run's own limit once more
    kind, message = zygote.read(time.monotonic() + min(_READY_TIMEOUT, float(request.get("timeout") or 1e9)))
    if kind == "line" and "fallback" in message:
        why.append(str(message["fallback"])[:200])
        # kept, as the least recently used: a refusal is no use (``slots`` tries the last that served first, and
        # the server evicts from the front)
        rest = dict(zygotes)
        zygotes.clear()
        zygotes[zkey] = zygote
        zygotes.update(rest)
        return None
    pid = message.get("pid") if kind == "line" else None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        why.append("stale: " + str(message.get("stale"))[:200] if kind == "line" and "stale" in message
                   else "the zygote " + kind)
        zygote.kill()  # stale, gone, silent or garbled: collect again
        return None
    channel.send({"pid": pid})
    result, alive = wait_zygote_run(zygote, time.monotonic() + float(request.get("timeout") or 1e9), pid)
    if alive:
        zygotes[zkey] = zygote
    swapped = bool(message.get("swapped"))
    return {"rc": result.get("rc"), "timed_out": bool(result.get("timed_out")), "warm": True, "swapped": swapped,
            "collected": "once"}
