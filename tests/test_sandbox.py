"""The process sandbox: process-group kills, output capture, network isolation and its documented fallback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from coharden.execution.sandbox import netns_prefix, network_guard_dir, run_limited


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
    start = time.monotonic()
    result = run_limited(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], tmp_path, timeout=1)
    assert result.timed_out
    assert result.returncode is None
    assert time.monotonic() - start < 5
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
