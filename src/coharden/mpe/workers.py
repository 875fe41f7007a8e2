"""The worker executors of one MPE run, shared by its phases (F->P checks, recording, mutant runs).

Tasks are functions of an executor. With more than one worker, :meth:`Workers.submit` queues a task for a
fixed set of worker threads, each holding one executor leased from ``pool`` (its own workspace and fork server)
from its first task until :meth:`Workers.close`; the phases of one MPE run, and tasks submitted from
several threads at once (F->P checks while recordings run), share those workers first come, first served, so
both cores stay busy and no phase starts checkouts of its own. With one worker (or no pool) a task runs at
once on the caller's executor, in the caller's thread: the serial reference every parallel run must agree with.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import ExitStack
from typing import Any, TypeVar

from coharden.execution import interrupt
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pool import ExecutorPool

T = TypeVar("T")
Task = Callable[[InstanceExecutor], T]


class Workers:
    def __init__(self, executor: InstanceExecutor, workers: int = 1, pool: ExecutorPool | None = None) -> None:
        self.executor = executor
        self.workers = max(1, min(workers, pool.size)) if pool is not None else 1
        self._pool = pool
        self._queue: queue.Queue[tuple[Future[Any], Task[Any]] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def parallel(self) -> bool:
        return self.workers > 1

    def submit(self, task: Task[T]) -> Future[T]:
        future: Future[T] = Future()
        if not self.parallel:
            _run(future, task, self.executor)
            return future
        with self._lock:  # closing and queueing exclude each other: nothing is queued behind the stop signals
            if self._closed:
                raise RuntimeError("the workers are closed")
            if len(self._threads) < self.workers:
                thread = threading.Thread(target=self._loop, name=f"mpe-worker-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            self._queue.put((future, task))
        return future

    def map(self, tasks: Sequence[Task[T]]) -> list[T]:
        """Results of ``tasks`` in order (the first error is raised once all have ended)."""
        futures = [self.submit(task) for task in tasks]
        return [future.result() for future in futures]

    def _loop(self) -> None:
        assert self._pool is not None
        with ExitStack() as stack:
            ex: InstanceExecutor | None = None
            while True:
                item = self._queue.get()
                if item is None:
                    return
                future, task = item
                if not future.set_running_or_notify_cancel():
                    continue
                if ex is None:
                    try:
                        ex = stack.enter_context(self._pool.lease())
                    except BaseException as exc:  # noqa: BLE001 - the task's caller sees it
                        future.set_exception(exc)
                        continue
                _run(future, task, ex)

    def close(self) -> None:
        """Cancel the tasks not started, wait for the running ones; the leased executors go back to the pool
        (its owner closes them). Once a stop was requested (Ctrl-C, :mod:`coharden.execution.interrupt`) the
        running ones are not waited for: a test process may run to its time limit, and each worker stops at its
        next one anyway."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if interrupt.stop_requested():
            return
        for thread in threads:
            thread.join()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run(future: Future[T], task: Task[T], ex: InstanceExecutor) -> None:
    try:
        future.set_result(task(ex))
    except BaseException as exc:  # noqa: BLE001 - delivered to whoever waits on the future
        future.set_exception(exc)
