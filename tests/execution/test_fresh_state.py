"""Every run starts from an empty sandbox state (issue 51): nothing a test writes anywhere in the sandbox but its
worktree and the server's scratch directory (which coharden resets itself) reaches a later run - of the same fork
server, or of a later sandbox.

The checks are generic, not per path: a run reads the mount table and plants a file in every directory of every
writable mount it finds, and the next run looks for all of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from coharden.execution.fork_run import ForkRun
from coharden.execution.process_options import ProcessOptions
from coharden.execution.sandbox import Confinement, bwrap_path, run_limited

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bwrap cannot build a sandbox on this machine")

# A test module that plants (PHASE=plant) or looks for what was planted (PHASE=look). It walks every mount the
# mount table calls writable ("rw"), on its own file system, except the worktree and the scratch directory (the
# caller's) and the kernel's own (proc, devpts: no file can be made there; /proc/sys is checked apart).
PLANTER = textwrap.dedent('''\
    import ctypes, json, os, stat

    OWN = json.loads(os.environ["RESIDUE_OWN"])
    RECORD = os.path.join(os.getcwd(), "planted.json")
    KERNEL = ("proc", "devpts", "sysfs", "cgroup", "cgroup2")
    SHM_KEY = 0x51C0DE


    def writable_mounts():
        found = {}
        for line in open("/proc/self/mountinfo"):
            fields = line.split()
            sep = fields.index("-", 6)
            point = fields[4].encode().decode("unicode_escape")
            found[point] = (fields[5].split(","), fields[sep + 1])
        # directories only: a writable file mount is a device node (/dev/null), which holds nothing
        return sorted(p for p, (opts, fstype) in found.items() if "rw" in opts and fstype not in KERNEL
                      and os.path.isdir(p) and not any(p == o or p.startswith(o + "/") for o in OWN))


    def directories(root):
        dev = os.lstat(root).st_dev
        for here, dirs, _ in os.walk(root):
            dirs[:] = [d for d in dirs if os.lstat(os.path.join(here, d)).st_dev == dev
                       and not any(os.path.join(here, d) == o for o in OWN)]
            yield here


    def test_plant():
        planted, appended = [], []
        for root in writable_mounts():
            for here in list(directories(root)):
                path = os.path.join(here, "residue-from-an-earlier-run")
                try:
                    with open(path, "w") as handle:
                        handle.write("x")
                    planted.append(path)
                except OSError:
                    pass
                for name in os.listdir(here):
                    full = os.path.join(here, name)
                    if stat.S_ISREG(os.lstat(full).st_mode) and full != path:
                        try:
                            with open(full, "a") as handle:
                                handle.write("residue-from-an-earlier-run")
                            appended.append(full)
                        except OSError:
                            pass
            # a tree the server cannot enter (it runs without capabilities) nor walk by path: deeper than PATH_MAX
            deep = os.path.join(root, "residue-deep")
            start = os.getcwd()
            try:
                os.mkdir(deep)
                planted.append(deep)
                os.chdir(deep)
                for _ in range(2500):
                    os.mkdir("ab")
                    os.chdir("ab")
                open("bottom", "w").close()
                os.chdir(start)
                locked = os.path.join(root, "residue-locked")
                os.makedirs(os.path.join(locked, "inner"))
                open(os.path.join(locked, "inner", "f"), "w").close()
                os.chmod(os.path.join(locked, "inner"), 0)
                os.chmod(locked, 0)
                planted.append(locked)
                os.chmod(root, 0o555)  # the next run could not write there
            except OSError:
                pass
            finally:
                os.chdir(start)
        libc = ctypes.CDLL(None)
        shm = libc.shmget(SHM_KEY, 4096, 0o1600)
        with open(RECORD, "w") as handle:
            json.dump({"planted": planted, "appended": appended, "roots": writable_mounts(), "shm": shm}, handle)


    def test_look():
        record = json.load(open(RECORD))
        left = [p for p in record["planted"] if os.path.lexists(p)]
        left += [p for p in record["appended"] if os.path.exists(p) and "residue" in open(p).read()]
        left += [r for r in record["roots"] if not os.access(r, os.W_OK)]
        left += ["a System V segment"] if ctypes.CDLL(None).shmget(SHM_KEY, 0, 0) != -1 else []
        assert not left, "LEFT " + repr(left)
    ''')


@pytest.fixture
def server(tmp_path: Path) -> Iterator:
    """A sandboxed fork server whose worktree lies under /tmp (as coharden's do): its bind's mount point is a
    directory in the private /tmp, and a hidden directory (the user's checkout) and a shown one beside it."""
    from coharden.execution.fast.forkserver import ForkServer, ServerStart
    from coharden.execution.pytest_runner import fork_env

    root = tmp_path / "worktree"
    root.mkdir()
    checkout = tmp_path / "checkout"
    (checkout / "shown").mkdir(parents=True)
    made = ForkServer(ServerStart(sys.executable, env=fork_env(None), network=False, confine=Confinement(
        writable=(root,), readable=(checkout / "shown",), hidden=(checkout,))))
    assert made.isolation == "bwrap"
    made.root = root  # type: ignore[attr-defined]
    try:
        yield made
    finally:
        made.close()


def _run(server, test: str) -> subprocess.CompletedProcess | object:  # type: ignore[no-untyped-def]
    from coharden.execution.pytest_runner import fork_env

    env = {**fork_env(None), "RESIDUE_OWN": json.dumps([str(server.root), str(server.scratch)])}
    return server.run(ForkRun(server.root, ["-q", "-p", "no:cacheprovider", f"test_residue.py::{test}"], env,
                              timeout=120, memory_mb=None, cpu_seconds=None))


def test_nothing_a_run_plants_anywhere_reaches_the_next_run_of_the_server(server) -> None:  # type: ignore[no-untyped-def]
    (server.root / "test_residue.py").write_text(PLANTER)
    planted = _run(server, "test_plant")
    assert planted.returncode == 0, planted.output
    record = json.loads((server.root / "planted.json").read_text())
    # it did plant: in the private /tmp, beside the worktree's mount point there, in /dev/shm
    tmp_parent = str(server.root.parent)
    assert any(p.startswith("/tmp/") and "/" not in p[5:] for p in record["planted"]), record
    assert any(p.startswith(tmp_parent + "/") for p in record["planted"]), record
    assert any(p.startswith("/dev/shm/") for p in record["planted"]), record
    assert record["shm"] >= 0
    looked = _run(server, "test_look")
    assert looked.returncode == 0, looked.output
    assert not looked.lost
    # and it could write only where a run may: nothing meant to be read-only was writable (the tmpfs over
    # secret, hidden and cgroup directories, /dev itself): the sandbox's scratch mounts, which the server empties
    assert sorted(record["roots"]) == sorted(["/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue"]), record["roots"]
    # the same again: the server's wipe left it able to serve and to wipe
    assert _run(server, "test_plant").returncode == 0
    assert _run(server, "test_look").returncode == 0


def test_nothing_under_proc_sys_can_be_written(tmp_path: Path) -> None:
    """Every sandbox, fork server or not: as the root user without capabilities a process could still write the
    kernel's settings in /proc/sys (a sysctl checks the file's owner, not a capability), and most of them are the
    host's: a setting a test changed would outlive its sandbox, reaching every later run. Nothing there opens for
    writing (opening writes nothing)."""
    code = textwrap.dedent("""\
        import os
        opened = []
        for here, _, files in os.walk("/proc/sys"):
            for name in files:
                try:
                    os.close(os.open(os.path.join(here, name), os.O_WRONLY))
                    opened.append(os.path.join(here, name))
                except OSError:
                    pass
        print("OPENED", len(opened), opened[:5])
        """)
    result = run_limited([sys.executable, "-c", code], tmp_path, timeout=60, confine=Confinement(writable=(tmp_path,)))
    assert result.isolation == "bwrap"
    assert "OPENED 0 []" in result.output, result.output


def test_the_sandbox_s_writable_tmpfs_mounts_have_a_size(tmp_path: Path) -> None:
    """/tmp, the tests' TMPDIR and /dev/shm each have a size limit (a test cannot fill the machine's memory)."""
    code = ("import os\n"
            "for line in open('/proc/self/mountinfo'):\n"
            "    f = line.split()\n"
            "    if f[4] in ('/tmp', '/var/tmp', '/dev/shm'):\n"
            "        print('MOUNT', f[4], 'size=' in f[-1])\n")
    result = run_limited([sys.executable, "-c", code], tmp_path, timeout=60, confine=Confinement(writable=(tmp_path,)))
    assert "MOUNT /tmp True" in result.output, result.output
    assert "MOUNT /dev/shm True" in result.output, result.output
    if Path("/var/tmp").is_dir() and str(tmp_path).startswith("/tmp/"):
        assert "MOUNT /var/tmp True" in result.output, result.output


def test_the_wipe_removes_a_tree_deeper_than_path_max_and_locked(tmp_path: Path) -> None:
    """The wipe itself (outside any sandbox, on a directory standing in for a scratch mount): a tree deeper than
    PATH_MAX whose directories deny every access goes, mount points and the directories leading to them stay (their
    modes restored), and the working directory is the one before."""
    from coharden.execution.fast import forkserver_procs as procs

    root = tmp_path / "scratch"
    point = root / "ws" / "wt"
    point.mkdir(parents=True)
    (point / "kept").write_text("the worktree's")
    (root / "ws" / "beside").write_text("x")
    deep = root / "deep"
    deep.mkdir()
    here = Path.cwd()
    os.chdir(deep)
    try:
        for _ in range(2500):
            Path("ab").mkdir()
            os.chdir("ab")
        Path("bottom").write_text("x")
        Path().chmod(0)
    finally:
        os.chdir(here)
    table = {str(root): ("tmpfs", ["rw"], "/"), str(point): ("ext4", ["rw"], "/x")}
    try:
        fresh = procs.Fresh(table=table)
        assert fresh.roots == [str(root)]
        (root / "ws").chmod(0o500)
        assert procs.wipe(fresh, str(root / "home")) == []  # and it says nothing is left
    finally:  # nothing deep left for pytest's own clean-up of old temporary directories (it recurses)
        os.chdir(here)
        if deep.exists():
            subprocess.run(["chmod", "-R", "u+rwx", str(deep)], check=False)
            subprocess.run(["rm", "-rf", str(deep)], check=False)
    assert Path.cwd() == here
    assert sorted(p.name for p in root.iterdir()) == ["home", "ws"]
    assert [p.name for p in (root / "ws").iterdir()] == ["wt"]
    assert (point / "kept").read_text() == "the worktree's"
    assert os.access(root / "ws", os.W_OK)


def test_hidden_directories_in_tmp_around_binds_or_covered_keep_the_sandbox_working(tmp_path: Path) -> None:
    """Hidden directories as a real run has them: the user's working directory (``/tmp`` itself, when a command
    runs there), a cached project under ``/tmp`` with a bound directory inside it, one that a writable directory
    holds. The sandbox starts (bwrap refused to remount a hidden tmpfs a later mount covered), ``/tmp`` stays the
    sized, writable scratch mount, and a hidden directory outside ``/tmp`` is empty and read-only."""
    project = tmp_path / "cache" / "project"
    (project / ".git" / "objects").mkdir(parents=True)
    (project / "secret.txt").write_text("s")
    objects = tmp_path / "cache" / "objects"
    objects.mkdir()
    work = tmp_path / "work"
    (work / "inner").mkdir(parents=True)
    outside = Path.home() / f".coharden-hidden-test-{os.getpid()}"
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("s")
    try:
        code = ("import os\n"
                "open('/tmp/x', 'w').write('x')\n"
                f"print('SECRET', os.path.exists({str(project / 'secret.txt')!r}), "
                f"os.path.exists({str(outside / 'secret.txt')!r}))\n"
                f"try:\n    open({str(outside / 'planted')!r}, 'w')\nexcept OSError as e:\n"
                "    print('READONLY', e.errno)\n"
                "for line in open('/proc/self/mountinfo'):\n"
                "    f = line.split()\n"
                "    if f[4] == '/tmp':\n"
                "        print('TMP', f[5].split(',')[0], 'size=' in f[-1])\n")
        confine = Confinement(writable=(work,), hidden=(Path("/tmp"), project, work / "inner", outside),
                              mounts=((objects, project / ".git" / "objects"),))
        result = run_limited([sys.executable, "-c", code], work, timeout=60, confine=confine)
        assert result.returncode == 0, result.output
        assert "SECRET False False" in result.output
        assert "READONLY 30" in result.output  # EROFS
        assert "TMP rw True" in result.output, result.output
    finally:
        import shutil

        shutil.rmtree(outside, ignore_errors=True)


#: a stand-in for a file the wipe cannot remove, preloaded into the fork server: a process without capabilities
#: that owns everything in its scratch mounts has no real way to make a file it cannot unlink (no mount, no
#: immutable attribute, no other owner), so the server's own os.unlink refuses one name
STUCK_UNLINK = textwrap.dedent('''\
    import os

    _unlink = os.unlink


    def unlink(path, *args, **kwargs):
        if os.path.basename(os.fsdecode(path)).startswith("coharden-stuck"):
            raise PermissionError(1, "Operation not permitted", path)
        return _unlink(path, *args, **kwargs)


    os.unlink = unlink
    ''')

STUCK_TESTS = textwrap.dedent('''\
    import os

    def test_plant():
        with open("/tmp/coharden-stuck-residue", "w") as handle:
            handle.write("residue")

    def test_look():
        assert not os.path.lexists("/tmp/coharden-stuck-residue"), "LEFT by an earlier run"
    ''')


def test_a_server_whose_wipe_leaves_residue_serves_no_further_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A wipe that cannot remove a file (here the server's unlink refuses one name) used to pass in silence, and
    the server's next run found the file; now the server checks its scratch mounts empty after the wipe, ends
    after the run that left the file (that run's result stands), and the site's next run gets a new sandbox."""
    from coharden.config import Settings
    from coharden.execution.run_site import RunSite

    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "coharden_stuck_unlink.py").write_text(STUCK_UNLINK)
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "test_stuck.py").write_text(STUCK_TESTS)
    monkeypatch.setenv("PYTHONPATH", str(stub))
    settings = Settings(timeout=120, preload=["coharden_stuck_unlink"], pass_env=["PYTHONPATH"])
    site = RunSite(root, sys.executable, settings, Confinement(writable=(root,), readable=(stub,)))
    try:
        first = site.server()
        assert first is not None, site.server_failed
        assert first.isolation == "bwrap"
        planted = site.run(["test_stuck.py::test_plant"], ProcessOptions())
        assert planted.returncode == 0, planted.output
        assert not planted.lost
        looked = site.run(["test_stuck.py::test_look"], ProcessOptions())
        assert looked.returncode == 0, looked.output  # the next run does not see the residue
        assert site.current is not None  # a new sandbox served it
        assert site.current is not first
        assert "coharden-stuck-residue" in first.retired
        assert not first.alive
        assert site.losses == []
    finally:
        site.close()
