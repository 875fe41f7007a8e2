"""Recordings and pool building started with MPE, so that they overlap the F->P checks.

The input recorder runs each test on the fixed code, then on the buggy code with the fixed code's inputs as
probes: two test runs one after the other that only the pool needs. On two workers, :class:`EarlyRecording`
starts them as soon as MPE starts: the fixed-code recording runs beside the first F->P check, the buggy-code
recording beside the second, and the pool finds both done. The recordings are those :func:`record_calls` makes
for the same arguments (it is what runs them), so results do not change; a recording the pool asks for with
other arguments is made then. When the candidate turns out not to be fail-to-pass, the recordings were spent
for nothing: that costs at most one test run of wall time, against one saved on every fail-to-pass test.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from coharden.execution.executor import InstanceExecutor
from coharden.mpe.workers import Workers
from coharden.mutation.context import FixContext
from coharden.mutation.pool import Pool, PoolRequest, Recorder, Recording, build_pool, probes_of, record_calls
from coharden.schema.testpatch import TestPatch

Records = list[dict[str, Any]]


class EarlyRecording:
    def __init__(self, team: Workers, fix: str, tests: Sequence[TestPatch], targets: list[dict[str, str]]) -> None:
        self.team, self.fix, self.tests, self.targets = team, fix, list(tests), targets
        self._result: Future[tuple[Records, Records, Records]] = Future()
        self._thread = threading.Thread(target=self._record, name="mpe-early-recording", daemon=True)
        self._thread.start()

    def _record(self) -> None:
        try:
            fixed = record_calls(self.team.executor, Recording(self.fix, self.tests, self.targets),
                                 mapper=self.team.map)
            probes = probes_of(fixed)
            buggy = record_calls(self.team.executor, Recording("", self.tests, self.targets, probes),
                                 mapper=self.team.map)
            self._result.set_result((fixed, probes, buggy))
        except BaseException as exc:  # noqa: BLE001 - the pool records again itself
            self._result.set_exception(exc)

    def recorder(self, executor: InstanceExecutor, recording: Recording) -> Records:
        """:func:`record_calls` for build_pool: the early recording when ``recording`` is one it made."""
        if list(recording.tests) == self.tests and recording.targets == self.targets:
            try:
                fixed, fixed_probes, buggy = self._result.result()
            except Exception:  # noqa: BLE001 - cancelled or failed: record now
                pass
            else:
                if recording.source_patch == self.fix and not recording.probes:
                    return fixed
                if recording.source_patch == "" and (recording.probes or []) == fixed_probes:
                    return buggy
        return record_calls(executor, recording, mapper=self.team.map)

    def join(self) -> None:
        self._thread.join()


class EarlyPool:
    """:func:`build_pool` in a background thread from the start of MPE: the operators that need no recording
    generate while the F->P checks run (the generation is Python in this process, the checks are test
    processes), and the pool is ready when the checks end. Nothing here touches an executor: the fix's context
    is computed before the workers start, and recordings go through the workers."""

    def __init__(self, team: Workers, request: PoolRequest, ctx: FixContext, recorder: Recorder | None = None
                 ) -> None:
        self._result: Future[Pool] = Future()

        def build() -> None:
            try:
                self._result.set_result(build_pool(team.executor, request, ctx=ctx, mapper=team.map,
                                                   recorder=recorder))
            except BaseException as exc:  # noqa: BLE001 - raised again to whoever asks for the pool
                self._result.set_exception(exc)

        # a daemon: when the candidate is not F->P nobody waits for it; it stops at its next recording (the
        # workers are closed) or when its generation ends, and touches nothing shared
        threading.Thread(target=build, name="mpe-early-pool", daemon=True).start()

    def result(self) -> Pool:
        return self._result.result()
