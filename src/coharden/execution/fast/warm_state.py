"""The fork server's warm imports (``forkserver_main`` loads this file by path: stdlib only, Python 3.7+):
:class:`WarmState`, which of the project's modules the server keeps imported and, for each request, whether its
child starts with them as they are, swaps changed function bodies into its copy, or purges them. The snapshots
and the swapping are ``warm.py``'s.
"""

import os
import sys
import threading
from typing import Any

_IGNORED_ENV = ("COHARDEN_",)  # per-run file names (the result stream): the project cannot see them at import


def _import_env(env):
    return {k: v for k, v in env.items() if not k.startswith(_IGNORED_ENV)}


class WarmState:
    """The project's modules imported in the server, so children need not import them, never served stale.

    A snapshot is taken (the modules imported, in the request's environment) when the server holds none and
    the checkout is the base commit's outside its tests (``base``: the server runs no patched project code,
    only what the environment itself holds); a snapshot that leaves the project half imported, or one taken
    while a run's patch touches a file the import loads (``volatile``), is refused for this base state
    (``key``). Before each fork the server checks the run asks for warm imports in the snapshot's root and
    import environment (else that child drops every project module: ``warm.purge``) and compares its files
    with the disk (``warm.changed_files``: content hashes of every module file, listings of their
    directories). Unchanged: the child starts warm. Changed (a fix, a mutant): the server keeps its modules -
    they are still the base state - and the child swaps the changed function bodies into its own copy, or
    purges and imports afresh where that is not provably the same as a fresh import (``warm.swap_changed``)."""

    def __init__(self, load):
        self.load = load  # forkserver_main.load_sibling
        self.module: Any = None  # warm.py, loaded by path on the first request
        self.snapshot = None
        self.env = None
        self.key = None
        self.refused = False
        self.imports = 0
        self.changed = {}  # the files a "swap" run changed (path -> new digest)

    def prepare(self, request):
        """Make the server's modules right for ``request``: "warm" when the child starts with them as they are,
        "swap" when some of their files changed (the child swaps in the changed function bodies, or purges and
        imports afresh: ``warm.swap_changed``), "purge" when the child must not use them (a run that asks for
        no warm imports - an instrumented recording, say - or in another environment: the server keeps them for
        the runs after it), "" when the server holds none."""
        spec = request.get("warm")
        if not spec:
            return "purge" if self.snapshot is not None else ""
        if self.module is None:
            self.module = self.load("warm")
        cwd = os.path.abspath(request["cwd"])  # noqa: PTH100
        volatile = {os.path.join(cwd, p) for p in spec.get("volatile", [])}  # noqa: PTH118
        env = _import_env(request["env"])
        if spec.get("key") != self.key:
            self.drop()
            self.key, self.refused = spec.get("key"), False
        if self.snapshot is not None:
            if env != self.env or cwd != self.snapshot.root:
                return "purge"
            else:
                changed = self.module.changed_files(self.snapshot, cwd)
                if changed == {}:
                    return "warm"
                if not spec.get("base"):
                    # the server keeps its modules (the base state); the child swaps the changed bodies into its
                    # own copy, or purges it (a file added or removed next to a module: changed is None)
                    self.changed = changed or {}
                    self.module.analyse_snapshot(self.snapshot, list(self.changed))
                    return "swap"
                self.drop()  # the base state itself is not what the server imported: import it again
        # the server imports the project only when primed, on the reset base checkout: at a run's request the
        # checkout holds the test patch, and a test file the package's own import loads (astropy's __init__
        # imports astropy.tests.runner) would run the test's code here, in the process every later run forks
        # from (and that signs the protocol): what it patched (pytest itself) would outlive any purge
        if self.snapshot is None and not self.refused and spec.get("base") and request.get("prime"):
            optional = list(spec.get("optional", []))
            self._take(cwd, list(spec.get("modules", [])) + optional, env, volatile)
            if self.snapshot is None and optional:  # a module the tests import failed: the required ones alone
                self.refused = False
                self._take(cwd, list(spec.get("modules", [])), env, volatile)
        return "warm" if self.snapshot is not None else ""

    def _take(self, cwd, modules, env, volatile):
        saved_env, saved_path, saved_bytecode = dict(os.environ), list(sys.path), sys.dont_write_bytecode
        try:
            os.environ.clear()
            os.environ.update(env)
            sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
            extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
            sys.path[:0] = extra  # warm_import puts the root first, as the child's sys.path has it
            snapshot = self.module.warm_import(cwd, modules)
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            sys.path[:] = saved_path
            sys.dont_write_bytecode = saved_bytecode
        self.imports += 1
        if snapshot.errors or not snapshot.files or volatile & set(snapshot.files) \
                or threading.active_count() != 1:
            self.refused = True
            self.module.purge(cwd)
            return
        self.snapshot, self.env = snapshot, env

    def drop(self):
        if self.snapshot is not None:
            self.module.purge(self.snapshot.root)
        self.snapshot = None
