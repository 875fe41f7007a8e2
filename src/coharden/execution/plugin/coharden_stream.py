"""pytest plugin (loaded with ``-p coharden_stream``; stdlib only): streams per-test events as JSON lines to the
file named by ``COHARDEN_STREAM`` while the session runs, so a run killed at its time limit still says which
tests finished and which one was running, and a session that never reached its end (``os._exit``, a crash) is
told apart from one that did.

Lines: {"start": nodeid}, {"report": nodeid, "when": phase, "outcome": ..., "xfail": bool, "duration": seconds},
{"finish": code},
and for a phase that failed with an exception {"raised": nodeid, "when": phase, "type": "module.Qualname",
"bases": [the qualified names of its classes, itself first], "message": str(exception)[:2000]}: the type a test
raised, from the exception object itself (``reproduce check --expect-exception`` reads it; no text search).

Once pytest has imported its ``-p`` plugins, the directories coharden put on ``PYTHONPATH`` for them (listed in
``COHARDEN_PLUGIN_PATH``) leave ``sys.path`` and ``PYTHONPATH`` again, before any conftest or test runs: the
tests see the path the harness gives them. A test that runs a tool with ``PYTHONPATH + ":"`` (pylint pops the
entry after the first from ``sys.path``) would otherwise lose the checkout instead of the plugin directory.
"""

import json
import os
import sys

_stream = None


def _emit(record):
    if _stream is not None:
        _stream.write(json.dumps(record) + "\n")
        _stream.flush()


def _unlist_plugin_path():
    dirs = [d for d in os.environ.pop("COHARDEN_PLUGIN_PATH", "").split(os.pathsep) if d]
    if not dirs:
        return
    sys.path[:] = [p for p in sys.path if p not in dirs]
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in dirs]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)


def pytest_load_initial_conftests(early_config, parser, args):
    _unlist_plugin_path()


def pytest_configure(config):
    global _stream
    _unlist_plugin_path()
    path = os.environ.get("COHARDEN_STREAM")
    if path and _stream is None:
        _stream = open(path, "a", buffering=1)  # noqa: SIM115 - open for the whole session; close-on-exec


def redirect(path):
    """Write the rest of the session's events to ``path`` (None: nowhere): a fork server's zygote, which collected
    once, closes the stream it opened; each run forked from it opens its own (see ``forkserver_main``)."""
    global _stream
    if _stream is not None:
        _stream.close()
        _stream = None
    if path:
        _stream = open(path, "a", buffering=1)  # noqa: SIM115 - open for the rest of the session


def pytest_collection_modifyitems(session, config, items):
    """Run the selected tests in the order their files define them, as a run of the whole file does (the
    harness runs whole files): pytest keeps the command line's order otherwise, and a test that reads what an
    earlier test of its file left behind (sphinx's shared build directories) would see another state. Files
    keep the order in which they first appear; tests on one line (parameters) keep theirs."""
    rank: dict[str, int] = {}
    for item in items:
        rank.setdefault(str(getattr(item, "fspath", "")), len(rank))

    def key(item):
        line = item.location[1] if item.location and isinstance(item.location[1], int) else -1
        return rank[str(getattr(item, "fspath", ""))], line

    items.sort(key=key)


def pytest_runtest_logstart(nodeid, location):
    _emit({"start": nodeid})


def pytest_runtest_logreport(report):
    _emit({"report": report.nodeid, "when": report.when, "outcome": report.outcome,
           "xfail": bool(getattr(report, "wasxfail", None) is not None and report.when == "call"),
           "duration": round(float(getattr(report, "duration", 0.0) or 0.0), 6)})


def _qualified(cls):
    module = getattr(cls, "__module__", "") or ""
    name = str(getattr(cls, "__qualname__", None) or getattr(cls, "__name__", "?"))
    return name if module in ("builtins", "exceptions") else module + "." + name


def pytest_exception_interact(node, call, report):
    """Called after the report of a phase that raised (not for skips or expected failures)."""
    excinfo = getattr(call, "excinfo", None)
    if excinfo is None:
        return
    try:
        kind = excinfo.type
        bases = [_qualified(c) for c in kind.__mro__ if c is not object]
        message = str(excinfo.value)[:2000]
    except Exception:  # noqa: BLE001 - a broken __str__ of the test's own exception
        bases, message = [_qualified(excinfo.type)], ""
    _emit({"raised": getattr(node, "nodeid", ""), "when": getattr(call, "when", ""), "type": bases[0],
           "bases": bases, "message": message})


def pytest_sessionfinish(session, exitstatus):
    _emit({"finish": int(exitstatus)})


def pytest_unconfigure(config):
    global _stream
    if _stream is not None:
        _stream.close()
        _stream = None
