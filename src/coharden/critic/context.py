"""What the built-in detectors need beyond ``(events, git_patch)``: the phase, the instance, an executor.

A user's detector sees only ``detect(events, git_patch)``. A detector whose ``detect`` takes a third
parameter receives the :class:`CriticContext` (the built-in skills do), so one skill format serves both.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from types import TracebackType

from coharden.config import DEFAULT_TEST_PATTERNS, Settings
from coharden.errors import CoHardenError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.workspace import Workspace
from coharden.patches import touched_files
from coharden.schema.instance import Instance
from coharden.schema.testpatch import TestPatch


class Mode(StrEnum):
    """What the agent may change: only tests, only source, or both."""

    TEST_ONLY = "test-only"
    FIX_ONLY = "fix-only"
    JOINT = "joint"


class CriticContext:
    """The phase and, when known, the instance, an executor for real verdicts and the reference patches.

    ``reference_fix`` is the fix a test-only submission is checked against (F→P); ``reference_test`` the test a
    fix-only submission must pass. Both default to the instance's golden patches. Owns what it opens: use it
    as a context manager (or call :meth:`close`).
    """

    def __init__(
        self,
        mode: Mode | str,
        *,
        instance: Instance | None = None,
        repo: Path | None = None,
        settings: Settings | None = None,
        executor: InstanceExecutor | None = None,
        reference_fix: str | None = None,
        reference_test: TestPatch | str | None = None,
    ) -> None:
        self.mode = Mode(mode)
        self.instance = instance if instance is not None else (executor.instance if executor else None)
        self.settings = settings if settings is not None else (executor.settings if executor else None)
        self.repo = repo if repo is not None else (executor.workspace.source if executor else None)
        self._executor = executor
        self._owns_executor = False
        self._workspace: Workspace | None = None
        inst = self.instance
        self.reference_fix = reference_fix if reference_fix is not None else (inst.patch if inst else None) or None
        self._reference_test = reference_test

    @classmethod
    def for_instance(cls, mode: Mode | str, instance: Instance, repo: Path, settings: Settings,
                     **kwargs: object) -> CriticContext:
        """A context that builds its own :class:`InstanceExecutor` on first need."""
        return cls(mode, instance=instance, repo=repo, settings=settings, **kwargs)  # type: ignore[arg-type]

    @property
    def test_patterns(self) -> list[str]:
        return list(self.settings.tests.test_patterns) if self.settings else list(DEFAULT_TEST_PATTERNS)

    @property
    def can_run_tests(self) -> bool:
        """Whether an executor exists or can be built (instance, repository and settings are known)."""
        return self._executor is not None or (
            self.instance is not None and self.repo is not None and self.settings is not None)

    @property
    def has_reference_test(self) -> bool:
        ref = self._reference_test
        if isinstance(ref, TestPatch) or (isinstance(ref, str) and ref.strip()):
            return True
        return self.instance is not None and bool(self.instance.test_patch.strip())

    @property
    def executor(self) -> InstanceExecutor | None:
        """The executor for real verdicts (created lazily from instance + repo + settings), or None."""
        if self._executor is None and self.instance is not None and self.repo is not None and self.settings:
            self._executor = InstanceExecutor(self.instance, self.repo, self.settings)
            self._owns_executor = True
        return self._executor

    def reference_test(self) -> TestPatch | None:
        """The test a fix-only submission must pass: the given one, else the instance's golden test."""
        ref = self._reference_test
        if isinstance(ref, TestPatch):
            return ref
        executor = self.executor
        if executor is None:
            return None
        if isinstance(ref, str) and ref.strip():
            self._reference_test = executor.test_patch(ref, name="reference")
        elif self.instance is not None and self.instance.test_patch.strip():
            self._reference_test = executor.golden_test()
        else:
            return None
        return self._reference_test

    def post_images(self, patch: str) -> dict[str, str | None]:
        """Content of each file ``patch`` touches after ``git apply`` on a clean base checkout.

        Raises :class:`~coharden.errors.ApplyError` / :class:`~coharden.errors.PatchError` when it does not
        apply / parse. Uses the executor's workspace, else a throwaway clone of ``repo`` at the base commit.
        """
        executor = self.executor
        if executor is not None:
            return executor.post_images(patch)
        if self._workspace is None:
            if self.repo is None or self.instance is None:
                raise CoHardenError("the critic context has no repository to apply the patch to")
            self._workspace = Workspace(self.repo, self.instance.base_commit)
            self._workspace.open()
        ws = self._workspace
        ws.reset()
        try:
            ws.apply(patch)
            return {path: ws.read(path) for path in touched_files(patch)}
        finally:
            ws.reset()

    def close(self) -> None:
        if self._owns_executor and self._executor is not None:
            self._executor.close()
            self._executor = None
        if self._workspace is not None:
            self._workspace.close()
            self._workspace = None

    def __enter__(self) -> CriticContext:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
