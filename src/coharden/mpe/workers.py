"""The worker executors of one MPE run, shared by its phases (F->P checks, recording, mutant runs).

Every phase hands a list of tasks (functions of an executor) to :meth:`Workers.map`; with more than one
worker the tasks run on executors made by ``executor_factory`` (each its own workspace and fork server), one
per worker thread, created on first use and kept until :meth:`Workers.close`, so the phases of one MPE run
reuse the same checkouts instead of each phase starting its own. With one worker (or no factory) the tasks
run one after another on the caller's executor: the serial reference every parallel run must agree with.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from coharden.execution.executor import InstanceExecutor

T = TypeVar("T")
Task = Callable[[InstanceExecutor], T]


class Workers:
    def __init__(self, executor: InstanceExecutor, workers: int = 1,
                 executor_factory: Callable[[], InstanceExecutor] | None = None) -> None:
        self.executor = executor
        self.workers = max(1, workers) if executor_factory is not None else 1
        self._factory = executor_factory
        self._idle: list[InstanceExecutor] = []
        self._created: list[InstanceExecutor] = []
        self._lock = threading.Lock()

    @property
    def parallel(self) -> bool:
        return self.workers > 1

    def map(self, tasks: Sequence[Task[T]]) -> list[T]:
        """Results of ``tasks`` in order; in parallel on the worker executors when there are several."""
        if not self.parallel or len(tasks) < 2:
            if self.parallel and tasks:  # one task: still on a worker, so the caller's executor stays free
                return [self._run(tasks[0])]
            return [task(self.executor) for task in tasks]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(tasks))) as pool:
            return list(pool.map(self._run, tasks))

    def _run(self, task: Task[T]) -> T:
        ex = self._take()
        try:
            return task(ex)
        finally:
            with self._lock:
                self._idle.append(ex)

    def _take(self) -> InstanceExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        assert self._factory is not None
        ex = self._factory()
        with self._lock:
            self._created.append(ex)
        return ex

    def close(self) -> None:
        for ex in self._created:
            ex.close()
        self._created.clear()
        self._idle.clear()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
