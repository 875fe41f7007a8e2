"""What an instance's fork server may keep imported between runs (:class:`WarmPlan`, ``Settings.warm_imports``):
the spec a run hands the server (its modules, the files its patches touch, whether the checkout is the base
commit's), and the project modules the golden test files import, which are kept warm too. The server side
is :mod:`coharden.execution.fast.warm`."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from coharden import pysource
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.patches import file_path, is_test_path, parse, touched_files
from coharden.schema.testpatch import TestPatch


@dataclass
class WarmPlan:
    """The warm imports of one instance. ``enabled``: warm imports are set and the runs are the pytest
    runner's in local processes; ``key``: names the state the server imported (base commit, environment);
    ``golden_patch`` and ``base_file`` (a path's content at the base commit): where the test imports are read."""

    settings: Settings
    enabled: bool
    key: str
    golden_patch: str
    base_file: Callable[[str], str | None]
    _test_modules: list[str] | None = field(default=None, init=False, repr=False)

    def spec(self, source_patch: str, tests: Sequence[TestPatch]) -> dict | None:
        """What the fork server may keep imported for a run of ``tests`` on ``source_patch`` (None: nothing):
        ``Settings.warm_imports``, with the files the patches touch (a warm module loaded from one of them is
        never used) and whether the checkout is the base commit's outside test files (only then may the server
        import the project itself)."""
        if not self.enabled:
            return None
        volatile = set(touched_files(source_patch))
        base = not source_patch.strip()
        for test in tests:
            paths = set(test.files) or set(touched_files(test.patch))
            volatile |= paths
            base = base and all(is_test_path(p, self.settings.tests.test_patterns) for p in paths)
        optional = self.test_imports()
        return {"modules": list(self.settings.server.warm_imports), "optional": optional,
                "key": f"{self.key} {' '.join(optional)}", "volatile": sorted(volatile), "base": base}

    def test_imports(self) -> list[str]:
        """The project's modules the instance's golden test files import (``sympy.physics.units`` beside
        ``sympy``): warm too, so a fix outside what ``import sympy`` loads still starts warm. From the golden
        test patch only, so the set - and the server's state - is the same for every run of the instance."""
        if self._test_modules is None:
            sources: list[str] = []
            try:  # read without touching the checkout (a run may have laid it out already)
                for patched in parse(self.golden_patch) if self.golden_patch.strip() else []:
                    path = file_path(patched)
                    if path.endswith(".py"):
                        sources.append(self.base_file(path) or "")
                        sources += [line.value.strip() for hunk in patched for line in hunk if line.is_added]
            except CoHardenError:
                pass
            self._test_modules = project_imports(sources, {m.split(".")[0] for m in self.settings.server.warm_imports})
        return self._test_modules


def project_imports(sources: Sequence[str], tops: set[str]) -> list[str]:
    """Absolute imports of modules under the ``tops`` packages in ``sources`` (whole files, or single lines
    that parse alone), in the order the sources name them, test modules left out; a source that does not parse
    gives nothing."""
    found: dict[str, None] = {}
    for source in sources:
        try:
            tree = pysource.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                parts = name.split(".")
                if parts[0] in tops and len(parts) > 1 and not any(p == "tests" or p.startswith("test_")
                                                                  for p in parts):
                    found[name] = None
    return list(found)
