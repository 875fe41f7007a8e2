"""What the instances of one loop run share (:class:`LoopRun`): handed by the runner (or the demo) to each
instance's loop, so that the run's parts travel as one value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coharden.config import Settings
from coharden.execution.store import Store
from coharden.llm import Ledger
from coharden.loop.config import LoopConfig
from coharden.loop.progress import ProgressCallback


@dataclass(frozen=True)
class LoopRun:
    """One run of the loop over its instances: the settings and the method (``config``), where it writes
    (``output``; its rounds file is named for ``name``, by default the method), the verdict store and the LLM
    ledger its instances share, the tests injected per instance id (fix-with-test) and who hears every phase of
    every round (see :class:`~coharden.loop.progress.LoopProgress`; called from worker threads)."""

    settings: Settings
    config: LoopConfig
    output: Path
    name: str = ""
    """The run's name: its rounds file and its predictions' ``model_name_or_path`` (default: the method)."""
    store: Store | None = None
    ledger: Ledger | None = None
    injected: Mapping[str, str] = field(default_factory=dict)
    """Instance id -> the test injected there (the fix-with-test method)."""
    progress: ProgressCallback | None = None

    @property
    def run_name(self) -> str:
        return self.name or self.config.method.value
