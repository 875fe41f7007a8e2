"""A core-only install (no LLM, agent or plot extras) runs the CoHarden loop: ``coharden run`` with the
mechanical mutator and an external agent command, on a bundled example.

The run is a real subprocess in which the extras' modules cannot be imported (a meta-path finder refuses
them), so an import of litellm, httpx, mini-swe-agent, matplotlib, ray or the OpenHands SDK anywhere on the
path fails the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coharden.schema.round_record import load_run_file

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "boundary_check"
EXTRAS = ("litellm", "httpx", "minisweagent", "matplotlib", "ray", "openhands")

BLOCK = f"""
import sys
from importlib.abc import MetaPathFinder

class NoExtras(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS!r}:
            raise ImportError(f"{{name}} is not part of a core install")
        return None

sys.meta_path.insert(0, NoExtras())
from coharden.cli import app
app(prog_name="coharden")
"""

TEST = """\
from throttle import RateLimiter, is_allowed, recent_hits, retry_after


def test_repro_limit():
    assert not is_allowed([0, 1, 2], now=5, limit=3, window=60)
    assert is_allowed([0, 1], now=5, limit=3, window=60)
    assert retry_after([0, 1, 2], now=5, limit=3, window=60) == 55
    assert retry_after([0, 1], now=5, limit=3, window=60) == 0
    assert recent_hits([0, 10, 50], now=60, window=60) == [10, 50]
    limiter = RateLimiter(limit=3, window=60)
    assert [limiter.allow(now=t) for t in (0, 1, 2, 5)] == [True, True, True, False]
"""

#: the external agent: writes the test (every mode but fix-only) and, in a joint round, applies the fix
AGENT = """\
import os, pathlib, subprocess, sys
mode = os.environ["COHARDEN_MODE"]
test = pathlib.Path(os.environ["CORE_TEST_FILE"]).read_text()
if mode == "joint":
    test += "\\n\\ndef test_repro_window():\\n    assert is_allowed([0], now=60, limit=1, window=60)\\n"
    subprocess.run(["git", "apply", os.environ["CORE_FIX_FILE"]], check=True)
pathlib.Path("tests").mkdir(exist_ok=True)
pathlib.Path("tests/test_repro.py").write_text(test)
"""


def test_blocked_extras_really_fail_to_import(tmp_path: Path) -> None:
    probe = BLOCK.replace('from coharden.cli import app\napp(prog_name="coharden")', "import litellm")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "litellm is not part of a core install" in proc.stderr


@pytest.mark.slow  # a real loop: two agent runs, one mechanical MPE
def test_core_install_runs_the_loop_with_an_external_agent(tmp_path: Path) -> None:
    agent, test_file = tmp_path / "agent.py", tmp_path / "test_repro.py"
    agent.write_text(AGENT)
    test_file.write_text(textwrap.dedent(TEST))
    env = {**os.environ, "COHARDEN_CACHE": str(tmp_path / "cache"), "CORE_TEST_FILE": str(test_file),
           "CORE_FIX_FILE": str(EXAMPLE / "fix.patch")}
    env.pop("COHARDEN_LLM_MODEL", None)
    out = tmp_path / "out"
    # the critic accepts a test the trajectory ran: the agent command runs it after writing it
    command = f"{sys.executable} {agent} && {sys.executable} -m pytest -q tests/test_repro.py; true"
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK, "run", str(EXAMPLE), "--agent-command", command,
         "--mutator", "mechanical", "--rounds", "1", "--samples", "2", "--run-name", "core", "-o", str(out),
         "--store", str(tmp_path / "s.sqlite"), "--workers", "1", "--timeout", "60",
         # the agent command runs in the sandbox: it reads its files and variables only when shown them
         "--agent-readable", str(tmp_path), "--agent-readable", str(EXAMPLE),
         "--pass-env", "CORE_TEST_FILE", "--pass-env", "CORE_FIX_FILE"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = load_run_file(out / "rounds" / "core.jsonl")
    assert [(r.round, r.decision) for r in records][0] == (0, "lax_init"), records[0].meta
    hardening = records[1]
    assert hardening.round == 1, hardening.meta
    assert hardening.admissible  # the mechanical mutants of the agent's fix ran against both tests
    assert hardening.usd == 0.0  # no model anywhere
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == {}
    fixes = [json.loads(line) for line in (out / "fixes.jsonl").read_text().splitlines()]
    assert "limit" in fixes[0]["model_patch"]
