"""Shared fixtures: small throwaway git repositories built with real git, and patches made with ``git diff``."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from coharden.config import Settings
from coharden.llm import MockLLMServer


def pytest_configure(config: pytest.Config) -> None:
    """The throwaway projects below need no pytest plugins; not auto-loading the ones installed in this
    environment (anyio, pytest-timeout, ...) roughly halves the start-up time of every inner pytest process.
    Not in an xdist controller: the workers it starts inherit its environment and need their plugins."""
    if getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")

def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long end-to-end tests (marked ``slow``) first: xdist hands tests out in collection order, and a
    two-minute test handed out last makes one worker run alone at the end of the suite."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@localhost",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def processes_with(marker: str, wait: float = 5.0) -> list[int]:
    """Host pids whose command line contains ``marker``, after waiting up to ``wait`` s for them to go away."""
    import time

    deadline = time.monotonic() + wait
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in cmdline and state != "Z":
                found.append(int(entry.name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def default_sigint() -> None:
    """``preexec_fn`` of a child that a Ctrl-C test interrupts: a test run started in the background (``cmd &``
    without job control) ignores SIGINT, and an ignored signal is inherited; the child must get the handling a
    terminal user's process has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_git(repo: Path, *args: str, input: str | None = None) -> str:
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(["git", *args], cwd=repo, input=input, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def write_files(root: Path, files: Mapping[str, str | None]) -> None:
    """Write (or, for None, delete) files below ``root``; contents are dedented."""
    for rel, content in files.items():
        target = root / rel
        if content is None:
            target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(content))


def make_repo(path: Path, files: Mapping[str, str]) -> tuple[Path, str]:
    """A git repository at ``path`` holding ``files`` in one commit; returns (path, commit sha)."""
    path.mkdir(parents=True, exist_ok=True)
    write_files(path, files)
    run_git(path, "init", "--quiet", "--initial-branch=main")
    run_git(path, "add", "-A")
    run_git(path, "commit", "--quiet", "--no-gpg-sign", "-m", "base")
    return path, run_git(path, "rev-parse", "HEAD").strip()


def make_patch(repo: Path, changes: Mapping[str, str | None]) -> str:
    """The ``git diff`` of ``changes`` (path -> new content, None: delete) against HEAD; the checkout is then
    restored, so the repository is left exactly as it was."""
    write_files(repo, changes)
    try:
        run_git(repo, "add", "-A", "--", *changes)
        return run_git(repo, "diff", "--cached", "--no-color", "--no-ext-diff")
    finally:
        run_git(repo, "reset", "--quiet", "--hard", "HEAD")


# --- a small buggy project used by the verdict tests ----------------------------------------------------

CALC_FILES = {
    "calc/__init__.py": """\
        def add(a, b):
            return a - b


        def mul(a, b):
            return a * b
        """,
    "tests/__init__.py": "",
    "tests/test_calc.py": """\
        from calc import add, mul


        def test_mul():
            assert mul(2, 3) == 6
        """,
    "setup.cfg": "[tool:pytest]\n",
}

CALC_FIX = {
    "calc/__init__.py": """\
        def add(a, b):
            return a + b


        def mul(a, b):
            return a * b
        """,
}


def calc_test_file(*bodies: str) -> dict[str, str]:
    """tests/test_calc.py with the existing test plus ``bodies`` appended (each a dedented test function)."""
    base = textwrap.dedent(CALC_FILES["tests/test_calc.py"])
    extra = "".join("\n\n" + textwrap.dedent(b).strip() + "\n" for b in bodies)
    return {"tests/test_calc.py": base + extra}


GOOD_TEST = """\
    def test_add():
        assert add(2, 3) == 5
    """


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(timeout=30, store=tmp_path / "store.sqlite", cache_dir=tmp_path / "cache", workers=1)


@pytest.fixture
def mock_llm() -> Iterator[Callable[[list[dict[str, Any]]], MockLLMServer]]:
    """Start a local OpenAI-compatible mock LLM server with the given rules; all are stopped at teardown."""
    servers: list[MockLLMServer] = []

    def start(rules: list[dict[str, Any]]) -> MockLLMServer:
        server = MockLLMServer(rules)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def repo_factory(tmp_path: Path) -> Callable[..., tuple[Path, str]]:
    counter = iter(range(1000))

    def factory(files: Mapping[str, str], name: str | None = None) -> tuple[Path, str]:
        return make_repo(tmp_path / (name or f"repo{next(counter)}"), files)

    return factory


@pytest.fixture
def calc_repo(repo_factory) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    return repo_factory(CALC_FILES, name="calc")


@pytest.fixture
def calc_fix(calc_repo: tuple[Path, str]) -> str:
    return make_patch(calc_repo[0], CALC_FIX)


# fixture projects (critic skills, environment-inference repositories) are data, not tests of coharden
collect_ignore_glob = ["fixtures/*"]
