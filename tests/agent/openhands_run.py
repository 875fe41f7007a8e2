"""Run by tests/test_openhands_sdk.py with the interpreter of a Python >= 3.12 environment holding the OpenHands
SDK: the coharden OpenHands adapter (OpenHandsAgent + the critic adapter) on the bundled boundary_check example,
test-only mode, the SDK's own LLM talking to coharden's mock server (native tool calls). Prints a JSON summary.

The scripted model: writes a test and finishes without running it (the critic's ran-the-test gate rejects, the
SDK sends the critic's follow-up), then runs the test and finishes again (accepted)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from pydantic import SecretStr

from coharden.agent.openhands import OpenHandsAgent
from coharden.critic import CriticContext, default_critic
from coharden.execution.workspace import Workspace
from coharden.instances import load_local
from coharden.llm import MockLLMServer

TEST = textwrap.dedent("""\
    from throttle import is_allowed


    def test_repro_limit():
        assert not is_allowed([0, 1, 2], now=5, limit=3, window=60)
    """)


def call(name: str, **arguments: object) -> dict:
    return {"times": 1, "tool_calls": [{"name": name, "arguments": arguments}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20}}


RULES = [
    call("terminal", command=f"mkdir -p tests && cat > tests/test_repro.py <<'EOF'\n{TEST}EOF"),
    call("finish", message="I wrote the reproduction test."),
    call("terminal", command="python -m pytest tests/test_repro.py -q"),
    call("finish", message="The test fails on the buggy code, as it should."),
]


def main(example: Path, scratch: Path) -> None:
    from openhands.sdk import LLM

    local = load_local(example, scratch / "cache")
    instance = local.instance
    with MockLLMServer(RULES) as server:
        llm = LLM(model="openai/mock-model", base_url=server.base_url, api_key=SecretStr("sk-mock"),
                  usage_id="agent", num_retries=0, input_cost_per_token=1e-6, output_cost_per_token=2e-6)
        critic = default_critic(CriticContext("test-only"), builtins=["clean_patch", "ran_the_test"],
                                max_iterations=2)
        with Workspace(Path(instance.repo), instance.base_commit) as workspace:
            result = OpenHandsAgent(llm).run(instance.problem_statement, workspace, "test-only", critic,
                                             trajectory_path=scratch / "traj.jsonl")
        requests = server.requests
    followups = [m["content"] for r in requests for m in r.messages if m.get("role") == "user"]
    print(json.dumps({
        "accepted": result.accepted, "exit_status": result.exit_status, "iterations": result.iterations,
        "scores": [r.score for r in result.critic_results], "patch": result.patch, "cost": result.cost,
        "requests": len(requests), "statuses": [r.status for r in requests],
        "tools_offered": sorted({t["function"]["name"] for r in requests for t in (r.body.get("tools") or [])}),
        "last_user_message": followups[-1] if followups else "",
        "events": [e["kind"] for e in result.events],
        "commands": [e.get("command") for e in result.events if e["kind"] == "action"],
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
