"""Hostile tests against the disk limits of a test run: one large file, many files under the file limit, empty
files that take inodes, the fork server's scratch directory; a run stopped at the limit gets a clear verdict.

Each attack is a real test patch for ``examples/printer_brackets`` run in the real sandbox; the assertions look at
the host (the store, the user's checkout, ``$HOME``, ``/tmp``, the process table).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.attacks.hostile import attack, needs_bwrap

from coharden.execution.store import Store
from coharden.instances import LocalInstance
from coharden.schema.verdict import Outcome

pytestmark = needs_bwrap


def test_a_file_over_the_disk_limit_cannot_be_written(make_executor, example: LocalInstance) -> None:
    ex = make_executor(max_file_mb=1)
    big = attack(ex, """\
        def test_repro_fill_disk():
            with open("big.bin", "wb") as handle:
                for _ in range(4):
                    handle.write(b"x" * (1 << 20))
        """)
    verdict = ex.verdict("", big)
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert "File too large" in verdict.reason + verdict.output_tail
    root = ex.workspace_root()
    assert not (root / "big.bin").exists() or (root / "big.bin").stat().st_size <= 1 << 20


# Files of 1 MiB (max_file_mb), 96 of them at most, a little apart so that a run the disk limit does not stop
# ends with a PASS in about two seconds; max_disk_mb=8 stops it after a few.
_FILL = """\
    def test_repro_fill_disk():
        os.makedirs(os.path.join(WHERE, "fill"), exist_ok=True)
        kept = []
        for i in range(96):
            path = os.path.join(WHERE, "fill", f"part{i}.bin")
            handle = open(path, "wb")
            handle.write(b"x" * (1 << 20))
            handle.flush()
            if UNLINK:  # still on the disk while open, yet no directory names it any more
                os.unlink(path)
                kept.append(handle)
            else:
                handle.close()
            time.sleep(0.02)
    """


# Empty files take no data block, but an inode each: 20,000 of them, 40 times 500, count as 78 MiB.
_EMPTY = """\
    def test_repro_fill_inodes():
        os.makedirs("fill", exist_ok=True)
        for i in range(40):
            for j in range(500):
                open(f"fill/{i}-{j}", "w").close()
            time.sleep(0.02)
    """


@pytest.mark.parametrize("kind", ["files", "unlinked-open-files", "empty-files"])
@pytest.mark.parametrize("fork_server", [True, False])
def test_many_files_under_the_file_limit_cannot_fill_the_disk(make_executor, tmp_path: Path, fork_server: bool,
                                                               kind: str) -> None:
    """max_file_mb bounds one file; max_disk_mb bounds them all (deleted files still open, and inodes, included):
    the run is killed (a forked one alone: its server serves the next run), its verdict says why and is not
    stored, and its files leave the host's disk."""
    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store, max_file_mb=1, max_disk_mb=8, fork_server=fork_server)
    golden = ex.golden_test()
    assert ex.verdict("", golden).outcome is Outcome.FAIL
    server = ex.site.current
    assert (server is not None) is fork_server
    if kind == "empty-files":
        body = textwrap.dedent(_EMPTY)
    else:
        body = f"UNLINK = {kind != 'files'}\nWHERE = '.'\n\n\n" + textwrap.dedent(_FILL)
    fill = attack(ex, body)
    verdict = ex.verdict("", fill)
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short() + verdict.output_tail
    assert "more than 8 MiB" in verdict.reason, verdict.reason  # the watcher stopped it, not a full disk
    assert "(max_disk_mb" in verdict.reason, verdict.reason
    assert store.get_verdict(ex.key("", fill)) is None  # never stored: a later run grades it afresh
    assert not (ex.workspace_root() / "fill").exists()  # nothing of it stays on the host's disk
    if fork_server:
        assert ex.site.current is server  # only the run was killed
        assert server is not None
        assert server.alive
        assert ex.server_losses == []
    fixed = ex.verdict(ex.instance.patch, golden)
    assert fixed.outcome is Outcome.PASS, fixed.short()
    assert ex.verdict("", golden).outcome is Outcome.FAIL


def test_the_fork_server_s_scratch_directory_counts_and_keeps_nothing(make_executor) -> None:
    """The scratch directory where a forked run's results land is writable to every run of the server and lives as
    long as it: what a test writes there counts toward max_disk_mb and is gone after the run, so runs that each
    stay under the limit cannot pile files up on the host's disk."""
    ex = make_executor(max_file_mb=1, max_disk_mb=8)
    assert ex.verdict("", ex.golden_test()).outcome is Outcome.FAIL
    server = ex.site.current
    assert server is not None
    scratch = "os.path.dirname(os.path.dirname(os.environ['COHARDEN_STREAM']))"
    small = attack(ex, f"""\
        def test_repro_leave_files():
            for i in range(3):
                with open(os.path.join({scratch}, f"left{{i}}.bin"), "wb") as handle:
                    handle.write(b"x" * (1 << 20))
        """)
    assert ex.verdict("", small).outcome is Outcome.PASS
    assert not list(server.scratch.glob("left*"))
    big = attack(ex, f"UNLINK = False\nWHERE = {scratch}\n\n\n" + textwrap.dedent(_FILL))
    verdict = ex.verdict("", big)
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short() + verdict.output_tail
    assert "(max_disk_mb" in verdict.reason, verdict.reason
    assert not list(server.scratch.glob("fill*"))
    assert ex.site.current is server


def test_a_process_killed_at_the_disk_limit_gets_a_clear_verdict(make_executor) -> None:
    ex = make_executor(max_file_mb=1)
    verdict = ex.verdict("", attack(ex, """\
        def test_repro_fill_disk_no_python():
            import signal, subprocess
            subprocess.run(["sh", "-c", "head -c 4000000 /dev/zero > big.bin"], check=True)
        """))
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert not (ex.workspace_root() / "big.bin").exists() or (ex.workspace_root() / "big.bin").stat().st_size \
        <= 1 << 20


@pytest.mark.parametrize("fork_server", [True, False])
def test_a_test_killed_by_the_disk_limit_is_told_so(make_executor, fork_server: bool) -> None:
    """With SIGXFSZ's default action back, the limit kills the interpreter: the verdict says why."""
    ex = make_executor(max_file_mb=1, fork_server=fork_server)
    verdict = ex.verdict("", attack(ex, """\
        def test_repro_fill_disk_killed():
            import signal
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            with open("big.bin", "wb") as handle:
                for _ in range(4):
                    handle.write(b"x" * (1 << 20))
                    handle.flush()
        """))
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert "disk limit" in verdict.reason
