"""How one test process runs, apart from what it runs (:class:`ProcessOptions`): the options a run site passes down
to the runner that starts the process - pytest's (:func:`~coharden.execution.pytest_runner.run_pytest`), a
log-based runner's (:func:`~coharden.execution.log_runs.run_with`) or a runner script's
(:func:`~coharden.execution.scripts.run_scripts`) - in one value, so that each layer passes them on instead of
naming each again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coharden.execution.sandbox import Confinement

if TYPE_CHECKING:
    from coharden.execution.run_site import ForkServer


@dataclass(frozen=True)
class ProcessOptions:
    """``python``: the interpreter (None: the settings' environment's); ``env``: the job's environment over the
    tests' own allow-list; ``confine``: the sandbox of a fresh process (a server's is fixed when it starts);
    ``time_limit``: this run's limit (a mutant's, scaled from the test's own run; None: the settings' timeout);
    ``server``: a warm fork server that may run it as a fork, with ``warm`` the project modules it may keep
    imported (``WarmPlan.spec``).

    pytest's only: ``extra_args`` after the settings' own; ``image``: run inside this Docker image instead;
    ``first_failure``: stop at the first failing test (only pass / fail is wanted); ``collect``: the name of the
    run's test state, for a server that collects once, and ``instrument`` the plugin an instrumented run loads
    into a fork of that collection (:meth:`ForkServer.run`). A log-based runner's only: ``select``, see
    :meth:`~coharden.execution.runners.Runner.command`."""

    python: str | None = None
    env: Mapping[str, str] | None = None
    confine: Confinement | None = None
    time_limit: float | None = None
    server: ForkServer | None = None
    warm: dict | None = None
    extra_args: Sequence[str] = ()
    image: str | None = None
    first_failure: bool = False
    collect: str | None = None
    instrument: dict | None = None
    select: bool = False
