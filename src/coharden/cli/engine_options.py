"""The engine option group: ``--executor`` and ``--address``, where a command's batch jobs run
(:class:`EngineOptions`, declared with :func:`engine_options`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from coharden.cli.options import F, option_group

if TYPE_CHECKING:
    from coharden.execution.engine import Engine


# --- the engine group -----------------------------------------------------------------------------------------

ENGINES = ("local", "ray")


def _engine_name(value: str) -> str:
    if value not in ENGINES:
        raise typer.BadParameter(f"{value!r} (known: {', '.join(ENGINES)})")
    return value


ExecutorOpt = Annotated[str, typer.Option("--executor", callback=_engine_name, help="Where jobs run: local, or ray "
                                          "(one job per instance, on a Ray cluster).")]
AddressOpt = Annotated[str | None, typer.Option("--address", help="Ray cluster address (--executor ray).")]


@dataclass(frozen=True)
class EngineOptions:
    """``--executor`` and ``--address``: where a command's batch jobs run (checked when parsed)."""

    executor: str = "local"
    address: str | None = None

    @property
    def local(self) -> bool:
        return self.executor == "local"

    def engine(self, workers: int, on_interrupt: Callable[[int], None] | None = None) -> Engine:
        """The engine the jobs run on (close it when done)."""
        from coharden.execution.engine import make_engine

        return make_engine(self.executor, workers=workers, address=self.address, on_interrupt=on_interrupt)


#: ``command`` declares ``engine: EngineOptions = EngineOptions()`` and gets --executor and --address there.
def engine_options(param: str = "engine") -> Callable[[F], F]:
    return option_group(EngineOptions, {"executor": ExecutorOpt, "address": AddressOpt}, param)


