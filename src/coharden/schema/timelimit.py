"""The time limit of one test run, decided in one place.

A run is asked for a limit (a mutant's, scaled from the test's own run on the fixed code by
:meth:`MPEConfig.mutant_limit <coharden.schema.mpe_config.MPEConfig.mutant_limit>`, as mutmut scales it) or
none (the run-wide ``timeout``). :meth:`TimeLimit.of` clamps it to the timeout and derives, side by side, the
CPU-time and wall-clock limits of the process; the verdict carries the limit and whether it bounded CPU time
(``Verdict.time_limit``, ``Verdict.cpu_time_limit``), which is what a stored TIMEOUT is judged by when reused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LOAD_MARGIN = 2.0
"""A scaled limit bounds a run's CPU time; the wall clock, for a test that hangs asleep, allows this many times
the limit (a slow run on a loaded machine is then not a TIMEOUT in one run and a PASS in the next)."""


@dataclass(frozen=True)
class TimeLimit:
    """``limit``: the run's time limit in seconds (what the verdict records); ``scaled``: it is below the
    timeout and bounds CPU time; ``cpu``: the CPU-time rlimit; ``wall``: the wall-clock limit."""

    limit: float
    scaled: bool
    cpu: int
    wall: float

    @classmethod
    def of(cls, requested: float | None, *, timeout: float, cpu_seconds: int | None = None,
           docker: bool = False) -> TimeLimit:
        """The limits of a run asked for ``requested`` seconds (None: ``timeout``), at most ``timeout``.
        ``cpu_seconds`` (the setting) replaces the CPU limit and keeps every limit a wall-clock one; so does a
        run in Docker (no rlimit of ours inside the container)."""
        limit = min(requested or timeout, timeout)
        scaled = requested is not None and limit < timeout and not cpu_seconds and not docker
        cpu = cpu_seconds or (math.ceil(limit) if scaled else int(limit * 2) + 1)
        wall = min(timeout, limit * LOAD_MARGIN) if scaled else limit
        return cls(limit=limit, scaled=scaled, cpu=cpu, wall=wall)
