"""The process sandbox: process-group kills, output capture, network isolation and its documented fallback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coharden.execution.bwrap import PRIVATE_HOME
from coharden.execution.leftovers import OWNER_FILE, mark_owner, sweep_leftovers
from coharden.execution.sandbox import Confinement, bwrap_path, netns_prefix, network_guard_dir, run_limited


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_dead(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    result = run_limited(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], tmp_path, timeout=1)
    assert result.timed_out  # returned at the limit, not when the background sleep ended (benchmarks/kill_latency.py)
    assert result.returncode is None
    assert _wait_dead(int(pid_file.read_text()))


def test_processes_left_behind_are_killed_after_a_normal_exit(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    result = run_limited(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; echo done"], tmp_path, timeout=30)
    assert not result.timed_out
    assert result.returncode == 0
    assert result.output.strip() == "done"
    assert _wait_dead(int(pid_file.read_text()))


def test_chatty_output_does_not_block(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(20000):\n    print('x' * 100)\nprint('err', file=sys.stderr)"
    result = run_limited([sys.executable, "-c", code], tmp_path, timeout=30, network=True)
    assert result.returncode == 0
    assert result.output.count("x" * 100) == 20000
    assert "err" in result.output
    assert result.isolation == "none"


def test_rlimits_apply(tmp_path: Path) -> None:
    code = "import resource as r; print(r.getrlimit(r.RLIMIT_AS)[0], r.getrlimit(r.RLIMIT_CPU)[0])"
    result = run_limited([sys.executable, "-c", code], tmp_path, timeout=30, memory_mb=512, cpu_seconds=7)
    assert result.output.split() == [str(512 * 1024 * 1024), "7"]


def test_network_isolation_where_available(tmp_path: Path) -> None:
    code = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('BLOCKED', exc)\n"
    )
    result = run_limited([sys.executable, "-c", code], tmp_path, timeout=30)
    assert result.isolation == ("netns" if netns_prefix() else "guard")
    assert result.output.startswith("BLOCKED"), result.output
    assert "timed out" not in result.output


def test_python_guard_fallback_blocks_remote_but_not_loopback(tmp_path: Path) -> None:
    """The fallback used where network namespaces are not allowed (a sitecustomize on PYTHONPATH)."""
    code = (
        "import socket\n"
        "for host in ('1.1.1.1', '127.0.0.1'):\n"
        "    try:\n"
        "        socket.create_connection((host, 9), timeout=3)\n"
        "    except OSError as exc:\n"
        "        print(host, exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": network_guard_dir()}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30).stdout
    remote, loopback = out.strip().splitlines()
    assert remote.startswith("1.1.1.1")
    assert "blocked by coharden" in remote
    assert loopback.startswith("127.0.0.1")
    assert "blocked" not in loopback


# --- the bwrap sandbox -----------------------------------------------------------------------------------------
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bwrap cannot build a sandbox on this machine")


@needs_bwrap
def test_bwrap_confines_writes_processes_and_home(tmp_path: Path) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    code = (
        "import os\n"
        f"open({str(work / 'ok')!r}, 'w').write('x')\n"
        "try:\n"
        f"    open({str(outside / 'no')!r}, 'w').write('x')\n"
        "except OSError as exc:\n"
        "    print('DENIED', type(exc).__name__)\n"
        "print('PIDS', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "print('HOME', os.environ['HOME'], os.access(os.environ['HOME'], os.W_OK))\n"
    )
    result = run_limited([sys.executable, "-c", code], work, timeout=30, confine=Confinement(writable=(work,)))
    assert result.isolation == "bwrap"
    assert (work / "ok").exists()
    assert not (outside / "no").exists()
    assert "DENIED" in result.output
    pids = eval(result.output.split("PIDS ", 1)[1].splitlines()[0])  # noqa: S307 - our own output
    assert max(pids) < 10, pids  # only the sandbox's own few processes are visible
    assert f"HOME {PRIVATE_HOME} True" in result.output


@needs_bwrap
def test_bwrap_hides_the_hosts_cgroup_tree(tmp_path: Path) -> None:
    """A test sees no cgroup files: on a cgroup-v1 host ``cpu.shares`` = 1024 reads as "one CPU" to tools that
    size themselves by it (pylint skips its parallel tests: "Need 2 or more cores"); the CPUs it may run on
    stay visible."""
    code = ("import os\n"
            "print('CGROUP', sorted(os.listdir('/sys/fs/cgroup')) if os.path.isdir('/sys/fs/cgroup') else [])\n"
            "print('CPUS', len(os.sched_getaffinity(0)))\n")
    result = run_limited([sys.executable, "-c", code], tmp_path, timeout=30, confine=Confinement(writable=(tmp_path,)))
    assert result.isolation == "bwrap"
    assert "CGROUP []" in result.output
    assert f"CPUS {len(os.sched_getaffinity(0))}" in result.output


@needs_bwrap
def test_secret_files_are_covered_without_leaving_a_file_behind(tmp_path: Path) -> None:
    """/etc/shadow reads empty in the sandbox, and a process that ends without ``atexit`` (as a fork server or a
    killed worker does) leaves nothing in its temporary directory: the cover is a file of the installation."""
    temp = tmp_path / "temp"
    temp.mkdir()
    code = ("import os, sys\n"
            "from coharden.execution.sandbox import Confinement, run_limited\n"
            "r = run_limited([sys.executable, '-c', 'print(repr(open(\"/etc/shadow\").read()))'], sys.argv[1],"
            " timeout=30, confine=Confinement(writable=(sys.argv[1],)))\n"
            "print(r.isolation, r.output.strip(), flush=True)\n"
            "os._exit(0)\n")
    shown = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "TMPDIR": str(temp)}, check=True).stdout
    assert shown.split() == ["bwrap", "''"], shown
    assert list(temp.iterdir()) == []


def test_without_bwrap_a_confined_run_falls_back_and_says_so(tmp_path: Path) -> None:
    result = run_limited([sys.executable, "-c", "print('hi')"], tmp_path, timeout=30,
                         confine=Confinement(sandbox=False))
    assert result.isolation in ("netns", "guard")
    assert result.output.strip() == "hi"


def test_leftovers_of_a_dead_owner_are_swept(tmp_path: Path) -> None:
    dead = tmp_path / "coharden-ws-dead"
    live = tmp_path / "coharden-ws-live"
    foreign = tmp_path / "coharden-ws-foreign"  # no owner mark: never ours to remove
    for directory in (dead, live, foreign):
        directory.mkdir()
    mark_owner(live)
    (dead / OWNER_FILE).write_text("999999999 12345")
    assert sweep_leftovers(parent=tmp_path) == [dead]
    assert live.exists()
    assert foreign.exists()


def test_tampering_scan_names_what_and_where() -> None:
    from coharden.execution.tampering import scan
    from coharden.patches import make_patch

    patch = make_patch([("tests/conftest.py", None, "def pytest_runtest_makereport(item, call):\n    pass\n"),
                        ("tests/test_x.py", None, "import os\n\n\ndef test_x():\n    os._exit(0)\n")])
    notes = scan(patch)
    assert any(n.startswith("tests/conftest.py: adds or changes a conftest.py") for n in notes)
    assert any("defines the pytest hook pytest_runtest_makereport" in n for n in notes)
    assert any(n.startswith("tests/test_x.py: calls os._exit (added line 5)") for n in notes)
    honest = make_patch([("tests/test_y.py", None, "def test_y():\n    assert 1 + 1 == 2\n")])
    assert scan(honest) == []


def test_the_tests_tmpdir_is_chosen_from_the_checkout(tmp_path: Path) -> None:
    """The tests' TMPDIR differs from the checkout (``writable[0]``) in its first component, and a private tmpfs
    never goes over a directory the sandbox shows."""
    from coharden.execution.bwrap import OTHER_TMP, SANDBOX_TMP, tests_tmp
    from coharden.execution.sandbox import Confinement

    if not Path(OTHER_TMP).is_dir():
        pytest.skip(f"{OTHER_TMP} does not exist here")
    assert tests_tmp(Confinement(writable=(Path("/tmp/coharden-ws-x/repo"), Path("/tmp/scratch")))) == OTHER_TMP
    assert tests_tmp(Confinement(writable=(Path("/srv/checkout"), Path("/tmp/scratch")))) == SANDBOX_TMP
    shown = Confinement(writable=(Path("/tmp/coharden-ws-x/repo"),), readable=(Path(OTHER_TMP) / "env",))
    assert tests_tmp(shown) == SANDBOX_TMP
    assert tests_tmp(Confinement()) == SANDBOX_TMP


def test_the_disk_watch_counts_the_run_s_own_writes_only(tmp_path: Path) -> None:
    """Free space that others take (a file beside the watched directory, on the same filesystem) never trips
    the watch: the walk finds it is not the run's. The run's own files do, and so do a hard link counted once,
    a sparse file by its blocks only, and a deleted file the run still holds open."""
    from coharden.execution.disklimit import DiskWatch

    mine, other = tmp_path / "worktree", tmp_path / "elsewhere"
    mine.mkdir()
    other.mkdir()
    (mine / ".git").mkdir()
    holders: list[int] = []
    watch = DiskWatch([mine], 2 << 20, skip=[mine / ".git"], pids=lambda: holders, interval=0)
    (other / "big.bin").write_bytes(os.urandom(6 << 20))
    os.sync()
    assert not watch.check()
    (mine / ".git" / "skipped.bin").write_bytes(os.urandom(3 << 20))  # read-only inside: not walked
    with (mine / "sparse.bin").open("wb") as handle:
        handle.truncate(1 << 40)
    (mine / "one.bin").write_bytes(os.urandom(1 << 20))
    os.link(mine / "one.bin", mine / "same.bin")
    assert watch.measure() < 2 << 20
    assert not watch.check()
    # well past the limit: other tests running beside this one free space meanwhile, which hides as much of the
    # run's writes from the trigger within one tick
    with (mine / "gone.bin").open("wb") as handle:
        handle.write(os.urandom(12 << 20))
        handle.flush()
        os.fsync(handle.fileno())
        (mine / "gone.bin").unlink()
        assert watch.measure() < 2 << 20  # held open by a process the watch was not told of
        holders.append(os.getpid())
        assert watch.measure() > 13 << 20
        assert watch.check()
    assert "more than 2 MiB" in watch.reason()


def test_space_others_take_then_free_hides_none_of_a_run_s_later_writes(tmp_path: Path) -> None:
    """Others take space (a walk finds it is not the run's), then free it: the watch's baseline rises with the
    free space, so the run's later writes trip the watch as if the others had never been there."""
    from coharden.execution.disklimit import DiskWatch

    mine, other = tmp_path / "worktree", tmp_path / "elsewhere"
    mine.mkdir()
    other.mkdir()
    watch = DiskWatch([mine], 4 << 20, interval=0)
    (other / "big.bin").write_bytes(os.urandom(16 << 20))
    os.sync()
    assert not watch.check()  # a walk: none of it is the run's
    (other / "big.bin").unlink()
    os.sync()
    assert not watch.check()  # the baseline rises back
    (mine / "mine.bin").write_bytes(os.urandom(24 << 20))  # far past the limit: other tests free space meanwhile
    os.sync()
    assert watch.check()


def test_writes_hidden_by_space_others_free_meanwhile_are_found(tmp_path: Path) -> None:
    """Within one tick the run writes past its limit while others free more than that: the free space rises.
    The rise counts towards the trigger, so a walk finds the run's files; a baseline that only followed the free
    space up would have hidden them for the rest of the run."""
    from coharden.execution.disklimit import DiskWatch

    mine, other = tmp_path / "worktree", tmp_path / "elsewhere"
    mine.mkdir()
    other.mkdir()
    (other / "big.bin").write_bytes(os.urandom(64 << 20))  # a rise far past the limit: other tests run beside
    os.sync()
    watch = DiskWatch([mine], 4 << 20, interval=0)
    (mine / "mine.bin").write_bytes(os.urandom(8 << 20))
    (other / "big.bin").unlink()
    os.sync()
    assert watch.check()
    assert watch.written >= 8 << 20


@needs_bwrap
def test_a_hidden_directory_shows_only_what_is_bound_inside_it(tmp_path: Path) -> None:
    """A hidden directory (the user's checkout) is empty in the sandbox even where a shown path contains it; what
    the run must see inside it (an interpreter's directory, the base objects) is there, read-only."""
    checkout = tmp_path / "checkout"
    (checkout / "venv").mkdir(parents=True)
    (checkout / "venv" / "needed.txt").write_text("needed")
    (checkout / ".env").write_text("SECRET=1")
    work = tmp_path / "work"
    work.mkdir()
    needed = checkout / "venv" / "needed.txt"
    code = f"import os; print(sorted(os.listdir({str(checkout)!r})), open({str(needed)!r}).read())"
    result = run_limited([sys.executable, "-c", code], work, timeout=30,
                         confine=Confinement(writable=(work,), readable=(tmp_path, checkout / "venv"),
                                             hidden=(checkout,)))
    assert "['venv'] needed" in result.output, result.output


def test_only_the_end_of_a_huge_output_is_read_back(tmp_path: Path) -> None:
    """A run may print gigabytes (up to its file-size limit): coharden keeps the end only."""
    from coharden.execution.sandbox import OUTPUT_LIMIT

    code = f"import sys; sys.stdout.write('x' * {OUTPUT_LIMIT + (1 << 20)}); sys.stdout.write('THE END')"
    result = run_limited([sys.executable, "-c", code], tmp_path, timeout=60)
    assert len(result.output) <= OUTPUT_LIMIT
    assert result.output.endswith("THE END")
