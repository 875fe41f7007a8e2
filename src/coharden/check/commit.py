"""A commit (or a range) of the user's repository read as an MPE instance: its test-file changes are the
candidate test, its other changes the fix, its parent (the merge base for ``BASE..HEAD``) the buggy code.

Only git reads the repository here (``rev-parse``, ``diff``, ``status``): nothing in the user's checkout is
written, and the tests later run in throwaway clones of the commit (:mod:`coharden.execution.workspace`), so
uncommitted files are neither changed nor seen."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coharden.config import RunnerName
from coharden.errors import CoHardenError, RepoError
from coharden.execution.git import check_repo, git, show_file
from coharden.execution.testids import contributed_ids, test_defs
from coharden.patches import file_path, parse, split_patch, touched_files
from coharden.schema.instance import Instance


class CheckError(CoHardenError):
    """A commit that cannot be checked, said in one line (not a repository, no test change, a merge, ...)."""


#: ``git diff`` with no user configuration that changes its shape (external diff tools, prefixes, colour,
#: renames: each file diff names one path, as :func:`coharden.patches.split_patch` expects).
_DIFF = ["-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false", "diff", "--no-color", "--no-ext-diff",
         "--no-renames", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/"]


#: Directories whose files document a change (news fragments, changelogs, the manual), and the suffixes of a
#: top-level file that does (``AUTHORS``, ``CHANGES.rst``, ``README.md``).
DOC_DIRS = frozenset({"changelog", "changelog.d", "changes", "doc", "docs", "news", "newsfragments"})
DOC_SUFFIXES = frozenset({"", ".rst", ".md", ".txt", ".adoc"})


def is_documentation(path: str) -> bool:
    """A file that documents the change and that no test imports: under a documentation directory, or a
    top-level text file. A file inside the project's packages (a data file) is never one."""
    parts = Path(path).parts
    if len(parts) > 1:
        return parts[0].lower() in DOC_DIRS
    return Path(path).suffix.lower() in DOC_SUFFIXES


def split_documentation(fix: str) -> tuple[str, str]:
    """(code, documentation) parts of a fix. Documentation is left out of the check: a mutant that drops a news
    fragment is no wrong fix (it behaves as the fix does), yet the test could never reject it."""
    code: list[str] = []
    docs: list[str] = []
    for patched in parse(fix):
        (docs if is_documentation(file_path(patched)) else code).append(str(patched))
    return "".join(code), "".join(docs)


@dataclass(frozen=True)
class Reference:
    """The test a check compares with: what ``--reference`` said (a patch file or a revision), its name in the
    report, and its test patch."""

    given: str
    name: str
    text: str


@dataclass(frozen=True)
class CommitChange:
    """What one check reads from the repository."""

    repo: Path
    rev: str
    """The revision as given (``HEAD``, a sha, ``BASE..HEAD``)."""
    head: str
    """The sha of the checked commit (a range's tip)."""
    base: str
    """The buggy code: the commit's parent, or a range's merge base."""
    fix: str
    test: str
    dirty: bool
    """The worktree has uncommitted changes (they are left alone and not checked)."""
    subject: str = ""
    docs: str = ""
    """The commit's documentation changes (:func:`is_documentation`): neither mutated nor applied."""

    @property
    def short(self) -> str:
        return self.head[:12]

    @property
    def fix_files(self) -> list[str]:
        return touched_files(self.fix)

    @property
    def test_files(self) -> list[str]:
        return touched_files(self.test)

    @property
    def doc_files(self) -> list[str]:
        return touched_files(self.docs)


def repository(where: Path) -> Path:
    """The top level of the git repository ``where`` is in, or a one-line :class:`CheckError`."""
    try:
        return check_repo(where)
    except RepoError as exc:
        raise CheckError(f"{where}: not a git repository (run coharden check inside one)") from exc


def _resolve(repo: Path, rev: str, what: str) -> str:
    proc = git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], repo, check=False)
    if proc.returncode != 0:
        raise CheckError(f"{what}: {rev!r} is no commit of {repo}")
    return proc.stdout.strip()


