"""The fork server's processes (``forkserver_main``, loaded by path like it: stdlib only, Python 3.7+): exit codes,
dumpability, waiting for a child with a deadline, and, as the init of the sandbox's PID namespace, killing and
reaping every process but the ones it keeps (stopped zygotes) and giving every run a fresh sandbox state
(:class:`Fresh`, :func:`wipe`): the scratch mounts emptied and checked empty (:func:`leftovers`), the IPC
namespace's objects removed.
"""

import os
import select
import signal
import stat
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


# --- a fresh sandbox state for every run ------------------------------------------------------------------
# What a run can write in the sandbox besides its worktree and the server's scratch directory (the client resets
# those) are the *scratch mounts*: the writable tmpfs mounts the sandbox made for itself (/tmp, the tests'
# TMPDIR, /dev/shm) and the IPC namespace's message queues; every other mount is read-only (see ``bwrap.py``).
# They are found from the mount table, not named, so a writable mount added to the sandbox later is emptied too.
SCRATCH_TYPES = ("tmpfs", "mqueue")


def mount_table(path="/proc/self/mountinfo"):
    """The mount points of this mount namespace: {path: (fs type, per-mount options, root in its fs)}, the top
    mount of each path (the table lists them in mount order)."""
    found = {}
    with open(path, "rb") as handle:  # noqa: PTH123
        for line in handle:
            fields = line.split()
            try:
                sep = fields.index(b"-", 6)
                found[_unescape(fields[4])] = (fields[sep + 1].decode(), fields[5].decode().split(","),
                                               _unescape(fields[3]))
            except (ValueError, IndexError):
                continue
    return found


def _unescape(field):
    """A mountinfo path: octal escapes (\\040 for a space) decoded."""
    out, i = bytearray(), 0
    while i < len(field):
        if field[i:i + 1] == b"\\" and field[i + 1:i + 4].isdigit() and len(field[i + 1:i + 4]) == 3:
            out.append(int(field[i + 1:i + 4], 8) & 0xFF)
            i += 4
        else:
            out += field[i:i + 1]
            i += 1
    return os.fsdecode(bytes(out))


