"""A (fix, test) pair as whole files (:class:`PairState`): what the refinement critic is shown and may edit, and
the patches rebuilt from its edits. Apart from the loop (:mod:`coharden.overfit.refine`), so that the critic's
prompt (:mod:`coharden.overfit.critic_prompt`) reads a pair without importing the loop that imports the prompt."""

from __future__ import annotations

import copy

from coharden.execution.executor import InstanceExecutor
from coharden.mutation.context import FileChange
from coharden.patches import make_patch, touched_files


class PairState:
    """A pair as whole files: the files the fix and the test leave behind (what the critic may edit), their base
    content, and the files each side deletes (still deleted when a side's patch is rebuilt after an edit)."""

    def __init__(self, executor: InstanceExecutor, fix: str, test: str) -> None:
        self.fix, self.test = fix, test
        self.base: dict[str, str | None] = {}
        self.fix_files, self.fix_deleted = self._files(executor, fix)
        self.test_files, self.test_deleted = self._files(executor, test)

    def _files(self, executor: InstanceExecutor, patch: str) -> tuple[dict[str, str], list[str]]:
        post = executor.post_images(patch) if patch.strip() else {}
        files: dict[str, str] = {}
        deleted: list[str] = []
        for path in touched_files(patch):
            self.base[path] = executor.base_file(path)
            if post.get(path) is None:
                deleted.append(path)
            else:
                files[path] = post[path] or ""
        return files, deleted

    def changes(self) -> list[FileChange]:
        return [FileChange(p, self.base.get(p) or "", c) for p, c in sorted(self.fix_files.items())]

    def _patch(self, files: dict[str, str], deleted: list[str]) -> str:
        return make_patch([*((p, self.base.get(p), c) for p, c in files.items()),
                           *((p, self.base.get(p), None) for p in deleted)])

    def with_edits(self, fix_files: dict[str, str], test_files: dict[str, str]) -> PairState:
        """A new state with these file contents; an unchanged side keeps its patch text byte for byte (so its
        cached verdicts and coverage runs are reused)."""
        clone = copy.copy(self)
        clone.fix_files, clone.test_files = fix_files, test_files
        if fix_files != self.fix_files:
            clone.fix = self._patch(fix_files, self.fix_deleted)
        if test_files != self.test_files:
            clone.test = self._patch(test_files, self.test_deleted)
        return clone
