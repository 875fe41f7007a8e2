"""Executors lent to worker threads: each worker gets its own executor (its own workspace and fork server),
executors are reused from task to task, and the pool's owner closes them once.

MPE runs mutants in parallel with one; the real-bugs study builds one over long-lived checkouts
(:class:`~coharden.execution.workspace.Checkout`). Nobody patches an executor or fakes one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from coharden.execution.executor import InstanceExecutor


class ExecutorPool:
    """At most ``size`` executors made by ``make`` on demand, or a fixed set of ``executors``."""

    def __init__(self, make: Callable[[], InstanceExecutor] | None = None, size: int = 1, *,
                 executors: Sequence[InstanceExecutor] = ()) -> None:
        if make is None and not executors:
            raise ValueError("an executor pool needs a factory or executors")
        self._make = make
        self.size = max(size, len(executors))
        self.executors: list[InstanceExecutor] = list(executors)
        self._free = list(executors)
        self._lock = threading.Lock()
        self._making = 0  # executors being made (outside the lock)
        self._warming: dict[int, threading.Thread] = {}  # id(executor) -> its warm-up, joined by lease()
        self._warm_errors: dict[int, BaseException] = {}  # id(executor) -> why its warm-up failed

    def __enter__(self) -> ExecutorPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def lease(self) -> Iterator[InstanceExecutor]:
        """A free executor for the duration of the block (made when none is free and the pool is not full)."""
        with self._lock:
            made = None
            if self._free:
                executor = self._free.pop()
            elif self._make is not None and len(self.executors) + self._making < self.size:
                self._making += 1
                made = self._make
            else:
                raise RuntimeError(f"all {len(self.executors)} executors of the pool are in use")
        if made is not None:  # made outside the lock: two workers set up their checkouts side by side
            try:
                executor = made()
            except BaseException:
                with self._lock:
                    self._making -= 1
                raise
            with self._lock:
                self._making -= 1
                self.executors.append(executor)
        warming = self._warming.pop(id(executor), None)
        if warming is not None:  # never lent while its warm-up still uses it
            warming.join()
            error = self._warm_errors.pop(id(executor), None)
            if error is not None:  # the lessee hears it, as it would have from its own first run
                with self._lock:
                    self._free.append(executor)
                raise error
        try:
            yield executor
        finally:
            with self._lock:
                self._free.append(executor)

    def warm(self, task: Callable[[InstanceExecutor], object], executors: Sequence[InstanceExecutor]) -> None:
        """Run ``task`` (e.g. :meth:`InstanceExecutor.warm_up`) on each of ``executors`` (free ones of this
        pool) in a background thread; :meth:`lease` waits for it before lending that executor, and raises the
        warm-up's error instead, once (the executor stays in the pool: a later lease may retry it)."""
        def run(executor: InstanceExecutor) -> None:
            try:
                task(executor)
            except BaseException as exc:  # noqa: BLE001 - raised by lease(), in the thread that wanted it
                self._warm_errors[id(executor)] = exc

        for executor in executors:
            thread = threading.Thread(target=run, args=(executor,), name="executor-warm-up", daemon=True)
            self._warming[id(executor)] = thread
            thread.start()

    def close(self) -> None:
        for thread in list(self._warming.values()):
            thread.join()
        self._warming.clear()
        self._warm_errors.clear()
        for executor in self.executors:
            executor.close()
        self.executors.clear()
        self._free.clear()
