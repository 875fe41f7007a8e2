"""The CoHarden loop on a bundled example, offline: the default agent talks to the local mock LLM server, which
answers with scripted replies (``examples/<name>/loop-replies.yaml``), so a newcomer sees rounds, temporal
matrices and the loop's decision without a model or a key. Everything else is real: git workspaces, the
critic's gates, pytest verdicts, mutants of each round's fix."""

from __future__ import annotations

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

REPLIES = "loop-replies.yaml"
MODEL = "openai/demo-model"
#: The variable the demo's key is read from (a made-up key: the mock server checks it like a provider would).
KEY_VAR = "COHARDEN_DEMO_KEY"
DEMO_KEY = "sk-coharden-demo"
#: Every mutant (no sampling) and a cutoff the demo's weak round exceeds, so each branch shows.
DEMO_CONFIG = LoopConfig(rounds=3, samples=50, tau=0.1)


def run_demo(example: Path, output: Path, settings: Settings, *, replies: Path | None = None,
             config: LoopConfig = DEMO_CONFIG, progress: ProgressCallback | None = None) -> LoopResult:
    """Run the loop on ``example`` (a bundled example directory with ``loop-replies.yaml``) into ``output``."""
    replies = replies or example / REPLIES
    if not replies.is_file():
        raise CoHardenError(f"{example}: no scripted replies ({REPLIES}); the demo runs on examples that have one")
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
        agent = MiniSweAgent(client, step_limit=10, python=settings.python)
        loop = InstanceLoop(instance, Path(instance.repo), settings, agent, config, output,
                            store=Store(settings.store), ledger=client.ledger, run_name="demo", progress=progress)
        return loop.run()
