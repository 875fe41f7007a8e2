"""pytest plugin (loaded with ``-p coharden_stream``; stdlib only): streams per-test events as JSON lines to the
file named by ``COHARDEN_STREAM`` while the session runs, so a run killed at its time limit still says which
tests finished and which one was running, and a session that never reached its end (``os._exit``, a crash) is
told apart from one that did.

Lines: {"start": nodeid}, {"report": nodeid, "when": phase, "outcome": ..., "xfail": bool, "duration": seconds},
{"finish": code},
and for a phase that failed with an exception {"raised": nodeid, "when": phase, "type": "module.Qualname",
"bases": [the qualified names of its classes, itself first], "message": str(exception)[:2000]}: the type a test
raised, from the exception object itself (``reproduce check --expect-exception`` reads it; no text search).

From a hook wrapper around each test's call (the outermost one, taken when this plugin loads, before any code
under test is imported): {"call": nodeid, "raised": kind, "type": "module.Qualname", "xfail_mark": bool,
"origin": path}, what the call itself did, read from pluggy's outcome of ``pytest_runtest_call`` (and, for
unittest items, the exceptions pytest's unittest support stored on the item), never from pytest's ``CallInfo``
or ``TestReport``. ``kind`` is "" (returned), "skip", "xfail" (``pytest.xfail``), "exit" or "raised" (any other
exception); ``origin`` (a skip or an xfail only): the file that called ``pytest.skip`` / ``pytest.xfail``,
relative to the rootdir when inside it. ``coharden.execution.pytest_verdicts`` compares it with the report that
follows: a "passed" report after a call that raised is a report the code under test rewrote (a patched
``TestReport`` or ``CallInfo``).

Before the first test of a process: {"plugin": name, "from": directory} for each plugin pytest loaded from an
entry point, with where its distribution's metadata lies (``pytest_verdicts`` flags one from inside the checkout).

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


_config = None  # type: object
_told = None  # the process that told which entry-point plugins it runs (a fork of a zygote tells again)


def _entry_point_plugins():
    """{"plugin": name, "from": path} for every plugin pytest loaded from an entry point, with the directory its
    distribution's metadata lies in (a checkout's own *.dist-info there is a plugin the code under test brought)."""
    found = []  # type: list
    manager = getattr(_config, "pluginmanager", None)
    try:
        pairs = manager.list_plugin_distinfo()  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - an old pytest without it
        return found
    for plugin, dist in pairs:
        inner = getattr(dist, "_dist", dist)
        where = getattr(inner, "_path", None) or getattr(inner, "location", None) or ""
        name = manager.get_name(plugin) or ""  # type: ignore[union-attr]
        found.append({"plugin": str(name), "from": os.path.realpath(str(where)) if where else ""})
    return found


def pytest_configure(config):
    global _stream, _config
    _config = config
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


def _call_kind(kind):
    names = {getattr(c, "__name__", "") for c in getattr(kind, "__mro__", ())}
    if "XFailed" in names:
        return "xfail"
    if names & {"Skipped", "SkipTest"}:
        return "skip"
    if names & {"Exit", "KeyboardInterrupt"}:
        return "exit"
    return "raised"


def _xfail_marked(item):
    for get in ("get_closest_marker", "get_marker"):  # pytest >= 3.6, older
        method = getattr(item, get, None)
        if method is not None:
            try:
                return method("xfail") is not None
            except Exception:  # noqa: BLE001
                break
    return False


def _origin(exc_tb, root):
    """The file that raised through pytest's outcome functions (``pytest.skip``, ``pytest.xfail``): the innermost
    frame outside pytest's own package, relative to ``root`` when inside it."""
    frames = []
    while exc_tb is not None:
        frames.append(exc_tb.tb_frame.f_code.co_filename)
        exc_tb = exc_tb.tb_next
    for name in reversed(frames):
        if os.sep + "_pytest" + os.sep not in name and os.sep + "pluggy" + os.sep not in name:
            path = os.path.realpath(name)
            root = os.path.realpath(root) if root else ""
            return os.path.relpath(path, root) if root and path.startswith(root.rstrip(os.sep) + os.sep) else path
    return ""


def _wrap_call():
    import pytest

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(item):
        outcome = yield
        kind, tb = None, None
        try:
            outcome.get_result()
        except BaseException as exc:  # noqa: BLE001 - only looked at: the outcome stays pytest's
            kind, tb = type(exc), exc.__traceback__
        if kind is None:  # unittest items keep their failures and skips on the item (unittest caught them)
            stored = getattr(item, "_excinfo", None)
            if stored:
                kind, tb = getattr(stored[0], "type", None), getattr(stored[0], "tb", None)
        raised = "" if kind is None else _call_kind(kind)
        record = {"call": getattr(item, "nodeid", ""), "raised": raised,
                  "type": "" if kind is None else _qualified(kind), "xfail_mark": _xfail_marked(item)}
        if raised in ("skip", "xfail"):
            try:
                record["origin"] = _origin(tb, str(getattr(item.config, "rootdir", "") or os.getcwd()))  # noqa: PTH109
            except Exception:  # noqa: BLE001
                record["origin"] = ""
        _emit(record)

    return pytest_runtest_call


pytest_runtest_call = _wrap_call()


def pytest_runtest_logstart(nodeid, location):
    global _told
    if _told != os.getpid() and _config is not None:
        _told = os.getpid()
        for record in _entry_point_plugins():
            _emit(record)
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
