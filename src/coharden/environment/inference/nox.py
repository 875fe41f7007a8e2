"""Reader of ``noxfile.py`` (its sessions' Python versions, installs and pytest commands)."""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath

from coharden import pysource
from coharden.environment.inference.facts import TOOLING, Facts, dist_name
from coharden.environment.inference.setuptools import literal
from coharden.environment.sources import FileSource


def read_nox(source: FileSource, facts: Facts) -> None:
    for path in ("noxfile.py", "noxfile"):
        text = source.read(path)
        if text is not None:
            break
    else:
        return
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        facts.notes.append(f"{path} does not parse; ignored")
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call):
                    for kw in deco.keywords:
                        if kw.arg in ("python", "py"):
                            facts.tested_versions("nox", literal(kw.value, {}), path, f"session {node.name} python")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        values = [literal(a, {}) for a in node.args]
        if not all(isinstance(v, str) for v in values) or not values:
            continue
        if node.func.attr == "install":
            reqs = [v for v in values if not v.startswith("-") and not v.startswith(".")]
            extras = [m.group(1) for v in values for m in [re.match(r"^\.\[([^\]]+)\]$", v)] if m]
            for group in extras:
                facts.extras_wanted += [e.strip() for e in group.split(",") if e.strip() not in facts.extras_wanted]
            if values[0] == "-r" and len(values) > 1:
                facts.requirement_files.append(values[1])
                reqs = reqs[1:] if reqs and reqs[0] == values[1] else reqs
            facts.test_deps += [r for r in reqs if dist_name(r) not in TOOLING]
            facts.deps(reqs)
            facts.add(path, "session.install", " ".join(values))
        elif node.func.attr == "run" and PurePosixPath(values[0]).name in ("pytest", "py.test"):
            facts.pytest_commands.append((values[1:], path))
            facts.add(path, "session.run", " ".join(values))
