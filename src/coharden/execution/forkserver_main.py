"""Fork server, run by the TEST interpreter (stdlib + pytest only; coharden need not be installed there).

It imports pytest, warms it up once (a collection run over an empty directory imports pytest's own modules
and every installed plugin), optionally imports ``--preload`` modules (a project's dependencies, never the
project itself), then forks one child per request. A child starts with a warm interpreter and runs
``pytest.main`` exactly as ``python -m pytest`` would: cwd first on sys.path, the request's environment, its
own session and process group, rlimits, stdout/stderr to a file, and no other file descriptor of the server.

The server enforces each request's time limit itself (it is the only process that can name the child when it
runs in its own PID namespace). The server makes itself non-dumpable, so a child cannot ptrace it or read its
memory. With ``--sandboxed`` (it runs as the sandbox's only long-lived process, inside a bwrap PID namespace)
it kills every other process in the namespace after each child (daemons, forks left behind) and empties the
private ``/tmp`` except the ``--keep`` entries (bind mounts), so no run sees what an earlier one left there.

Protocol (JSON lines): the server first prints {"ready": true, "safe": bool, "reason": str}. Each request
{"cwd", "args", "env", "out", "memory_mb", "cpu_seconds", "max_processes", "timeout"} is answered with
{"pid": N} once forked and {"rc": N | null, "timed_out": bool} when the child ended (rc negative: killed by
that signal; null: killed at the time limit).
"""

import json
import os
import pathlib
import resource
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback


def _set_dumpable(value):
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, value, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:  # noqa: BLE001 - best effort (not Linux, no libc)
        pass


def _child(request):
    os.setsid()
    try:
        _set_dumpable(1)
        if request.get("memory_mb"):
            limit = int(request["memory_mb"]) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if request.get("cpu_seconds"):
            cpu = int(request["cpu_seconds"])
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        if request.get("max_processes"):
            try:
                limit = int(request["max_processes"])
                resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
            except (ValueError, OSError):
                pass
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.closerange(3, 1 << 16)  # the server's protocol pipes and anything else it holds
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:0] = [cwd, *extra]
        sys.argv = ["pytest", *request["args"]]
        import pytest

        rc = pytest.main(list(request["args"]))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(rc))
    except BaseException:  # noqa: BLE001 - report and leave with pytest's internal-error code
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)


def _wait(pid, timeout):
    """The wait status of ``pid``, or None when it is still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(0.005, left))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kill_rest():
    """Inside the sandbox's PID namespace: kill every process but this one and the namespace's init."""
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while True:  # reap the ones that were our children
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break


def _wipe_tmp(keep, home):
    for entry in pathlib.Path("/tmp").iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            try:
                entry.unlink()
            except OSError:
                pass
    pathlib.Path(home).mkdir(parents=True, exist_ok=True)


def main():
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    _set_dumpable(0)
    here = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - stdlib-only script
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # noqa: PTH100
    options = dict(arg[2:].split("=", 1) if "=" in arg else (arg[2:], "1") for arg in sys.argv[1:])
    sandboxed = "sandboxed" in options
    keep = set(filter(None, options.get("keep", "").split(",")))
    home = options.get("home", "/tmp/coharden-home")
    safe, reason = True, ""
    try:
        import pytest

        with tempfile.TemporaryDirectory() as empty:
            pytest.main(["-q", "-p", "no:cacheprovider", "--co", empty])
        for module in filter(None, options.get("preload", "").split(",")):
            __import__(module)
    except BaseException as exc:  # noqa: BLE001
        safe, reason = False, f"warm-up failed: {exc!r}"
    if safe and threading.active_count() != 1:
        safe, reason = False, "threads are running after warm-up; forking would not be safe"
    if safe and not hasattr(os, "fork"):
        safe, reason = False, "os.fork is not available"
    if sandboxed:
        _wipe_tmp(keep, home)
    proto.write(json.dumps({"ready": True, "safe": safe, "reason": reason}) + "\n")
    if not safe:
        return
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            proto.close()
            _child(request)
        proto.write(json.dumps({"pid": pid}) + "\n")
        status = _wait(pid, float(request.get("timeout") or 1e9))
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
        if sandboxed:
            _kill_rest()
            _wipe_tmp(keep, home)
        rc = None if timed_out else os.waitstatus_to_exitcode(status)
        proto.write(json.dumps({"rc": rc, "timed_out": timed_out}) + "\n")


if __name__ == "__main__":
    main()
