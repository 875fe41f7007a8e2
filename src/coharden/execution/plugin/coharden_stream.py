"""pytest plugin (loaded with ``-p coharden_stream``; stdlib only): streams per-test events as JSON lines to the
file named by ``COHARDEN_STREAM`` while the session runs, so a run killed at its time limit still says which
tests finished and which one was running, and a session that never reached its end (``os._exit``, a crash) is
told apart from one that did.

Lines: {"start": nodeid}, {"report": nodeid, "when": phase, "outcome": ..., "xfail": bool}, {"finish": code}.
"""

import json
import os

_stream = None


def _emit(record):
    if _stream is not None:
        _stream.write(json.dumps(record) + "\n")
        _stream.flush()


def pytest_configure(config):
    global _stream
    path = os.environ.get("COHARDEN_STREAM")
    if path and _stream is None:
        _stream = open(path, "a", buffering=1)  # noqa: SIM115 - open for the whole session; close-on-exec


def pytest_runtest_logstart(nodeid, location):
    _emit({"start": nodeid})


def pytest_runtest_logreport(report):
    _emit({"report": report.nodeid, "when": report.when, "outcome": report.outcome,
           "xfail": bool(getattr(report, "wasxfail", None) is not None and report.when == "call")})


def pytest_sessionfinish(session, exitstatus):
    _emit({"finish": int(exitstatus)})


def pytest_unconfigure(config):
    global _stream
    if _stream is not None:
        _stream.close()
        _stream = None
