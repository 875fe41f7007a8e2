"""An executor's second lane (:class:`SecondLane`): a second workspace and fork server, so that two test patches
that must run in separate processes run at once, where a core is free for the second one."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from coharden.config import Settings
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Verdict


class LaneRunner(Protocol):
    """What runs one test process's worth of tests (the instance executor)."""

    runs: int

    def run_process(self, source_patch: str, tests: list[TestPatch], limits: list[float], combine: bool,
                    first_failure: bool = False) -> tuple[dict[int, Verdict], list[int]]: ...

    def close(self) -> None: ...


def second_lane_wanted(settings: Settings) -> bool:
    """Whether separate test processes may run two at once: asked for (``test_lanes``) and a core is free for the
    second one. With a worker per core the lane only doubles the processes per core and starts a second fork
    server per worker that must import the project again (measured on sympy-24066, 2 cores: MPE with 2 workers
    took 17.6 s with lanes, 13.3 s without)."""
    return settings.server.test_lanes > 1 and settings.workers * 2 <= (os.cpu_count() or 1)


class SecondLane:
    """The second lane of one executor, made on first use by ``make``; ``runner`` is the lane's executor."""

    def __init__(self, make: Callable[[], LaneRunner]) -> None:
        self._make = make
        self.runner: LaneRunner | None = None
        # one thread runs the lane's tests beside the executor's (its sandbox is started from the
        # process-lifetime spawner thread, so this thread's life does not matter to it)
        self._thread: ThreadPoolExecutor | None = None

    def run_two(self, mine: LaneRunner, source_patch: str, tests: Sequence[TestPatch], limits: Sequence[float],
                first_failure: bool = False) -> tuple[dict[int, Verdict], list[int], int]:
        """The first two of ``tests`` at once, each alone in its own process: the first by ``mine`` (the
        executor, in its own workspace), the second in this lane. Returns (verdicts by index, the indices left
        for later, the processes the lane started)."""
        if self.runner is None:
            self.runner = self._make()
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coharden-lane")
        lane = self.runner
        assert self._thread is not None
        before = lane.runs
        other = self._thread.submit(lane.run_process, source_patch, [tests[1]], [limits[1]], False, first_failure)
        try:
            ran, _ = mine.run_process(source_patch, [tests[0]], [limits[0]], False, first_failure)
        finally:
            theirs, _ = other.result()
        ran = {**ran, **({1: theirs[0]} if 0 in theirs else {})}
        return ran, list(range(2, len(tests))), lane.runs - before

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None
