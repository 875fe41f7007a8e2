"""Where jobs run: a local thread pool (default) or a Ray cluster (``coharden[ray]``).

A job is a module-level function and picklable arguments that returns a JSON-able result; it touches no
shared state of the driver. The driver checks its result store before submitting and writes every result
into it as it arrives, so a run is resumable whichever engine ran it and results never depend on where a
job ran. Ray retries a job whose worker process died (``max_retries``); a job that raised is not retried
(a bad input stays a reported error, not an endless loop).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from coharden.errors import CoHardenError
from coharden.execution import interrupt

Job = tuple[Callable[..., Any], tuple[Any, ...]]


class Engine(Protocol):
    name: str

    def run(self, jobs: Sequence[Job], on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Run every job; results in job order; ``on_result(index, result)`` as each one finishes."""
        ...

    def close(self) -> None: ...


def _as_completed(futures: Iterable[Future[Any]]) -> Iterator[Future[Any]]:
    """``as_completed``, waking every 0.2 s: a signal the kernel delivers to a worker thread does not interrupt
    the main thread's wait on a lock, and Python runs the Ctrl-C handler only in the main thread - so with an
    unbounded wait, "interrupted" was printed when the running job ended (10 s later in a test), not at once."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        yield from done


class LocalEngine:
    """Threads in this process. Jobs spend their time in test subprocesses, so threads are enough, and each
    job builds its own workspace and executor (no state shared between workers).

    Ctrl-C (a KeyboardInterrupt in the thread that called :meth:`run`): no job starts any more, the running
    ones stop at their next test process (:mod:`coharden.execution.interrupt`; ``on_interrupt(running)`` is
    told at once how many run), results that still arrive go to ``on_result``, then the KeyboardInterrupt is
    raised again; a second Ctrl-C while they wind down raises :class:`~coharden.execution.interrupt.StopNow`
    without waiting."""

    name = "local"

    def __init__(self, workers: int, on_interrupt: Callable[[int], None] | None = None) -> None:
        self.workers = max(1, workers)
        self.on_interrupt = on_interrupt

    def run(self, jobs: Sequence[Job], on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        interrupt.reset()
        results: list[Any] = [None] * len(jobs)
        pool = ThreadPoolExecutor(max_workers=self.workers)
        futures = {pool.submit(fn, *args): index for index, (fn, args) in enumerate(jobs)}
        try:
            for future in _as_completed(futures):
                index = futures[future]
                results[index] = future.result()
                if on_result:
                    on_result(index, results[index])
        except KeyboardInterrupt:
            self._wind_down(pool, futures, results, on_result)
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        pool.shutdown(wait=True)
        return results

    def _wind_down(self, pool: ThreadPoolExecutor, futures: dict[Future[Any], int], results: list[Any],
                   on_result: Callable[[int, Any], None] | None) -> None:
        """After the first Ctrl-C: cancel what has not started, let the running jobs stop, keep their results."""
        interrupt.request_stop()
        running = [f for f in futures if not f.cancel() and not f.done()]
        pool.shutdown(wait=False, cancel_futures=True)
        if self.on_interrupt:
            self.on_interrupt(len(running))
        try:
            for future in _as_completed(running):
                if future.cancelled() or future.exception() is not None:
                    continue  # Interrupted (stopped before its next test process) or failed: no result
                results[futures[future]] = future.result()
                if on_result:
                    on_result(futures[future], results[futures[future]])
        except KeyboardInterrupt as exc:
            raise interrupt.StopNow() from exc
        interrupt.reset()

    def close(self) -> None:
        pass


class RayEngine:
    """Jobs as Ray tasks on a cluster (``address``) or a local Ray instance (``address=None``)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None, max_retries: int = 3) -> None:
        try:
            import ray
        except ImportError as exc:
            raise CoHardenError("the Ray executor needs the ray extra: pip install 'coharden[ray]'") from exc
        self._ray = ray
        self.max_retries = max_retries
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False,
                                      "include_dashboard": False}
            if address:
                kwargs["address"] = address
            elif workers:
                kwargs["num_cpus"] = workers
            # workers import coharden from the driver's environment; ship the source tree when on a cluster
            kwargs["runtime_env"] = {"env_vars": {"PYTHONDONTWRITEBYTECODE": "1"}}
            try:
                ray.init(**kwargs)
            except (ray.exceptions.RayError, ConnectionError, RuntimeError) as exc:  # refused, unreachable
                raise CoHardenError(_not_joined(address, exc)) from exc
            self._owns = True
        else:
            self._owns = False
        self._remote = ray.remote(max_retries=max_retries, retry_exceptions=False)(_call)

    def run(self, jobs: Sequence[Job], on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        ray = self._ray
        refs = {self._remote.remote(fn, args): index for index, (fn, args) in enumerate(jobs)}
        results: list[Any] = [None] * len(jobs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                index = refs[ref]
                results[index] = ray.get(ref)
                if on_result:
                    on_result(index, results[index])
        return results

    def close(self) -> None:
        if self._owns:
            self._ray.shutdown()


def _not_joined(address: str | None, exc: BaseException) -> str:
    """Why Ray could not be started or joined, in a line: Ray's message carries a traceback's worth of text (and
    the cause that matters, an authentication error, two exceptions down its chain)."""
    where = f"the Ray cluster at {address}" if address else "a local Ray instance"
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    hint = ""
    if any("authenticat" in str(e).lower() or "authtoken" in str(e).lower() for e in chain):
        hint = (" (its token authentication refused this driver: it needs RAY_AUTH_MODE=token and the cluster's "
                "token in RAY_AUTH_TOKEN or ~/.ray/auth_token)")
    return f"could not join {where}: {first}{hint}"


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return fn(*args)


def make_engine(kind: str, *, workers: int, address: str | None = None,
                on_interrupt: Callable[[int], None] | None = None) -> Engine:
    if kind == "local":
        return LocalEngine(workers, on_interrupt)
    if kind == "ray":
        return RayEngine(address=address or os.environ.get("RAY_ADDRESS"), workers=workers)
    raise CoHardenError(f"unknown executor {kind!r} (known: local, ray)")