def _within(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


class Fresh:
    """The sandbox's state as the server found it, before any test code ran: which scratch mounts to empty
    (writable mounts of :data:`SCRATCH_TYPES` made fresh in the sandbox, none within the client's ``own`` paths),
    every mount point (never removed, nor what lies in it), and the directories kept around them (each scratch
    mount's root and every directory that leads to a mount point in one) with their modes and owners."""

    def __init__(self, own=(), table=None):
        table = mount_table() if table is None else table
        own = [os.path.realpath(p) for p in own]
        self.points = set(table)
        self.roots = sorted(p for p, (fstype, options, root) in table.items()
                            if fstype in SCRATCH_TYPES and "rw" in options and root == "/"
                            and not any(_within(p, o) for o in own))
        self.kept = {}  # directory -> its mode bits when the server started
        for root in self.roots:
            self._keep(root)
            for point in self.points:
                parent = os.path.dirname(point)  # noqa: PTH120
                while point != root and _within(parent, root):
                    self._keep(parent)
                    if parent == root:
                        break
                    parent = os.path.dirname(parent)  # noqa: PTH120

    def _keep(self, path):
        if path not in self.kept:
            try:
                self.kept[path] = stat.S_IMODE(os.lstat(path).st_mode)
            except OSError:
                pass


def wipe(fresh, home):
    """Give the next run the sandbox state the server started with: every scratch mount emptied but its mount
    points (the worktree's, the scratch directory's and shown paths' binds) and the directories leading to them,
    those emptied around them and their modes restored, ``home`` made again; the IPC namespace's System V
    objects removed. Whatever a test did to the tree (modes that deny the server, which runs without
    capabilities, access; a depth past PATH_MAX or past the descriptor limit) is removed all the same. Returns
    what is left in the scratch mounts all the same (:func:`leftovers`; empty: the next run starts clean), so
    that a server whose wipe failed serves no further run rather than hand one a test's residue."""
    try:
        back = os.open(".", os.O_RDONLY)
    except OSError:
        back = None
    try:
        for path in sorted(fresh.kept, key=len):  # outer first: a test may have locked the server out of one
            try:
                os.chmod(path, fresh.kept[path])  # noqa: PTH101
            except OSError:
                pass
            _drop_xattrs(path)
        for root in fresh.roots:
            try:
                _empty(root, fresh, os.lstat(root).st_dev)
            except OSError:
                pass
    finally:
        if back is not None:
            os.fchdir(back)
            os.close(back)
    left = leftovers(fresh)  # before ``home`` is made again, which lies in one
    try:
        os.makedirs(home, exist_ok=True)  # noqa: PTH103
    except OSError:
        pass
    clear_ipc()
    return left


def leftovers(fresh):
    """What is in the scratch mounts besides their mount points and the directories leading to them (whose own
    entries count alike): what a wipe could not remove, or a directory it could not even list."""
    left = []
    todo = list(fresh.roots)
    while todo:
        directory = todo.pop()
        try:
            names = os.listdir(directory)  # noqa: PTH208 - stdlib-only, Python 3.7+ script
        except OSError:
            left.append(directory)
            continue
        for name in names:
            path = os.path.join(directory, name)  # noqa: PTH118
            if path in fresh.points:
                continue
            if path in fresh.kept:
                todo.append(path)
            else:
                left.append(path)
    return sorted(left)


def _empty(directory, fresh, dev):
    for entry in list(os.scandir(directory)):  # noqa: PTH208
        if entry.path in fresh.points:
            continue  # a mount point: the client's (reset by it) or read-only
        if entry.path in fresh.kept:
            _empty(entry.path, fresh, dev)  # a directory leading to a mount point: emptied around it
            continue
        _remove(directory, entry.name, dev)


def _remove(parent, name, dev):
    """Remove ``parent/name`` and everything below it, depth-first by changing directory: no descriptor held per
    level and no path longer than a name, so no depth stops it; never into another file system."""
    os.chdir(parent)
    try:
        info = os.lstat(name)
    except OSError:
        return
    if not stat.S_ISDIR(info.st_mode):
        _unlink(name)
        return
    levels = [[name]]  # per level, the subdirectories of the current directory still to remove
    entered: list = []  # the directory entered at each level below ``parent``
    while levels:
        if not levels[-1]:
            levels.pop()
            if entered:
                os.chdir("..")
                try:
                    os.rmdir(entered.pop())  # noqa: PTH106
                except OSError:
                    pass
            continue
        sub = levels[-1].pop()
        try:
            if os.lstat(sub).st_dev != dev:
                continue  # a mount point the server did not know of: never
            os.chmod(sub, 0o700)  # noqa: PTH101 - a test may have taken every permission away (the server has no capability)
            os.chdir(sub)
        except OSError:
            continue
        entered.append(sub)
        below = []
        try:
            with os.scandir(".") as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        below.append(entry.name)
                    else:
                        _unlink(entry.name)
        except OSError:
            pass
        levels.append(below)


def _unlink(name):
    try:
        os.unlink(name)  # noqa: PTH108
    except OSError:
        pass


def _drop_xattrs(path):
    """Extended attributes a test set on a kept directory (tmpfs holds ``user.`` ones)."""
    try:
        for attr in os.listxattr(path, follow_symlinks=False):
            try:
                os.removexattr(path, attr, follow_symlinks=False)
            except OSError:
                pass
    except (OSError, AttributeError):
        pass


_IPC_RMID = 0


def clear_ipc():
    """Remove the System V shared memory segments, message queues and semaphore sets of the sandbox's IPC
    namespace (a test's own: the namespace is the sandbox's, and the server makes none); found in
    /proc/sysvipc."""
    found = {}
    for kind in ("shm", "msg", "sem"):
        try:
            with open("/proc/sysvipc/" + kind) as handle:  # noqa: PTH123
                found[kind] = [int(line.split()[1]) for line in handle.readlines()[1:] if line.strip()]
        except (OSError, ValueError, IndexError):
            found[kind] = []
    if not any(found.values()):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
    except Exception:  # noqa: BLE001 - no libc to call: nothing to do
        return
    for ident in found["shm"]:
        libc.shmctl(ident, _IPC_RMID, None)
    for ident in found["msg"]:
        libc.msgctl(ident, _IPC_RMID, None)
    for ident in found["sem"]:
        libc.semctl(ident, 0, _IPC_RMID, 0)
