"""The fork server's processes (``forkserver_main``, loaded by path like it: stdlib only, Python 3.6+): exit codes,
dumpability, waiting for a child with a deadline, and, as the init of the sandbox's PID namespace, killing and
reaping every process but the ones it keeps (stopped zygotes) and emptying the private ``/tmp`` between runs.
"""

import os
import pathlib
import select
import signal
import sys
import time


def exit_code(status):
    """``os.waitstatus_to_exitcode`` (Python 3.9+), for the older interpreters of spec environments."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def set_dumpable(value):
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, value, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:  # noqa: BLE001 - best effort (not Linux, no libc)
        pass


def wait(pid, timeout):
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
                poller = select.poll()  # not select(): no FD_SETSIZE limit on the descriptor number
                poller.register(pidfd, select.POLLIN)
                poller.poll(left * 1000)
            else:
                time.sleep(min(0.005, left))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def kill_rest(spare=()):
    """Inside the sandbox's PID namespace: kill every process but this one, the namespace's init and ``spare``
    (stopped zygotes). Spared ones are killed pass by pass from /proc until none is left (zombies aside); a
    namespace that does not empty that way loses its zygotes too (False)."""
    emptied = True
    if spare:
        emptied = False
        keep = {os.getpid(), 1, *spare}
        for round_ in range(200):
            found = [pid for pid in namespace_pids() if pid not in keep and state(pid) not in ("Z", "X", "")]
            if not found:
                emptied = True
                break
            if round_ > 2:
                time.sleep(0.001)  # killed processes still to be scheduled to die (a loaded machine)
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            reap(keep)
    if not emptied or not spare:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    reap(set(spare) if emptied else set())
    return emptied


def reap(keep):
    """Reap the server's dead children (killed runs, orphans it inherited as init), never one in ``keep``."""
    while True:
        try:
            if keep:  # waitpid(-1) could reap a zygote that died: the handle reads its status instead
                found = [pid for pid in namespace_pids() if pid not in keep and state(pid) == "Z"]
                for pid in found:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass
                return
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break


def namespace_pids():
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]  # noqa: PTH208
    except OSError:
        return []


def state(pid):
    """A process's state letter from /proc (R, S, T, Z, ...), '' when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:  # noqa: PTH123
            return handle.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return ""


def wipe_tmp(keep, home, tests_tmp="/tmp"):
    """Empty the sandbox's private /tmp (but the bind mounts ``keep``) and the tests' own TMPDIR."""
    entries = list(pathlib.Path("/tmp").iterdir())
    if tests_tmp != "/tmp":
        entries += list(pathlib.Path(tests_tmp).iterdir())
    removal = sys.modules["_coharden_removal"]  # removal.py, loaded by path before this file
    for entry in entries:
        if entry.parent == pathlib.Path("/tmp") and entry.name in keep:
            continue
        removal.remove_tree_quietly(entry)  # a test's tree of any depth (shutil.rmtree fails past the recursion
        # or the open-files limit, and left it for the next run)
    pathlib.Path(home).mkdir(parents=True, exist_ok=True)
