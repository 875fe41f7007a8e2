"""A pytest plugin, loaded into the TEST interpreter (which need not have coharden installed), that records
which lines of chosen source files ran during the pytest session.

Why a plugin and not ``python -m coverage run -m pytest``: coharden runs tests as ``python -m pytest`` in a
fresh process, as a fork of a warm fork server (which calls ``pytest.main`` directly), or inside a Docker
image. A plugin loaded with ``-p`` works the same in all three, so coverage runs keep the fork server's speed.
Measurement starts when the plugin module is imported (pytest imports ``-p`` plugins while parsing its
arguments, before any conftest.py or test module), so lines run at import time are measured too.

Environment:

* ``COHARDEN_LINECOV_FILES``: JSON list of absolute paths to measure;
* ``COHARDEN_LINECOV_OUT``: where the JSON result is written when the session ends;
* ``COHARDEN_LINECOV_BACKEND``: ``coverage`` (coverage.py, must be importable here) or ``settrace`` (a
  stdlib line tracer limited to the measured files; the fallback for interpreters without coverage.py).

Result: ``{"backend", "version", "python", "lines": {realpath: [line, ...]}}`` - raw line numbers as the
tracer saw them; the caller maps them to statements. When coverage.py is wanted but missing, the result is
``{"error": "..."}`` and nothing is measured.
"""

from __future__ import annotations

import json
import os
import sys
import threading

_STATE: dict = {}


def _start() -> None:
    files = os.environ.get("COHARDEN_LINECOV_FILES")
    out = os.environ.get("COHARDEN_LINECOV_OUT")
    if not files or not out:
        return
    targets = sorted({os.path.realpath(p) for p in json.loads(files)})
    backend = os.environ.get("COHARDEN_LINECOV_BACKEND", "coverage")
    _STATE.update(out=out, targets=targets, backend=backend, python=sys.executable)
    if backend == "coverage":
        try:
            import coverage
        except ImportError as exc:
            _STATE["error"] = (f"coverage.py is not importable in the test interpreter {sys.executable} ({exc}); "
                               "install it there (pip install 'coverage>=7,<8') or use the settrace backend")
            return
        cov = coverage.Coverage(data_file=None, include=targets, branch=False, config_file=False)
        cov.set_option("run:disable_warnings", ["no-data-collected", "module-not-measured", "module-not-imported"])
        cov.start()
        _STATE.update(cov=cov, version=coverage.__version__)
        return
    hits: dict[str, set[int]] = {t: set() for t in targets}
    known: dict[str, set[int] | None] = {}

    def global_trace(frame, event, arg):
        if event != "call":
            return None
        name = frame.f_code.co_filename
        if name not in known:
            known[name] = hits.get(os.path.realpath(name)) if name and not name.startswith("<") else None
        lines = known[name]
        if lines is None:
            return None

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local

    sys.settrace(global_trace)
    threading.settrace(global_trace)
    _STATE.update(hits=hits, version="settrace")


def _finish() -> None:
    out = _STATE.get("out")
    if not out or _STATE.get("done"):
        return
    _STATE["done"] = True
    if "error" in _STATE:
        result = {"error": _STATE["error"]}
    elif "cov" in _STATE:
        cov = _STATE["cov"]
        cov.stop()
        data = cov.get_data()
        lines = {os.path.realpath(f): sorted(data.lines(f) or []) for f in data.measured_files()}
        result = {"lines": lines}
    else:
        sys.settrace(None)
        threading.settrace(None)
        result = {"lines": {path: sorted(lines) for path, lines in _STATE["hits"].items() if lines}}
    result.update(backend=_STATE["backend"], version=_STATE.get("version"), python=_STATE["python"])
    with open(out, "w") as handle:
        json.dump(result, handle)


_start()


def pytest_unconfigure(config):
    _finish()
