"""The OpenHands SDK adapter against the real SDK: a Python >= 3.12 environment (found locally, never
downloaded; built once and cached, see tests/agent/openhands_env.py) with openhands-sdk, openhands-tools and this
coharden runs OpenHandsAgent with coharden's critic on the bundled boundary_check example, the SDK's LLM
talking to coharden's mock server (tests/agent/openhands_run.py). Slow: the first run installs the SDK."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.agent.openhands_env import ROOT, find_python312, openhands_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    python = find_python312()
    if python is None:
        pytest.skip("the OpenHands SDK needs Python >= 3.12; none found in ~/.pyenv/versions or on PATH")
    try:
        return openhands_env(python)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"could not install the OpenHands SDK into a {python} environment: {exc}")


def test_openhands_agent_runs_the_coharden_critic_through_the_sdk(sdk_python: Path, tmp_path: Path) -> None:
    env = {**os.environ, "OPENHANDS_SUPPRESS_BANNER": "1", "PYTHONPATH": ""}
    run = subprocess.run([str(sdk_python), str(ROOT / "tests" / "agent" / "openhands_run.py"),
                          str(ROOT / "examples" / "boundary_check"), str(tmp_path)],
                         capture_output=True, text=True, timeout=1200, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-4000:]
    summary = json.loads(run.stdout)  # stdout holds only the summary: the SDK's console visualizer is off
    # the SDK offered its tools and the mock answered every request with scripted tool calls
    assert {"terminal", "finish"} <= set(summary["tools_offered"])
    assert summary["statuses"] == [200, 200, 200, 200]
    # first finish: the critic (ran-the-test gate) rejected; the SDK sent its follow-up; second finish accepted
    assert summary["scores"] == [0.0, 1.0]
    assert summary["iterations"] == 1
    assert "You never ran the test you are submitting" in json.dumps(summary["last_user_message"])
    assert (summary["accepted"], summary["exit_status"]) == (True, "Submitted")
    assert "tests/test_repro.py" in summary["patch"]
    assert "throttle/" not in summary["patch"]
    # SDK events became coharden events (the shell commands the critic reads), and the SDK's cost came back
    assert summary["commands"][-1] == "python -m pytest tests/test_repro.py -q"
    assert summary["events"].count("critic") == 2
    assert summary["cost"] == pytest.approx(4 * (100 * 1e-6 + 20 * 2e-6))
