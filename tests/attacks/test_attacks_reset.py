"""Hostile tests against the worktree between runs: the fix in the repository's later history, bytecode and git
attributes planted for the next checkout, a locked worktree; nothing a test leaves survives the reset.

Each attack is a real test patch for ``examples/printer_brackets`` run in the real sandbox; the assertions look at
the host (the store, the user's checkout, ``$HOME``, ``/tmp``, the process table).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.attacks.hostile import attack, needs_bwrap, store_rows

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.git import git
from coharden.execution.store import Store
from coharden.instances import LocalInstance
from coharden.patches import make_patch
from coharden.schema.verdict import Outcome

pytestmark = needs_bwrap


# --- the fix in the repository's later history (issue 32, item 4) ------------------------------------------------
def test_the_fix_committed_after_the_base_is_not_in_the_worktrees_objects(tmp_path: Path) -> None:
    """As in every SWE-bench clone, the repository holds the commits after the instance's base, the fix among
    them. A test (and an agent) lists every object git can reach from its worktree, the alternates included:
    the fixed file's content is not among them, while git in the worktree still works on the base commit."""
    from tests.conftest import make_repo, run_git

    from coharden.agent import AgentTask, ExternalCommandAgent
    from coharden.critic import PassCritic
    from coharden.execution.workspace import Workspace
    from coharden.schema.instance import Instance

    repo, base = make_repo(tmp_path / "repo", {"calc.py": "def half(x):\n    return x // 2\n",
                                               "tests/test_calc.py": "from calc import half\n"})
    (repo / "calc.py").write_text("def half(x):\n    return x / 2  # FIXED-UPSTREAM\n")
    run_git(repo, "commit", "--quiet", "--no-gpg-sign", "-am", "the fix")
    dump = textwrap.dedent("""\
        import subprocess


        def test_repro_history():
            listed = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch-check"], capture_output=True,
                                    text=True).stdout.split()
            blobs = [subprocess.run(["git", "cat-file", "-p", sha], capture_output=True, text=True).stdout
                     for sha in listed[::3]]
            status = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True)
            assert False, f"OBJECTS {len(listed) // 3} STATUS {status.returncode} " + repr(blobs)
        """)
    settings = Settings(timeout=30, cache_dir=tmp_path / "cache", workers=1)
    instance = Instance(instance_id="calc__half", repo=str(repo), base_commit=base, patch="", test_patch="",
                        problem_statement="half")
    with InstanceExecutor(instance, repo, settings, None) as ex:
        probe = ex.test_patch(make_patch([("tests/test_history.py", None, dump)]), name="probe")
        verdict = ex.verdict("", probe)
    assert verdict.outcome is Outcome.FAIL, verdict.short()
    assert "OBJECTS " in verdict.reason
    assert "STATUS 0" in verdict.reason, verdict.reason
    assert "x // 2" in verdict.reason  # the base commit's files are there
    assert "FIXED-UPSTREAM" not in verdict.reason

    agent = ExternalCommandAgent("for o in $(git cat-file --batch-all-objects --batch-check | cut -d' ' -f1); "
                                 "do git cat-file -p $o; done; git status --short", timeout=60)
    with Workspace(repo, base) as ws:
        result = agent.run(AgentTask(problem_statement="half"), ws, "test-only", PassCritic())
    output = next(e for e in result.events if e["kind"] == "observation")["output"]
    assert "x // 2" in output
    assert "FIXED-UPSTREAM" not in output


PLANT_BYTECODE = """\
    def test_repro_plant_bytecode():
        import importlib.util, marshal, subprocess
        source = os.path.join("tinyexpr", "printer.py")
        code = compile(open(source).read() + "\\nStrPrinter._print_Div = lambda self, e: 'PLANTED'\\n",
                       os.path.abspath(source), "exec")
        cache = os.path.join("tinyexpr", "__pycache__")
        os.makedirs(cache, exist_ok=True)
        # an unchecked hash-based .pyc (PEP 552): the interpreter loads it without looking at the source
        with open(os.path.join(cache, f"printer.{sys.implementation.cache_tag}.pyc"), "wb") as handle:
            handle.write(importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + b"\\0" * 8
                         + marshal.dumps(code))
        # a nested repository: git clean -fdx skips it (a second -f is needed)
        subprocess.run(["git", "init", "-q", cache], check=True)
    """


def test_bytecode_planted_in_a_nested_repository_does_not_survive_the_reset(make_executor,
                                                                              example: LocalInstance) -> None:
    ex = make_executor()
    assert ex.verdict("", attack(ex, PLANT_BYTECODE)).outcome is Outcome.PASS
    golden = ex.golden_test()
    verdict = ex.verdict(example.instance.patch, golden)
    assert verdict.outcome is Outcome.PASS, verdict.short() + verdict.output_tail
    assert not (ex.workspace_root() / "tinyexpr" / "__pycache__").exists()


