"""What the attack files share: the bundled example they attack, the header of every attack test, and the
helpers that turn an attack's body into a test patch or read the store back."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import pytest

from coharden.execution.executor import InstanceExecutor
from coharden.execution.sandbox import bwrap_path
from coharden.patches import make_patch
from coharden.schema.testpatch import TestPatch

EXAMPLE = Path(__file__).parents[2] / "examples" / "printer_brackets"

#: the imports every attack test starts with
HEADER = "import os, sys, time\nfrom tinyexpr import sstr, symbols\n\n\n"

#: without bwrap the attacks would run unconfined: every attack module is marked with this
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bwrap cannot build a sandbox on this machine "
                                 "(not installed, or no user/PID namespaces): the attacks would run unconfined")

#: secrets a user may have in coharden's environment: none may reach a test or an agent's command
SECRETS = {"OPENAI_API_KEY": "sk-attack-openai", "AWS_SECRET_ACCESS_KEY": "attack-aws-secret",
           "GITHUB_TOKEN": "ghp_attack_token", "COHARDEN_LLM_API_KEY": "attack-coharden-key",
           "DATABASE_URL": "postgres://user:attack-db-password@host/db", "SSH_AUTH_SOCK": "/tmp/attack-agent.sock",
           "LC_ATTACK_KEY": "attack-in-an-allowed-prefix"}


def patch_of(body: str, path: str = "tests/test_attack.py") -> str:
    """A patch adding one attack test file: the header and ``body`` (dedented)."""
    return make_patch([(path, None, HEADER + textwrap.dedent(body))])


def attack(executor: InstanceExecutor, body: str, *, path: str = "tests/test_attack.py",
           extra: dict[str, str] | None = None) -> TestPatch:
    """The attack as a test patch of ``executor``'s instance; ``extra`` replaces whole files of the base."""
    files = [(path, None, HEADER + textwrap.dedent(body))]
    files += [(p, executor.base_file(p), c) for p, c in (extra or {}).items()]
    return executor.test_patch(make_patch(files), name="attack")


def store_rows(path: Path) -> list[tuple]:
    """Every stored verdict of the SQLite store at ``path`` (key, outcome, verdict), sorted."""
    with sqlite3.connect(path) as conn:
        return sorted(conn.execute("SELECT key, outcome, verdict FROM verdicts").fetchall())
