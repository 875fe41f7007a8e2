"""Reading back a file a test could have touched: its JUnit XML, the result stream, its output, an instrumented
run's records, a file of its worktree.

coharden reads these outside the sandbox. A test can replace any of them (or a directory on the way to them)
with a symbolic link to a host file, which coharden would then read and store (``~/.ssh/id_rsa`` in a verdict's
output), or with a fifo, on which a plain ``open`` blocks forever. Every such read goes through :func:`read_bytes`:
each path component below a trusted ``anchor`` is opened without following links, the file without blocking
(``O_NONBLOCK``: a fifo opens at once), and it is read only if it is a regular file, at most ``limit`` bytes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

DEFAULT_LIMIT = 64 << 20  # bytes: far above any JUnit file or result stream of a real run

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafeFile(OSError):
    """The file (or a directory on its way) is a link, not a regular file, or larger than the limit: it was not
    read. ``why`` says which, in words a tampering note can carry."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


class OversizeFile(UnsafeFile):
    """The file is larger than the limit the grader reads: no tampering, a size (``size`` bytes over ``limit``)."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(path, f"it is larger than {limit} bytes ({size} bytes)")
        self.size = size
        self.limit = limit


def _open(path: Path, anchor: Path) -> int:
    """A descriptor of ``path`` opened for reading, walking from ``anchor`` (opened normally: the caller trusts
    it) one component at a time, none of them followed if it is a link."""
    try:
        parts = path.relative_to(anchor).parts
    except ValueError as exc:
        raise ValueError(f"{path} is not inside {anchor}") from exc
    if not parts:
        raise ValueError(f"{path}: the anchor itself is not a file")
    if ".." in parts:  # relative_to is lexical: a/../../x would climb out of the anchor
        raise ValueError(f"{path} leaves {anchor} ('..')")
    fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if _is_link(part, fd) or exc.errno == getattr(os, "ENOTDIR", 20):
                    raise UnsafeFile(path, f"{part} on its way is a link or not a directory") from exc
                raise
            os.close(fd)
            fd = inner
        try:
            return os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            if _is_link(parts[-1], fd):
                raise UnsafeFile(path, "it is a symbolic link") from exc
            raise
    finally:
        os.close(fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_regular(path: Path, anchor: Path | None, limit: int | None) -> tuple[int, int]:
    """(descriptor, size) of the regular file ``path``, opened as :func:`_open` opens it (from ``anchor``, default
    its parent); :class:`UnsafeFile` for anything else, :class:`OversizeFile` over ``limit`` bytes (None: any
    size). The caller closes the descriptor."""
    fd = _open(path, Path(anchor) if anchor is not None else path.parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(path, "it is not a regular file (a fifo, a device or a directory)")
        if limit is not None and info.st_size > limit:
            raise OversizeFile(path, info.st_size, limit)
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def iter_bytes(path: Path, *, limit: int = DEFAULT_LIMIT, anchor: Path | None = None,
               chunk: int = 1 << 20) -> Iterator[bytes]:
    """The content of the regular file ``path`` in chunks, opened as :func:`read_bytes` opens it, for a reader
    that keeps only what it needs of a large file (a JUnit file parsed as it is read). :class:`OversizeFile` once
    it is (or grows) over ``limit`` bytes; :class:`UnsafeFile` and ``OSError`` as :func:`read_bytes`."""
    path = Path(path)
    fd, _ = _open_regular(path, anchor, limit)
    try:
        size = 0
        while True:
            data = os.read(fd, chunk)
            if not data:
                return
            size += len(data)
            if size > limit:  # it grew while being read
                raise OversizeFile(path, size, limit)
            yield data
    finally:
        os.close(fd)


def read_bytes(path: Path, *, limit: int = DEFAULT_LIMIT, anchor: Path | None = None, tail: bool = False) -> bytes:
    """The content of the regular file ``path``, never through a link, never blocking.

    ``anchor``: a directory no test can replace (default: ``path``'s parent), from which every component is
    opened without following links. Raises :class:`UnsafeFile` (an ``OSError``) for a link, a fifo, a device,
    a directory, or a file over ``limit`` bytes (``tail``: its last ``limit`` bytes are returned instead), and
    ``OSError`` when the file cannot be opened (``FileNotFoundError`` when it is not there)."""
    path = Path(path)
    fd, size = _open_regular(path, anchor, None if tail else limit)
    try:
        if size > limit:  # tail: its last ``limit`` bytes
            os.lseek(fd, size - limit, os.SEEK_SET)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # it grew while being read
            if not tail:
                raise OversizeFile(path, len(data), limit)
            data = data[-limit:]
        return data
    finally:
        os.close(fd)


def read_text(path: Path, *, limit: int = DEFAULT_LIMIT, anchor: Path | None = None, tail: bool = False,
              errors: str = "replace") -> str:
    """:func:`read_bytes` decoded as UTF-8."""
    return read_bytes(path, limit=limit, anchor=anchor, tail=tail).decode("utf-8", errors=errors)
