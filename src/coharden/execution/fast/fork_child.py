"""What a forked child of the fork server does (``forkserver_main``, which loads this file by path like its other
siblings: stdlib only, Python 3.7+): the run's limits and descriptors, its environment and path as a fresh
``python -m pytest`` (or ``python SCRIPT``) would have them, the changed function bodies swapped in or the warm
modules purged, then pytest (a zygote's with :class:`collect_once.CollectOnce`) or the runner script, and the
exit a fresh interpreter would make.
"""

import os
import resource
import sys
import tempfile
import threading
import traceback

# the server's siblings, loaded by path before this file (see forkserver_main.load_sibling)
procs = sys.modules["_coharden_forkserver_procs"]
collect = sys.modules["_coharden_collect_once"]
zyg = sys.modules["_coharden_zygotes"]


def _close_except(keep):
    """Close every descriptor from 3 up but ``keep``."""
    low = 3
    for fd in sorted(f for f in keep if f is not None and f >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def _set_limits(request, zygote):
    """The run's resource limits on this child: memory, CPU time (a ``zygote``'s runs set their own: a fork
    starts at no CPU time, which must not grow), no core file, file size, processes."""
    if request.get("memory_mb"):
        limit = int(request["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if request.get("cpu_seconds"):
        cpu = int(request["cpu_seconds"])
        if not zygote:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU dumps core: none in the worktree
    if request.get("max_file_bytes"):  # a file larger than this fails to write (EFBIG): no full disk
        limit = int(request["max_file_bytes"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    if request.get("max_processes"):
        try:
            limit = int(request["max_processes"])
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        except (ValueError, OSError):
            pass


def _swap_or_purge(state, fd):
    """Before any test code runs: swap the changed function bodies into the warm modules of ``state``
    (``warm_state.WarmState``) or, where that fails or ``fd`` is None, purge them; b"1" (swapped) or b"0" to
    ``fd``."""
    swapped = False
    if fd is not None:
        try:
            swapped = state.module.swap_changed(state.snapshot, state.changed)
        except Exception:  # noqa: BLE001 - whatever it changed, the purge below drops it
            swapped = False
    if not swapped:
        state.module.purge(state.snapshot.root)
    if fd is not None:
        os.write(fd, b"1" if swapped else b"0")
        os.close(fd)


def child(request, swap=None, key=None, zygote=None):
    """Run one request in the forked child. ``swap``: (warm state, status fd) when the server's modules are
    warm but some module file changed: the child swaps in the changed function bodies or purges
    (``warm_state.WarmState``) and writes b"1" (swapped) or b"0" to the fd before any test code runs; (warm
    state, None): it purges.
    ``key``: the protocol's secret, wiped here first (a test must not be able to sign a reply). ``zygote``: a
    ``zygotes.ZygoteStart`` - this child collects once and serves the later runs of the same tests
    (:class:`collect_once.CollectOnce`)."""
    if key is not None:
        key[:] = bytes(len(key))
    os.setsid()
    try:
        procs.set_dumpable(1)
        _set_limits(request, zygote=zygote is not None)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        # the server's protocol pipes, other zygotes' pipes and anything else it holds
        _close_except([swap[1] if swap else None, *((zygote.replies, zygote.requests) if zygote else ())])
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        # a zygote collects the plain run of its tests: an instrumenting plugin is loaded into the runs it forks
        # (the first one too), never into the session every later run shares
        session = zyg.plain_request(request) if zygote is not None else request
        os.environ.update(session["env"])
        tempfile.tempdir = None
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        script = os.path.join(cwd, request["script"]) if request.get("script") else None  # noqa: PTH118
        # python -m pytest puts the directory it runs in first on the path; python SCRIPT, the script's own
        sys.path[:0] = [os.path.dirname(script) if script else cwd, *extra]  # noqa: PTH120
        if swap:
            _swap_or_purge(*swap)
        args = session["args"]
        if script:
            rc = _run_script(script, list(args))
            _finish_interpreter()
            os._exit(rc & 0xFF)
        sys.argv = ["pytest", *args]
        import pytest

        plugins = []
        if zygote is not None:
            hook = collect.CollectOnce.pytest_runtestloop
            collect.CollectOnce.pytest_runtestloop = pytest.hookimpl(tryfirst=True)(hook)
            plugins.append(collect.CollectOnce(request, zygote))
        rc = pytest.main(list(args), plugins=plugins)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(rc))
    except BaseException:  # noqa: BLE001 - report and leave with pytest's internal-error code
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)


def _run_script(path, args):
    """Run ``path`` as ``python path args`` would (a repository's own runner, sympy's ``bin/test``): as
    ``__main__``, with its arguments, the warning filters PYTHONWARNINGS names (a fresh interpreter reads them at
    start); its exit code (an uncaught exception: its traceback, 1)."""
    import runpy
    import warnings

    options = [o.strip() for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o.strip()]
    try:
        warnings._processoptions(options)  # type: ignore[attr-defined]  # what -W and PYTHONWARNINGS do at start
    except Exception:  # noqa: BLE001 - an option it cannot read is ignored, as at start-up (with a warning)
        pass
    sys.argv = [path, *args]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        try:
            print(exc.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - a closed stderr: the code still says it failed
            pass
        return 1
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        traceback.print_exc()
        return 1
    return 0


def _finish_interpreter():
    """What a fresh interpreter does at exit before it ends: wait for its non-daemon threads, run the atexit
    functions, flush the streams (a closed one is no error then)."""
    import atexit

    for finish in (getattr(threading, "_shutdown", None), getattr(atexit, "_run_exitfuncs", None)):
        try:
            if finish is not None:
                finish()
        except BaseException:  # noqa: BLE001 - as at an interpreter's exit, where such errors are printed only
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
