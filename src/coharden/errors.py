"""Errors that carry a message meant for the user (the CLI prints them without a traceback)."""

from __future__ import annotations


class CoHardenError(Exception):
    """Base class: bad input or an environment problem, explained in the message."""


class InstanceError(CoHardenError):
    """A malformed instance record or manifest (the message names file, line and field)."""


class PatchError(CoHardenError):
    """A patch that cannot be parsed."""


class ApplyError(CoHardenError):
    """A patch that does not apply (the message names the file and the hunk)."""


class RepoError(CoHardenError):
    """Not a git repository, unknown commit, or a git command that failed."""


class SnapshotError(RepoError):
    """The repository lacks an object a commit needs (a snapshot that left out its largest files)."""


class TestIdError(CoHardenError):
    """No test ids to run, or ids that cannot be resolved."""

    __test__ = False


def validation_message(exc: Exception) -> str:
    """A pydantic ``ValidationError`` as one line: ``field a.b: message; ...`` (no input dump, no documentation
    URL); any other exception as its text."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    return "; ".join(f"field {'.'.join(map(str, e['loc'])) or '<record>'}: {e['msg']}" for e in errors())
