"""Python version ranges: which X.Y releases a ``requires-python`` specifier (PEP 440) or a Poetry constraint
admits.

A release X.Y is admitted when *some* X.Y.Z satisfies the specifier: ``>=3.8.1`` admits 3.8, ``<3.9`` does not
admit 3.9. Only the subset of PEP 440 that appears in ``requires-python`` is handled (no pre-releases, no
local versions); an unparsable clause raises :class:`ValueError` so inference can say so instead of guessing.
"""

from __future__ import annotations

import re

#: Releases an environment can be built for (official ``python:X.Y-slim`` images exist for all of them).
KNOWN_VERSIONS = ("3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13")
#: Without a tested version, choose the newest admitted release not newer than this one: the newest
#: release with wide wheel coverage, so old pinned dependencies still install.
DEFAULT_CEILING = "3.12"

_CLAUSE = re.compile(r"^\s*(===|==|!=|~=|>=|<=|>|<)?\s*v?([0-9]+(?:\.[0-9]+)*)(\.\*)?\s*$")


def vkey(version: str) -> tuple[int, ...]:
    """'3.10' -> (3, 10)."""
    return tuple(int(p) for p in version.split("."))


def normalize_version(value: object) -> str | None:
    """A version named in CI / tox / classifiers as 'X.Y', or None. YAML reads ``3.10`` as the float 3.1,
    so '3.1' means 3.10 (Python 3.1 is not a plausible target)."""
    text = str(value).strip().strip("'\"")
    match = re.match(r"^(?:python|py|cpython-?)?\s*(3)\.?(\d{1,2})(?:\.\d+)?(?:\.x)?$", text, re.IGNORECASE)
    if not match:
        return None
    minor = match.group(2)
    if minor == "1" and isinstance(value, float):
        minor = "10"
    version = f"3.{int(minor)}"
    return version if 6 <= int(minor) <= 20 else None


def _pad(parts: tuple[int, ...], size: int = 3) -> tuple[int, ...]:
    return parts + (0,) * (size - len(parts)) if len(parts) < size else parts


def _admits(release: tuple[int, int], op: str, version: tuple[int, ...], wildcard: bool) -> bool:
    low, high = (*release, 0), (*release, 10**6)  # the first and (any) last patch release of X.Y
    v = _pad(version)
    if op in ("==", "==="):
        if wildcard or len(version) <= 2:
            return release[: len(version)] == version[:2][: len(version)]
        return release == version[:2]
    if op == "!=":
        return not (wildcard and release[: len(version)] == version[:2][: len(version)])
    if op == ">=":
        return high >= v
    if op == ">":
        return high > v
    if op == "<=":
        return low <= v
    if op == "<":
        return low < v
    if op == "~=":
        if len(version) < 2:
            raise ValueError("~= needs at least two version components")
        prefix = version[:-1]
        return high >= v and release[: len(prefix)] == prefix[:2][: len(prefix)]
    raise ValueError(f"unknown operator {op!r}")


def _pep440(spec: str, release: tuple[int, int]) -> bool:
    for clause in spec.split(","):
        if not clause.strip():
            continue
        match = _CLAUSE.match(clause)
        if not match:
            raise ValueError(f"cannot read version clause {clause.strip()!r}")
        op = match.group(1) or "=="
        if not _admits(release, op, vkey(match.group(2)), bool(match.group(3))):
            return False
    return True


def poetry_to_pep440(constraint: str) -> str:
    """Poetry's ``^3.8`` / ``~3.8`` / ``3.8.*`` / ``*`` -> a PEP 440 specifier (``||`` kept for the caller)."""
    out: list[str] = []
    for part in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", constraint.strip()):
        part = part.strip()
        if not part or part == "*":
            continue
        if part.startswith("^"):
            nums = vkey(part[1:])
            upper = (nums[0] + 1,) if nums[0] > 0 else nums[:2]
            out += [f">={part[1:]}", f"<{'.'.join(map(str, upper))}"]
        elif part.startswith("~") and not part.startswith("~="):
            nums = vkey(part[1:])
            upper = (nums[0], nums[1] + 1) if len(nums) >= 2 else (nums[0] + 1,)
            out += [f">={part[1:]}", f"<{'.'.join(map(str, upper))}"]
        elif re.match(r"^\d", part):
            out.append(f"=={part}")
        else:
            out.append(part)
    return ",".join(out)


def admitted(spec: str | None, versions: tuple[str, ...] = KNOWN_VERSIONS) -> list[str]:
    """The releases of ``versions`` that ``spec`` admits (all of them for no spec). ``||`` separates
    alternatives (Poetry)."""
    if not spec or not spec.strip():
        return list(versions)
    alternatives = [a for a in spec.split("||") if a.strip()]
    result = []
    for version in versions:
        release = vkey(version)
        if any(_pep440(alt, (release[0], release[1])) for alt in alternatives):
            result.append(version)
    return result