def test_git_attributes_planted_by_a_test_do_not_rewrite_the_next_checkout(make_executor, example: LocalInstance,
                                                                           tmp_path: Path) -> None:
    """A ``.gitattributes`` left in the worktree made the next reset write CRLF line endings (and ``ident``
    expand ``$Id$``): the golden fix then did not apply, and that APPLY_ERROR was stored for the golden test."""
    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store)
    golden = ex.golden_test()  # made before the attack (laying a test patch down resets twice, which hid it)
    planted = attack(ex, """\
        def test_repro_plant_attributes():
            for directory in ("tinyexpr", "tests"):
                with open(os.path.join(directory, ".gitattributes"), "w") as handle:
                    handle.write("*.py text eol=crlf working-tree-encoding=UTF-16\\n")
            with open(os.path.join("tinyexpr", "printer.py"), "a") as handle:
                handle.write("# changed, so that the reset writes it again\\n")
            with open(".gitattributes", "a") as handle:  # the root one too (untracked here)
                handle.write("*.py text eol=crlf\\n")
        """)
    assert ex.verdict("", planted).outcome is Outcome.PASS
    verdict = ex.verdict(example.instance.patch, golden)
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert "APPLY_ERROR" not in str(store_rows(store.path))
    ex.verdict("", planted)
    ex.workspace.reset()
    root = ex.workspace_root()
    assert git(["status", "--porcelain", "--ignored"], root).stdout == ""
    assert (root / "tinyexpr" / "printer.py").read_text() == ex.base_file("tinyexpr/printer.py")


def test_a_worktree_locked_by_a_test_is_reset_all_the_same(make_executor, example: LocalInstance) -> None:
    """A test runs as the same user as coharden: directories it makes unwritable or unreadable must not stop the
    reset (a RepoError for every later run) nor keep what they hold."""
    ex = make_executor()
    locked = attack(ex, """\
        def test_repro_lock():
            os.makedirs("junk/deep", exist_ok=True)
            open("junk/deep/left.py", "w").write("x = 1\\n")
            os.chmod("junk/deep", 0)
            os.chmod("junk", 0o500)
            with open(os.path.join("tinyexpr", "printer.py"), "a") as handle:
                handle.write("# changed\\n")
            os.chmod("tinyexpr", 0o500)
        """)
    assert ex.verdict("", locked).outcome is Outcome.PASS
    verdict = ex.verdict(example.instance.patch, ex.golden_test())
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert not (ex.workspace_root() / "junk").exists()


def test_an_apply_error_after_another_test_is_checked_on_a_fresh_checkout(make_executor, example: LocalInstance,
                                                                        tmp_path: Path, monkeypatch) -> None:
    """Whatever a reset misses, an APPLY_ERROR is stored only when a fresh checkout gives it too."""
    from coharden.execution import workspace as workspace_module

    store = Store(tmp_path / "store" / "store.sqlite")
    ex = make_executor(store)
    assert ex.verdict("", ex.golden_test()).outcome is Outcome.FAIL
    real_reset = workspace_module.Workspace.reset

    def leaky_reset(self) -> None:  # a reset that some future trick defeats: it leaves printer.py changed
        if not self._dirty:
            return
        real_reset(self)
        target = self.root / "tinyexpr" / "printer.py"
        target.write_text(target.read_text().replace("den = self.parenthesize", "den  = self.parenthesize"))

    monkeypatch.setattr(workspace_module.Workspace, "reset", leaky_reset)
    verdict = ex.verdict(example.instance.patch, ex.golden_test())
    assert verdict.outcome is Outcome.PASS, verdict.short()
    assert "APPLY_ERROR" not in str(store_rows(store.path))


def test_bytecode_a_test_writes_does_not_reach_the_next_run(make_executor) -> None:
    """A test that turns bytecode writing back on and compiles the project leaves nothing for the next run:
    the reset before it removes every ``__pycache__`` of the checkout, and pytest's cache is never written."""
    ex = make_executor()
    probe = attack(ex, """\
        def test_repro_caches():
            import py_compile
            sys.dont_write_bytecode = False
            py_compile.compile("tinyexpr/expr.py", doraise=True)
            assert os.path.isdir(os.path.join("tinyexpr", "__pycache__"))
        """)
    verdict = ex.verdict("", probe)
    assert verdict.outcome is Outcome.PASS, verdict.short() + verdict.output_tail
    assert ex.verdict("", ex.golden_test()).outcome is Outcome.FAIL  # the next run, on a reset checkout
    root = ex.workspace_root()
    assert not list(root.rglob("__pycache__"))
    assert not (root / ".pytest_cache").exists()