def commit_range(repo: Path, rev: str) -> tuple[str, str]:
    """(base, head) of ``rev``: a commit and its one parent, or ``BASE..HEAD`` (``...`` alike) and their merge
    base. A merge commit or a root commit is a :class:`CheckError` (a merge has no one buggy parent)."""
    if ".." in rev:
        left, _, right = rev.replace("...", "..").partition("..")
        tip = _resolve(repo, right or "HEAD", "REV")
        start = _resolve(repo, left or "HEAD", "REV")
        proc = git(["merge-base", start, tip], repo, check=False)
        if proc.returncode != 0:
            raise CheckError(f"{rev}: the two ends have no common ancestor")
        base = proc.stdout.strip()
        if base == tip:
            raise CheckError(f"{rev}: the range holds no commit ({right or 'HEAD'} is already in {left or 'HEAD'})")
        return base, tip
    head = _resolve(repo, rev, "REV")
    parents = git(["rev-list", "--parents", "-n", "1", head], repo).stdout.split()[1:]
    if not parents:
        raise CheckError(f"{rev}: a root commit has no parent to hold the bug; check a later commit")
    if len(parents) > 1:
        raise CheckError(f"{rev}: is a merge commit (no one parent holds the bug); check the branch as a range, "
                         f"e.g. coharden check {parents[0][:12]}..{head[:12]}")
    return parents[0], head


def read_change(where: Path, rev: str, test_patterns: Sequence[str]) -> CommitChange:
    """The fix and the test of ``rev`` in the repository ``where`` is in; one clear :class:`CheckError` when
    there is nothing to check."""
    repo = repository(where)
    base, head = commit_range(repo, rev)
    diff = git([*_DIFF, base, head, "--"], repo).stdout
    if not diff.strip():
        raise CheckError(f"{rev}: changes no file")
    fix, test = split_patch(diff, test_patterns)
    patterns = ", ".join(test_patterns)
    if not test.strip():
        raise CheckError(f"{rev}: changes no test file (test files: {patterns}; --tests GLOB names yours), so "
                         "there is no regression test to check")
    if not fix.strip():
        raise CheckError(f"{rev}: changes only test files ({', '.join(touched_files(test))}): there is no fix to "
                         "mutate")
    fix, docs = split_documentation(fix)
    if not fix.strip():
        raise CheckError(f"{rev}: changes only test files and documentation ({', '.join(touched_files(docs))}): "
                         "there is no fix to mutate")
    status = git(["status", "--porcelain", "--untracked-files=no"], repo).stdout
    subject = git(["log", "-1", "--format=%s", head], repo).stdout.strip()
    return CommitChange(repo=repo, rev=rev, head=head, base=base, fix=fix, test=test, dirty=bool(status.strip()),
                        subject=subject, docs=docs)


def test_part(repo: Path, rev: str, test_patterns: Sequence[str]) -> str:
    """The test-file changes of ``rev`` (a commit or a range), e.g. a reference test kept on another branch."""
    base, head = commit_range(repo, rev)
    _, test = split_patch(git([*_DIFF, base, head, "--"], repo).stdout, test_patterns)
    if not test.strip():
        raise CheckError(f"--reference: {rev} changes no test file")
    return test


def detect_runner(repo: Path, commit: str) -> RunnerName:
    """The runner the repository's own layout asks for: Django's ``tests/runtests.py``, sympy's ``bin/test``,
    else pytest (which also runs unittest tests)."""
    if show_file(repo, commit, "tests/runtests.py") is not None and show_file(repo, commit, "django/__init__.py"):
        return "django"
    if show_file(repo, commit, "bin/test") is not None and show_file(repo, commit, "sympy/__init__.py"):
        return "sympy"
    return "pytest"


def instance_of(change: CommitChange) -> Instance:
    """The MPE instance of a commit: the repository path, the parent as base commit, the fix and the test (its
    FAIL_TO_PASS left to the tests the change adds or changes). Its PASS_TO_PASS are the other tests of the
    commit's test files, so a mutant that breaks one of them is implausible: a wrong fix a developer would not
    commit, since the test files' own tests show it."""
    files = {path: (show_file(change.repo, change.base, path), show_file(change.repo, change.head, path))
             for path in change.test_files}
    changed = set(contributed_ids(files))
    others = [f"{path}::{name}" for path, (_, after) in sorted(files.items()) if after is not None
              for name in test_defs(after, path) if f"{path}::{name}" not in changed]
    return Instance(instance_id=f"{change.repo.name}@{change.short}", repo=str(change.repo), base_commit=change.base,
                    problem_statement=change.subject, patch=change.fix, test_patch=change.test,
                    PASS_TO_PASS=others)
