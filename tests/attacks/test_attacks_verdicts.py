"""Hostile tests that forge a verdict or reach the store: a poisoned store, a forged conftest or JUnit report, a
cached timeout served for a larger limit, output files replaced by links, FIFOs or a swapped directory.

Each attack is a real test patch for ``examples/printer_brackets`` run in the real sandbox; the assertions look at
the host (the store, the user's checkout, ``$HOME``, ``/tmp``, the process table).
"""

from __future__ import annotations

import textwrap
import threading
import uuid
from pathlib import Path

import pytest
from tests.attacks.hostile import attack, needs_bwrap, store_rows

from coharden.execution.store import Store
from coharden.instances import LocalInstance
from coharden.schema.verdict import Outcome

pytestmark = needs_bwrap


def test_store_poisoning_through_proc_finds_nothing(make_executor, example: LocalInstance, tmp_path: Path) -> None:
    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store)
    golden = ex.golden_test()
    assert ex.verdict("", golden).outcome is Outcome.FAIL
    before = store_rows(store.path)
    # the attacker is given the store's path (the worst case); the payload touches that store only, so that a
    # run where the sandbox failed to confine it cannot damage any other store on the machine
    assert ex.isolation == "bwrap"
    poison = attack(ex, """\
        def test_repro_poison():
            import glob, sqlite3
            hits = []
            for fd in glob.glob("/proc/*/fd/*"):
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target == STORE:"""
    .replace("STORE", repr(str(store.path.resolve()))) + """
                    try:
                        conn = sqlite3.connect(fd)
                        conn.execute("UPDATE verdicts SET outcome = 'PASS', verdict = replace(verdict, 'FAIL', 'PASS')")
                        conn.commit()
                        hits.append(target)
                    except Exception as exc:
                        hits.append(f"{target}: {exc}")
            print("POISONED", hits)
        """)
    verdict = ex.verdict("", poison)
    assert verdict.isolation == "bwrap"
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert store_rows(store.path)[: len(before)] == before or set(before) <= set(store_rows(store.path))
    assert ex.verdict("", golden).outcome is Outcome.FAIL
    assert any("/proc" in note for note in verdict.tampering)


def test_conftest_forgery_is_flagged(make_executor) -> None:
    ex = make_executor()
    forged = attack(ex, """\
        def test_repro_always_fails():
            assert False, "this test never passes"
        """, extra={"tests/conftest.py": textwrap.dedent("""\
        import pytest


        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            outcome.get_result().outcome = "passed"
        """)})
    verdict = ex.verdict("", forged)
    # in-process code can lie about its own result: what it cannot do is go unnoticed
    assert any("conftest.py" in note for note in verdict.tampering), verdict.tampering
    assert any("pytest_runtest_makereport" in note for note in verdict.tampering)


def test_junit_forgery_with_os_exit_is_not_a_pass(make_executor) -> None:
    ex = make_executor()
    forged = attack(ex, """\
        def test_repro_forge_junit():
            target = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml="))
            with open(target, "w") as handle:
                handle.write('<?xml version="1.0"?><testsuites><testsuite tests="1">'
                             '<testcase classname="tests.test_attack" name="test_repro_forge_junit"/>'
                             '</testsuite></testsuites>')
            os._exit(0)
        """)
    verdict = ex.verdict("", forged)
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert "ended before it finished" in verdict.reason
    assert any("JUnit file exists" in note for note in verdict.tampering), verdict.tampering
    assert any("os._exit" in note for note in verdict.tampering)


def test_timeout_then_a_larger_limit_is_not_served_from_the_cache(make_executor, tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite")
    slow = """\
        def test_repro_slow():
            time.sleep(3)
        """
    ex = make_executor(store, timeout=1)
    assert ex.verdict("", attack(ex, slow)).outcome is Outcome.TIMEOUT
    ex.close()
    again = make_executor(store, timeout=1)
    assert again.verdict("", attack(again, slow)).cached  # the same limit: the stored TIMEOUT holds
    larger = make_executor(store, timeout=15)
    verdict = larger.verdict("", attack(larger, slow))
    assert verdict.outcome is Outcome.PASS
    assert not verdict.cached
    assert verdict.time_limit == 15


REPLACE_OUTPUTS = """\
    def test_repro_replace_outputs():
        junit = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml="))
        targets = [junit, os.path.join(os.path.dirname(junit), "stream.jsonl")]
        out = os.readlink("/proc/self/fd/1")
        if out.startswith("/"):
            targets.append(out)
        for target in targets:
            try:
                os.unlink(target)
            except OSError:
                pass
            KIND
        os._exit(0)
    """


@pytest.mark.parametrize("fork_server", [True, False])
def test_outputs_replaced_by_links_to_host_files_are_not_read(make_executor, tmp_path: Path,
                                                              fork_server: bool) -> None:
    secret = tmp_path / "secret.txt"
    marker = uuid.uuid4().hex
    secret.write_text(f'{{"event": "{marker}"}}\n<testsuites><testcase name="{marker}"/></testsuites>\n')
    ex = make_executor(fork_server=fork_server)
    body = REPLACE_OUTPUTS.replace("KIND", f"os.symlink({str(secret)!r}, target)")
    verdict = ex.verdict("", attack(ex, body))
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert marker not in verdict.model_dump_json()
    assert any("link" in note for note in verdict.tampering), verdict.tampering


@pytest.mark.parametrize("fork_server", [True, False])
def test_outputs_replaced_by_fifos_do_not_hang_the_grader(make_executor, fork_server: bool) -> None:

    ex = make_executor(fork_server=fork_server)
    test = attack(ex, REPLACE_OUTPUTS.replace("KIND", "os.mkfifo(target)"))
    got: list = []
    worker = threading.Thread(target=lambda: got.append(ex.verdict("", test)), daemon=True)
    worker.start()
    worker.join(60)
    assert got, "coharden hangs reading a fifo the test left in place of its output"
    assert got[0].outcome is Outcome.HARNESS_ERROR, got[0].short()


def test_a_junit_directory_swapped_for_a_link_is_not_followed(make_executor, tmp_path: Path) -> None:
    """The JUnit file's own directory (inside the fork server's writable scratch directory) swapped for a link
    to a host directory: nothing is read from there, and cleaning up does not fail or follow it."""
    host = tmp_path / "host"
    host.mkdir()
    marker = uuid.uuid4().hex
    (host / "junit.xml").write_text(f'<testsuites><testsuite><testcase classname="tests.test_attack" '
                                    f'name="test_repro_swap_dir"/></testsuite><!-- {marker} --></testsuites>')
    (host / "keep.txt").write_text("kept")
    ex = make_executor()
    verdict = ex.verdict("", attack(ex, f"""\
        def test_repro_swap_dir():
            junit = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml="))
            directory = os.path.dirname(junit)
            os.rename(directory, directory + ".moved")
            os.symlink({str(host)!r}, directory)
            os._exit(0)
        """))
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert marker not in verdict.model_dump_json()
    assert (host / "keep.txt").read_text() == "kept"
