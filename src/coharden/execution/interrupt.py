"""Stopping a batch on Ctrl-C: no new work, the running jobs end at their next test process, results kept.

The first Ctrl-C in a batch (:class:`~coharden.execution.engine.LocalEngine`) calls :func:`request_stop`: jobs
not started are cancelled, and every job still running raises :class:`Interrupted` when it is about to start its
next test process (:func:`check`, called before every one). What a job finished before (verdicts, recordings in
the result store; rows the driver received) is kept, so a rerun resumes there. A second Ctrl-C raises
:class:`StopNow` in the driver, which leaves at once.
"""

from __future__ import annotations

import threading

_STOP = threading.Event()


class Interrupted(BaseException):
    """Raised inside a job once a stop was requested: not an error of the job (a BaseException, so no
    ``except Exception`` turns it into a verdict or an error row)."""


class StopNow(KeyboardInterrupt):
    """The second Ctrl-C: the driver leaves without waiting for the running jobs."""


def request_stop() -> None:
    _STOP.set()


def stop_requested() -> bool:
    return _STOP.is_set()


def reset() -> None:
    """A new batch starts (one process may run several: tests, a long-lived driver)."""
    _STOP.clear()


def check() -> None:
    """Raise :class:`Interrupted` when a stop was requested (before a test process starts)."""
    if _STOP.is_set():
        raise Interrupted("the batch was interrupted")
