"""What of a fix may take part in its grading: the fix-side guard of ``coharden eval``, with the threat model of the
test side (a fix is as untrusted as a test, and the code it changes runs inside the grading run).

A fix is graded by the golden tests; nothing it brings may change *how* they run. Before the fix is applied:

* **Configuration files are not applied** (dropped, as its test files are, and each reported as tampering):
  pytest's ini files (``pytest.ini``, ``.pytest.ini``), ``conftest.py`` anywhere (also a test file by the default
  patterns), interpreter start-up hooks (``*.pth``, ``sitecustomize.py``, ``usercustomize.py``), package metadata
  (anything in a ``*.dist-info``, ``*.egg-info``, ``*.egg`` or ``EGG-INFO`` directory, ``entry_points.txt``: a
  ``pytest11`` entry point there would be a plugin pytest loads, or one ``-p NAME`` resolves to), and a new
  top-level module named like the runner's own (``pytest``, ``_pytest``, ``pluggy``, ``py``, ``iniconfig``, the
  environment's plugins, coharden's stream plugin): it would shadow the installed one for a process started in
  the checkout.
* **Shared configuration files keep their pytest section**: in ``tox.ini`` (``[pytest]``), ``setup.cfg``
  (``[tool:pytest]``) and ``pyproject.toml`` (``[tool.pytest...]``) only a change of pytest's section is tampering;
  the rest of the change is applied and the section is put back as the base commit has it (where that cannot be
  done exactly, the file's whole change is dropped). A fix that only bumps a dependency in ``setup.cfg`` is
  applied as it is, with no note.
* **The source part is scanned** (:func:`coharden.execution.tampering.scan_source`, the signs shared with the
  test-side scan): library code that imports pytest's internals, names its reports or runner, decides test
  outcomes (``pytest.xfail``), walks the garbage collector or leaves with ``os._exit`` is reported as tampering.
  In pytest's (or pluggy's) own repository the fix necessarily changes the runner: the source is not scanned,
  and the grade says so (a note, not tampering).

Why drop rather than refuse the configuration: a dropped file cannot affect the run, so the grade still says what
the golden tests make of the rest, in SWE-bench's fields. Every tampering note (a dropped configuration file, a
sign in the source, a result the run found rewritten) still makes the fix not resolved: coharden's promise is
"Resolved only for fixes that fix", and a fix that reaches for the runner has not shown that it does
(:func:`coharden.evaluation.grading.grade_fix`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from coharden.errors import ApplyError
from coharden.execution.tampering import scan_source
from coharden.patches import file_path, make_diff, parse

RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "coharden_stream"})
"""Top-level modules of the test runner (a fix adding one at the checkout's top level would shadow it)."""

_RUNNER_MARKERS = ("src/_pytest/__init__.py", "_pytest/__init__.py", "src/pluggy/__init__.py", "pluggy/__init__.py")
"""Files of the base commit that make the repository pytest's or pluggy's own."""

_WHOLE = {"pytest.ini": "pytest's ini file", ".pytest.ini": "pytest's ini file",
          "conftest.py": "a conftest.py (runs before and around every test)",
          "sitecustomize.py": "an interpreter start-up hook (sitecustomize)",
          "usercustomize.py": "an interpreter start-up hook (usercustomize)",
          "entry_points.txt": "package metadata (entry points: pytest plugins)"}
_METADATA_DIRS = (".dist-info", ".egg-info", ".egg")
_SOURCE_ROOTS = ("src", "lib")

_INI_SECTIONS = {"tox.ini": ("pytest", "tool:pytest"), "setup.cfg": ("tool:pytest", "pytest")}
_INI_HEADER = re.compile(r"^\[([^\]\n]*)\]", re.M)
_TOML_HEADER = re.compile(r"^[ \t]*\[\[?[ \t]*([^\]\n]+?)[ \t]*\]\]?[ \t]*(?:#.*)?$", re.M)


@dataclass
class FixScreen:
    """A fix's source part as it is applied, with what was held back and why."""

    source: str
    dropped: list[str] = field(default_factory=list)
    """Files whose change is not applied (configuration)."""
    tampering: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the grade should say that is not tampering (a fix to the runner's own repository)."""


def screen_fix(source: str, base_file: Callable[[str], str | None],
               post_images: Callable[[str], dict[str, str | None]], plugin_modules: Iterable[str] = ()) -> FixScreen:
    """Screen the source part of a fix (see the module docstring). ``base_file``: a file of the base commit
    (None: absent); ``post_images``: the files a patch touches after applying it to the base commit;
    ``plugin_modules``: the modules of the environment's pytest plugins (shadowing them is tampering too)."""
    if not source.strip():
        return FixScreen(source)
    runner_repo = any(base_file(path) is not None for path in _RUNNER_MARKERS)
    shadowed = RUNNER_MODULES | {m.split(".")[0] for m in plugin_modules}
    screen = FixScreen("")
    kept: list[str] = []
    for patched in parse(source):
        path, text = file_path(patched), str(patched)
        why = _whole_file(path) or (None if runner_repo else _shadows(path, shadowed, base_file))
        if why:
            screen.dropped.append(path)
            screen.tampering.append(f"{path}: the fix adds or changes {why}: not applied")
            continue
        names = _section_names(path)
        if names is not None:
            text = _without_pytest_section(path, text, names, base_file, post_images, screen)
        if text:
            kept.append(text)
    screen.source = "".join(kept)
    if runner_repo:
        screen.notes.append("the fix changes the test runner itself (this is pytest's or pluggy's repository): its "
                            "source is not scanned for code reaching into pytest")
    else:
        screen.tampering += scan_source(screen.source)
    return screen


def _whole_file(path: str) -> str | None:
    """What a file that only configures pytest or the interpreter is, else None."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else path
    if name in _WHOLE:
        return _WHOLE[name]
    if name.endswith(".pth"):
        return "an interpreter start-up file (.pth)"
    if any(p.endswith(_METADATA_DIRS) or p == "EGG-INFO" for p in parts[:-1]):
        return "package metadata (a .dist-info / .egg-info directory: entry points, pytest plugins)"
    return None


def _shadows(path: str, shadowed: frozenset[str] | set[str], base_file: Callable[[str], str | None]) -> str | None:
    """Why a file of a new top-level module (at the checkout's root or a source root) shadows the runner's,
    else None (a file the base commit has is the repository's own)."""
    parts = PurePosixPath(path).parts
    if len(parts) > 1 and parts[0] in _SOURCE_ROOTS:
        parts = parts[1:]
    stem = parts[0].split(".")[0] if parts else ""
    if stem in shadowed and base_file(path) is None:
        return f"a top-level module named like the test runner's {stem!r} (it would shadow the installed one)"
    return None


def _section_names(path: str) -> tuple[str, ...] | None:
    name = PurePosixPath(path).name
    if name == "pyproject.toml":
        return ()
    return _INI_SECTIONS.get(name)


def _without_pytest_section(path: str, text: str, names: tuple[str, ...], base_file: Callable[[str], str | None],
                            post_images: Callable[[str], dict[str, str | None]], screen: FixScreen) -> str:
    """The file's change with pytest's section as the base commit has it (``text`` when the change leaves that
    section alone; "" when it cannot be kept apart: the whole change is dropped)."""
    base = base_file(path) or ""
    try:
        post = post_images(text).get(path)
    except ApplyError:
        return text  # it does not apply: the run says so
    post = post or ""
    toml = names == ()
    if _pytest_part(base, names, toml) == _pytest_part(post, names, toml):
        return text
    restored = _restore(post, base, names, toml)
    where = "[tool.pytest]" if toml else "[" + names[0] + "]"
    if restored is None:
        screen.dropped.append(path)
        screen.tampering.append(f"{path}: the fix changes pytest's configuration ({where}): the file's change "
                                "is not applied")
        return ""
    screen.tampering.append(f"{path}: the fix changes pytest's configuration ({where}): that section is kept "
                            "as the base commit has it")
    return make_diff(path, base_file(path), restored) if restored != base else ""


def _ini_sections(text: str) -> list[tuple[str, int, int]]:
    """(name, start, end) of every ``[section]`` of an ini text (iniconfig's rule: a header starts a line)."""
    heads = list(_INI_HEADER.finditer(text))
    return [(m[1].strip(), m.start(), heads[i + 1].start() if i + 1 < len(heads) else len(text))
            for i, m in enumerate(heads)]


def _toml_sections(text: str) -> list[tuple[str, int, int]]:
    heads = list(_TOML_HEADER.finditer(text))
    return [(m[1].strip().replace(" ", "").replace('"', ""), m.start(),
             heads[i + 1].start() if i + 1 < len(heads) else len(text)) for i, m in enumerate(heads)]


def _is_pytest_table(name: str) -> bool:
    return name == "tool.pytest" or name.startswith("tool.pytest.")


def _pytest_part(text: str, names: tuple[str, ...], toml: bool) -> Any:
    """pytest's part of a configuration text (a TOML file: its ``tool.pytest`` table, as data)."""
    if toml:
        try:
            return ("ok", tomllib.loads(text).get("tool", {}).get("pytest")) if text else ("ok", None)
        except tomllib.TOMLDecodeError:
            return ("unparsable", text)
    return "".join(text[s:e] for name, s, e in _ini_sections(text) if name in names)


def _restore(post: str, base: str, names: tuple[str, ...], toml: bool) -> str | None:
    """``post`` with pytest's sections replaced by ``base``'s, or None when the result does not have exactly
    ``base``'s pytest part and ``post``'s other content (a TOML file using dotted keys or inline tables)."""
    sections = _toml_sections if toml else _ini_sections

    def mine(name: str) -> bool:
        return _is_pytest_table(name) if toml else name in names

    old = "".join(base[s:e] for name, s, e in sections(base) if mine(name))
    cut = [(s, e) for name, s, e in sections(post) if mine(name)]
    at = cut[0][0] if cut else len(post)
    kept = post
    for s, e in reversed(cut):
        kept = kept[:s] + kept[e:]
    if old and at >= len(kept) and kept and not kept.endswith("\n"):
        kept += "\n"
    at = min(at, len(kept))
    restored = kept[:at] + old + kept[at:]
    if _pytest_part(restored, names, toml) != _pytest_part(base, names, toml):
        return None
    if toml:
        try:
            rest = tomllib.loads(restored)
            wanted = tomllib.loads(post)
        except tomllib.TOMLDecodeError:
            return None
        rest.get("tool", {}).pop("pytest", None)
        wanted.get("tool", {}).pop("pytest", None)
        if {k: v for k, v in rest.items() if v != {}} != {k: v for k, v in wanted.items() if v != {}}:
            return None
    return restored
