"""Where a command's batch jobs run: the config's ``engine`` section (``-c engine.executor=ray``,
``-c engine.address=...``; the old ``--executor`` / ``--address`` flags still read, see :func:`engine_options`),
as :class:`EngineOptions`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coharden.cli.command import Renamed, renamed_flags
from coharden.cli.options import F

if TYPE_CHECKING:
    from coharden.config import Settings
    from coharden.execution.engine import Engine


@dataclass(frozen=True)
class EngineOptions:
    """The executor (local, ray) and the Ray address of a run."""

    executor: str = "local"
    address: str | None = None

    @classmethod
    def of(cls, settings: Settings) -> EngineOptions:
        return cls(settings.engine.executor, settings.engine.address)

    @property
    def local(self) -> bool:
        return self.executor == "local"

    def engine(self, workers: int, on_interrupt: Callable[[int], None] | None = None) -> Engine:
        """The engine the jobs run on (close it when done)."""
        from coharden.execution.engine import make_engine

        return make_engine(self.executor, workers=workers, address=self.address, on_interrupt=on_interrupt)


#: The old flags of the engine keys (read for one more release, as ``-c engine.KEY=VALUE``).
ENGINE_RENAMED = (Renamed("--executor", "engine.executor"), Renamed("--address", "engine.address"))


def engine_options() -> Callable[[F], F]:
    """``command`` reads ``--executor`` and ``--address`` as ``-c engine.executor=...``, ``-c engine.address=...``
    (its body takes :meth:`EngineOptions.of` its settings)."""
    return renamed_flags(*ENGINE_RENAMED)
