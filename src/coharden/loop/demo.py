"""The CoHarden loop on a bundled example, offline: the default agent talks to the local mock LLM server, which
answers with scripted replies (``examples/<name>/loop-replies.yaml``), so a newcomer sees rounds, temporal
matrices and the loop's decision without a model or a key. Everything else is real: git workspaces, the
critic's gates, pytest verdicts, mutants of each round's fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.execution.store import Store
from coharden.instances import load_local
from coharden.llm import CostOverride, LLMClient, LLMConfig, MockLLMServer, RulesError
from coharden.loop.config import LoopConfig
from coharden.loop.engine import InstanceLoop, LoopResult
from coharden.loop.progress import ProgressCallback
from coharden.schema.mpe_config import LOOP_TAU

REPLIES = "loop-replies.yaml"
#: The example the demo runs by default, relative to the current directory, else to the checkout coharden was
#: installed from (an editable install: ``src/coharden/loop/demo.py`` -> ``examples/boundary_check``).
DEFAULT_EXAMPLE = Path("examples/boundary_check")
#: Where the loop ends when the scripted replies play out as written.
DEMO_DECISION = "clean"
MODEL = "openai/demo-model"
#: The variable the demo's key is read from (a made-up key: the mock server checks it like a provider would).
KEY_VAR = "COHARDEN_DEMO_KEY"
DEMO_KEY = "sk-coharden-demo"
#: The loop's own defaults (tau 0.2, N = 3 mutants per operator), three joint rounds: the scripted weak round
#: exceeds the default tau, so the regression shows as it would in a real run.
DEMO_CONFIG = LoopConfig(rounds=3)
assert DEMO_CONFIG.tau == LOOP_TAU


def find_example(example: Path | None) -> Path:
    """The example directory: ``example`` as given, or the default one here or in coharden's own checkout."""
    if example is not None:
        if not example.is_dir():
            raise CoHardenError(f"{example}: no such example directory")
        return example
    checkout = Path(__file__).resolve().parents[3] / DEFAULT_EXAMPLE
    for candidate in (DEFAULT_EXAMPLE, checkout):
        if candidate.is_dir():
            return candidate
    raise CoHardenError(f"{DEFAULT_EXAMPLE}: not found here, nor in coharden's checkout; give the example's "
                        "directory (e.g. coharden demo loop path/to/coharden/examples/boundary_check)")


def first_cause(result: LoopResult, output: Path) -> str:
    """Why a demo run did not end as scripted, in the words of the first thing that went wrong: the first
    critic rejection (a gate's own follow-up, e.g. a harness error of the F->P check) or gate failure of a
    round, else how the instance ended. A model error the mock answers once its script is off course ("no
    rule matched") is a consequence and comes last."""
    directory = output / "instances" / result.instance_id
    for outcome in result.rounds:
        rejection = _first_rejection(directory / f"round{outcome.round}.traj.jsonl")
        if rejection:
            return f"round {outcome.round}: the critic rejected the submission: {rejection}"
        if outcome.decision == "gate_failed" and outcome.note and not outcome.error_kind:
            return f"round {outcome.round}: {outcome.note}"
    if result.note:
        return f"{result.decision}: {result.note}"
    for outcome in result.rounds:
        if outcome.note:
            return f"round {outcome.round} ({outcome.decision}): {outcome.note}"
    return f"the loop ended with {result.decision}, not {DEMO_DECISION}"


def _first_rejection(trajectory: Path) -> str:
    """The first rejecting critic event of a trajectory: its follow-up (what the gates said), else its message."""
    try:
        lines = trajectory.read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.get("kind") == "critic" and event.get("accepted") is False:
            text = str(event.get("followup") or event.get("message") or "rejected")
            return " ".join(text.split())[:600]
    return ""


def run_demo(example: Path, output: Path, settings: Settings, *, replies: Path | None = None,
             config: LoopConfig = DEMO_CONFIG, progress: ProgressCallback | None = None) -> LoopResult:
    """Run the loop on ``example`` (a bundled example directory with ``loop-replies.yaml``) into ``output``."""
    replies = replies or example / REPLIES
    if not replies.is_file():
        raise CoHardenError(f"{replies}: no scripted replies" if replies != example / REPLIES else
                            f"{example}: no scripted replies ({REPLIES}); the demo runs on examples that have one")
    try:
        from coharden.agent.mini import MiniSweAgent
    except ImportError as exc:
        raise CoHardenError(f"the demo needs the default agent: {exc}") from exc
    local = load_local(example, settings.cache_dir)
    instance = local.instance
    os.environ.setdefault(KEY_VAR, DEMO_KEY)  # this process's key variable; the mock server checks it
    try:
        server = MockLLMServer(replies, api_key=os.environ[KEY_VAR])
    except RulesError as exc:
        raise CoHardenError(str(exc)) from exc
    with server:
        llm = LLMConfig(model=MODEL, api_base=server.base_url, api_key_env=KEY_VAR, max_retries=0, timeout=60,
                        cost_overrides={MODEL: CostOverride(input_per_token=1e-6, output_per_token=2e-6)})
        client = LLMClient(llm)
        agent = MiniSweAgent(client, step_limit=10, python=settings.python, cache_dir=settings.cache_dir,
                             allow_weak_sandbox=settings.allow_weak_sandbox)
        loop = InstanceLoop(instance, Path(instance.repo), settings, agent, config, output,
                            store=Store(settings.store), ledger=client.ledger, run_name="demo", progress=progress)
        return loop.run()
