"""Reader of requirement files (base and test ones; docs and lint ones are left out)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from coharden.environment.inference.facts import REQ_NAME, REQ_SKIP, Facts
from coharden.environment.sources import FileSource


def read_requirements(source: FileSource, facts: Facts) -> None:
    candidates = [p for p in source.files() if REQ_NAME.search(p) and p.count("/") <= 1]
    chosen = []
    for path in candidates:
        name = PurePosixPath(path).name
        if REQ_SKIP.search(path):
            facts.notes.append(f"{path}: left out (not needed to run tests)")
            continue
        if name.lower() == "requirements.txt" or re.search(r"(^|[/_.-])(tests?|testing|dev|develop|ci)([/_.-]|$)",
                                                            path, re.IGNORECASE):
            chosen.append(path)
        elif path.startswith("requirements/") and re.search(r"base|main|install|prod|common", name, re.I):
            chosen.append(path)
    # base requirements first, then the others in name order
    chosen.sort(key=lambda p: (0 if re.search(r"(^|/)requirements\.txt$|base|main|common|install", p) else 1, p))
    for path in chosen:
        text = source.read(path) or ""
        facts.requirement_files.append(path)
        facts.deps([line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", "-"))])
        facts.add(path, "requirements", f"{len(text.splitlines())} lines")
