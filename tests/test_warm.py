"""Warm project imports (execution/warm.py) are never served stale: a real parent imports a tiny package, real
forked children see every change made to its files after the import (content, same-size rewrites with the old
mtime, a shadowing package), and keep the warm modules only when nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coharden.execution import warm

SERVER = textwrap.dedent("""\
    import importlib.util, json, os, sys
    spec = importlib.util.spec_from_file_location("warm", sys.argv[1])
    warm = importlib.util.module_from_spec(spec)
    sys.modules["warm"] = warm
    spec.loader.exec_module(warm)
    snapshot = warm.warm_import(sys.argv[2], ["pkg"])
    import pkg
    pkg.parent_marker = True  # only the parent's copy of the module has it
    for line in sys.stdin:
        cwd = line.strip()
        pid = os.fork()
        if pid == 0:
            os.chdir(cwd)
            sys.path.insert(0, cwd)
            used = warm.prepare_child(snapshot, cwd)
            import pkg, pkg.mod
            print(json.dumps({"warm": used, "value": pkg.VALUE, "mod": pkg.mod.VALUE,
                              "marker": hasattr(pkg, "parent_marker")}), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
""")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from pkg.mod import VALUE\n")
    (root / "pkg" / "mod.py").write_text("VALUE = 1\n")
    return root


def test_forked_children_never_see_stale_modules(project: Path, tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", SERVER, warm.__file__, str(project)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert server.stdin is not None
    assert server.stdout is not None

    def child(cwd: Path = project) -> dict[str, object]:
        server.stdin.write(f"{cwd}\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        return json.loads(server.stdout.readline())  # type: ignore[union-attr]

    mod = project / "pkg" / "mod.py"
    try:
        assert child() == {"warm": True, "value": 1, "mod": 1, "marker": True}
        mod.write_text("VALUE = 22\n")  # a mutant rewrites an imported module
        assert child() == {"warm": False, "value": 22, "mod": 22, "marker": False}
        mod.write_text("VALUE = 1\n")  # back to the content the parent imported: warm again
        assert child() == {"warm": True, "value": 1, "mod": 1, "marker": True}
        stat = mod.stat()
        mod.write_text("VALUE = 7\n")  # same size, and the old mtime put back: only the content tells
        os.utime(mod, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert child() == {"warm": False, "value": 7, "mod": 7, "marker": False}
        mod.write_text("VALUE = 1\n")
        (project / "pkg" / "mod").mkdir()  # a new package shadows the module the parent imported
        (project / "pkg" / "mod" / "__init__.py").write_text("VALUE = 3\n")
        assert child() == {"warm": False, "value": 3, "mod": 3, "marker": False}
        other = tmp_path / "other"
        other.mkdir()
        (other / "pkg").mkdir()
        (other / "pkg" / "__init__.py").write_text("from pkg.mod import VALUE\n")
        (other / "pkg" / "mod.py").write_text("VALUE = 5\n")
        assert child(other) == {"warm": False, "value": 5, "mod": 5, "marker": False}  # another checkout
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def test_a_project_that_does_not_import_is_not_kept_half_imported(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    (root / "bad").mkdir(parents=True)
    (root / "bad" / "__init__.py").write_text("from bad import helper\nraise RuntimeError('no')\n")
    (root / "bad" / "helper.py").write_text("X = 1\n")
    snapshot = warm.warm_import(str(root), ["bad"])
    assert snapshot.errors
    assert not snapshot.files
    assert not warm.project_modules(str(root))  # nothing of it stays loaded
    assert not warm.prepare_child(snapshot, str(root))
