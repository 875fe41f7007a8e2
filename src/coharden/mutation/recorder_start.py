"""Starts coharden's input recorder with the interpreter, for a test runner that is not pytest.

Copied as ``sitecustomize.py`` into the recording's plugin directory, which goes first on PYTHONPATH of a run
with the repository's own runner (sympy's ``bin/test``, Django's ``runtests.py``): those take no ``-p``
plugin, and a spec environment need not have pytest at all. Any ``sitecustomize`` further down the path (the
network guard's, the environment's own) is run after it, as if this one were not there.
"""

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path


def _start() -> None:
    if not os.environ.get("COHARDEN_RECORD_OUT"):
        return
    try:
        import coharden_recorder  # type: ignore[import-not-found]  # recorder_plugin.py, copied beside this file

        coharden_recorder.start()
    except Exception as exc:  # noqa: BLE001 - the run goes on; coharden sees no records and says so
        sys.stderr.write(f"coharden recorder did not start: {type(exc).__name__}: {exc}\n")


def _chain() -> None:
    here = Path(__file__).resolve().parent
    rest = [p for p in sys.path if Path(p or os.curdir).resolve() != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_start()
_chain()
