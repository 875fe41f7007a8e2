"""Fork server, run by the TEST interpreter (stdlib + pytest only; coharden need not be installed there).

It imports pytest, warms it up once (a collection run over an empty directory imports pytest's own modules
and every installed plugin), optionally imports ``--preload`` modules (a project's dependencies, never the
project itself), then forks one child per request. A child starts with a warm interpreter and runs
``pytest.main`` exactly as ``python -m pytest`` would: cwd first on sys.path, the request's environment, its
own session and process group, rlimits, stdout/stderr to a file.

Protocol (JSON lines): the server first prints {"ready": true, "safe": bool, "reason": str}. Each request
{"cwd", "args", "env", "out", "memory_mb", "cpu_seconds"} is answered with {"pid": N} once forked and
{"rc": N} when the child ends (negative: killed by that signal).
"""

import json
import os
import resource
import sys
import tempfile
import threading
import traceback


def _child(request):
    os.setsid()
    try:
        if request.get("memory_mb"):
            limit = int(request["memory_mb"]) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if request.get("cpu_seconds"):
            cpu = int(request["cpu_seconds"])
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
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


def main():
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    here = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - stdlib-only script
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # noqa: PTH100
    safe, reason = True, ""
    try:
        import pytest

        with tempfile.TemporaryDirectory() as empty:
            pytest.main(["-q", "-p", "no:cacheprovider", "--co", empty])
        for name in sys.argv[1:]:
            if name.startswith("--preload="):
                for module in filter(None, name.split("=", 1)[1].split(",")):
                    __import__(module)
    except BaseException as exc:  # noqa: BLE001
        safe, reason = False, f"warm-up failed: {exc!r}"
    if safe and threading.active_count() != 1:
        safe, reason = False, "threads are running after warm-up; forking would not be safe"
    if safe and not hasattr(os, "fork"):
        safe, reason = False, "os.fork is not available"
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
        _, status = os.waitpid(pid, 0)
        proto.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    main()
