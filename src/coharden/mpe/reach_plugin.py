"""A pytest plugin, loaded into the TEST interpreter (stdlib only; coharden need not be installed there), that
notes every function of the repository the test process enters, from the moment pytest imports it (``-p``
plugins are imported while pytest parses its arguments, before any conftest.py, test module or entry-point
plugin) until the session ends: collection, fixtures, the tests and teardown.

Environment: ``COHARDEN_REACH_ROOT`` (the worktree; only code objects from files under it are noted) and
``COHARDEN_REACH_OUT`` (where the JSON result is written at the session's end, after every other plugin's
``pytest_unconfigure``).

Result: ``{"complete": bool, "why": str, "backend": str, "reached": {path under root: [[first line, name],
...]}}``. ``complete`` is false when the noting may have missed a call: the test started another process
(``subprocess``, ``os.system``, ``os.fork``, ``exec``: the audit hook sees them), something replaced the
tracer, or a module of the repository was imported before the plugin (a plugin named earlier in ``addopts``).
A caller never takes an incomplete result for "not reached".

Backends: ``sys.monitoring`` (Python 3.12+; each code object is reported once, then disabled: next to no
cost), else (or with ``COHARDEN_REACH_BACKEND=settrace``) ``sys.settrace`` with a global function that notes
the code object and returns None (no line events), set for new threads too.
"""

from __future__ import annotations

import json
import os
import sys
import threading

_SPAWNS = ("subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
           "pty.spawn")
_STATE: dict = {}


def _start() -> None:
    root = os.environ.get("COHARDEN_REACH_ROOT")
    out = os.environ.get("COHARDEN_REACH_OUT")
    if not root or not out:
        return
    prefix = os.path.realpath(root) + os.sep
    seen: set = set()
    known: dict = {}  # co_filename -> path under root, or None
    _STATE.update(out=out, seen=seen, known=known, prefix=prefix, why="")

    def note(code) -> None:
        name = code.co_filename
        path = known.get(name, False)
        if path is False:
            real = os.path.realpath(name) if name and not name.startswith("<") else ""
            path = real[len(prefix):] if real.startswith(prefix) else None
            known[name] = path
        if path is not None:
            seen.add((path, code.co_firstlineno, code.co_name))

    def audit(event, args) -> None:
        if event.startswith(_SPAWNS) and not _STATE["why"]:
            _STATE["why"] = f"the test started another process ({event})"

    sys.addaudithook(audit)
    early = sorted(name for name, module in list(sys.modules.items())
                   if os.path.realpath(getattr(module, "__file__", None) or "").startswith(prefix))
    if early:  # an earlier plugin (ini addopts, a .pth file) imported the project: calls then were not seen
        _STATE["why"] = f"modules of the repository were imported before the pass began ({', '.join(early[:3])})"
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None and os.environ.get("COHARDEN_REACH_BACKEND") != "settrace":
        for tool in (4, 3, 2):  # ids left free by debuggers (0), coverage (1) and profilers (2)
            if monitoring.get_tool(tool) is None:
                monitoring.use_tool_id(tool, "coharden-reach")

                def started(code, offset):
                    note(code)
                    return monitoring.DISABLE

                monitoring.register_callback(tool, monitoring.events.PY_START, started)
                monitoring.set_events(tool, monitoring.events.PY_START)
                _STATE.update(backend="monitoring", tool=tool)
                return

    def trace(frame, event, arg):
        if event == "call":
            note(frame.f_code)
        return None

    sys.settrace(trace)
    threading.settrace(trace)
    _STATE.update(backend="settrace", trace=trace)


def _finish() -> None:
    out = _STATE.get("out")
    if not out or _STATE.get("done"):
        return
    _STATE["done"] = True
    why = _STATE["why"]
    if _STATE.get("backend") == "settrace":
        if sys.gettrace() is not _STATE["trace"]:
            why = why or "the tracer was replaced during the run"
        sys.settrace(None)
        threading.settrace(None)
    elif _STATE.get("backend") == "monitoring":
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        if monitoring.get_tool(_STATE["tool"]) != "coharden-reach" or \
                monitoring.get_events(_STATE["tool"]) != monitoring.events.PY_START:
            why = why or "the monitoring tool was changed during the run"
    reached: dict = {}
    for path, line, name in sorted(_STATE["seen"]):
        reached.setdefault(path, []).append([line, name])
    with open(out, "w") as handle:
        json.dump({"complete": not why, "why": why, "backend": _STATE.get("backend", ""), "reached": reached},
                  handle)


_start()


def pytest_unconfigure(config):
    _finish()


try:  # after every other plugin's and conftest's unconfigure: calls they make are seen too
    import pytest

    pytest_unconfigure = pytest.hookimpl(trylast=True)(pytest_unconfigure)
except ImportError:  # pragma: no cover - only pytest loads this plugin
    pass
