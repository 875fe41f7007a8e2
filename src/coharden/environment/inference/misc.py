"""Readers of small descriptors: ``.python-version``, ``pytest.ini``, ``tox.ini``, the source layout."""

from __future__ import annotations

import configparser
import re

from coharden.environment.inference.facts import Facts, ini, pytest_config, source_root
from coharden.environment.inference.tox import read_tox_text
from coharden.environment.pyversions import normalize_version
from coharden.environment.sources import EXTENSION_SOURCES, FileSource


def read_misc(source: FileSource, facts: Facts) -> None:
    pin = source.read(".python-version")
    if pin:
        version = normalize_version(pin.strip().splitlines()[0])
        if version:
            facts.pinned = version
            facts.add(".python-version", "pin", version)
    pytest_ini = source.read("pytest.ini")
    if pytest_ini is not None:
        try:
            cfg = ini(pytest_ini)
            if cfg.has_section("pytest"):
                pytest_config(dict(cfg.items("pytest")), "pytest.ini", facts)
        except configparser.Error:
            facts.notes.append("pytest.ini does not parse; ignored")
    tox = source.read("tox.ini")
    if tox is not None:
        read_tox_text(tox, "tox.ini", facts)
    files = source.files()
    if not facts.source_roots:
        src_packages = [p for p in files if re.match(r"^src/[^/]+(/__init__\.py|\.py)$", p)]
        if src_packages:
            source_root("src", "layout", "src/ holds the package", facts)
    if any(p.endswith(EXTENSION_SOURCES) and not p.startswith(("tests/", "docs/")) for p in files):
        facts.compiled = True
    facts.ini_keys = {k.lower() for k in facts.ini_keys}
