"""The CoHarden loop on a bundled example, offline: the default agent talks to the local mock LLM server, which
answers with scripted replies (``examples/<name>/loop-replies.yaml``), so a newcomer sees rounds, temporal
matrices and the loop's decision without a model or a key. Everything else is real: git workspaces, the
critic's gates, pytest verdicts, mutants of each round's fix."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.execution.store import Store
from coharden.instances import load_local
from coharden.llm import CacheMode, CallStore, CostOverride, LLMClient, LLMConfig, MockLLMServer, RulesError
from coharden.loop.config import LoopConfig
from coharden.loop.engine import InstanceLoop, LoopResult, instance_folder
from coharden.loop.progress import ProgressCallback
from coharden.loop.run import LoopRun
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import LOOP_TAU, MPEConfig
from coharden.schema.mutant import Operator

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
#: The loop's own tau (0.2, N = 3 mutants per operator), three joint rounds, decided by Algorithm 1's point rule
#: (``paper_classes``) over the eight operators the scripted replies were written against: the scripted weak round
#: exceeds tau, so the regression shows as it would in a real run. With the default interval rule over distinct
#: behaviours the example's small pools stay Borderline (7 to 9 behaviours, 17 needed), and with the three
#: operators added with them the weak round's laxity is 0.15: the scripted story would not show.
DEMO_OPERATORS = ("incomplete_fix", "behavior_substitution", "symptom_suppression", "input_specific_shortcut",
                  "token_revert", "widened_scope", "narrowed_scope", "caller_patch")
DEMO_CONFIG = LoopConfig(rounds=3, mpe=MPEConfig.for_loop().model_copy(update={
    "paper_classes": True, "operators": [Operator(op) for op in DEMO_OPERATORS]}))
assert DEMO_CONFIG.tau == LOOP_TAU


@dataclass(frozen=True)
class DemoRun:
    """Where a demo run writes (its state, rounds and trajectories), the settings it runs under, and who hears
    every phase of every round (the scripted and the live mode alike)."""

    output: Path
    settings: Settings
    progress: ProgressCallback | None = None


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
    directory = instance_folder(output, result.instance_id)
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


def run_demo(example: Path, demo: DemoRun, *, replies: Path | None = None, config: LoopConfig = DEMO_CONFIG,
             step_limit: int = 10) -> LoopResult:
    """Run the loop on ``example`` (a bundled example directory with ``loop-replies.yaml``) into
    ``demo.output``."""
    settings = demo.settings
    replies = replies or example / REPLIES
    if not replies.is_file():
        raise CoHardenError(f"{replies}: no scripted replies" if replies != example / REPLIES else
                            f"{example}: no scripted replies ({REPLIES}); the demo runs on examples that have one")
    instance = load_local(example, settings.cache_dir).instance
    os.environ.setdefault(KEY_VAR, DEMO_KEY)  # this process's key variable; the mock server checks it
    try:
        server = MockLLMServer(replies, api_key=os.environ[KEY_VAR])
    except RulesError as exc:
        raise CoHardenError(str(exc)) from exc
    with server:
        llm = LLMConfig(model=MODEL, api_base=server.base_url, api_key_env=KEY_VAR, max_retries=0, timeout=60,
                        cost_overrides={MODEL: CostOverride(input_per_token=1e-6, output_per_token=2e-6)})
        client = LLMClient(llm)
        run = LoopRun(settings, config, demo.output, "demo", Store(settings.store), client.ledger,
                      progress=demo.progress)
        return _run_loop(instance, client, run, step_limit)


def _run_loop(instance: Instance, client: LLMClient, run: LoopRun, step_limit: int) -> LoopResult:
    """The loop on one bundled instance with the default agent talking to ``client``."""
    settings = run.settings
    try:
        from coharden.agent.mini import MiniSweAgent
    except ImportError as exc:
        raise CoHardenError(f"the demo needs the default agent: {exc}") from exc
    agent = MiniSweAgent(client, step_limit=step_limit, python=settings.environment.python,
                         cache_dir=settings.cache_dir, allow_weak_sandbox=settings.sandbox.allow_weak_sandbox)
    return InstanceLoop(instance, Path(instance.repo), agent, run).run()


# --- the live mode: the same loop against the local model (scripts/local-model serve) -----------------------

#: Where ``scripts/local-model serve`` listens by default; ``$OPENAI_BASE_URL`` (its first printed line) wins.
LOCAL_BASE = "http://127.0.0.1:8765/v1"
LOCAL_MODEL = "openai/local"
#: A live run at the pace of a 1.5B model on a busy 2-core machine (about 2-6 minutes per reply): one joint
#: round, a few agent steps each, short replies, one request at a time (the server answers one at a time).
LIVE_CONFIG = LoopConfig(rounds=1)
LIVE_STEP_LIMIT = 5
LIVE_MAX_TOKENS = 400
LIVE_TIMEOUT_S = 1800.0
LIVE_KEY_VAR = "COHARDEN_LOCAL_MODEL_KEY"


def local_base(api_base: str | None = None) -> str:
    return (api_base or os.environ.get("OPENAI_BASE_URL") or LOCAL_BASE).rstrip("/")


def check_live_server(api_base: str, *, timeout: float = 30.0) -> list[str]:
    """The model ids the server at ``api_base`` serves; a :class:`CoHardenError` naming how to start it when
    nothing answers there (never a hang: one request with a timeout; a refused connection fails at once)."""
    start = "start it with: scripts/local-model serve --port 8765 &  (then pass --api-base, or set OPENAI_BASE_URL)"
    try:
        with urllib.request.urlopen(f"{api_base}/models", timeout=timeout) as reply:
            data = json.load(reply)
    except TimeoutError as exc:
        raise CoHardenError(f"--live: the server at {api_base} did not answer within {timeout:g} s (busy with "
                            "another request? it answers one at a time); try again when it is idle") from exc
    except (OSError, urllib.error.URLError, ValueError) as exc:
        if isinstance(getattr(exc, "reason", None), TimeoutError):
            raise CoHardenError(f"--live: the server at {api_base} did not answer within {timeout:g} s (busy "
                                "with another request? it answers one at a time)") from exc
        reason = getattr(exc, "reason", exc)
        raise CoHardenError(f"--live: no local model server answers at {api_base} ({reason}); {start}") from exc
    ids = [str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)] if isinstance(data, dict) else []
    if "local" not in ids:
        raise CoHardenError(f"--live: the server at {api_base} serves {ids or 'no model'}, not 'local'; {start}")
    return ids


def run_live(example: Path, demo: DemoRun, *, api_base: str | None = None, config: LoopConfig = LIVE_CONFIG,
             step_limit: int = LIVE_STEP_LIMIT) -> LoopResult:
    """The loop on ``example`` against the local model (``scripts/local-model serve``): every reply is the real
    model's, recorded in ``demo.output/llm-calls.sqlite`` (record mode) beside the trajectories."""
    settings, output = demo.settings, demo.output
    base = local_base(api_base)
    check_live_server(base)
    instance = load_local(example, settings.cache_dir).instance
    os.environ.setdefault(LIVE_KEY_VAR, "sk-local")  # the local server checks no key; litellm wants one
    llm = LLMConfig(model=LOCAL_MODEL, api_base=base, api_key_env=LIVE_KEY_VAR, max_retries=0,
                    timeout=LIVE_TIMEOUT_S, max_tokens=LIVE_MAX_TOKENS, concurrency=1,
                    cost_overrides={LOCAL_MODEL: CostOverride(input_per_token=0.0, output_per_token=0.0)})
    client = LLMClient(llm, store=CallStore(output / "llm-calls.sqlite"), mode=CacheMode.RECORD)
    run = LoopRun(settings, config, output, "live", Store(settings.store), client.ledger, progress=demo.progress)
    return _run_loop(instance, client, run, step_limit)


def replies_from_recording(store: Path) -> list[dict[str, object]]:
    """A live run's recorded replies (its ``llm-calls.sqlite``) as mock rules that answer the requests in the
    order they were recorded, one use each: the run replayed offline by :func:`run_demo` (``--replies``). A
    live request's hash cannot be replayed (its messages hold run-specific paths and timings); the replies'
    order can, as every step the agent takes from them (commands, pytest verdicts, mutants) is deterministic."""
    import sqlite3

    rules: list[dict[str, object]] = []
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT response_json FROM llm_calls ORDER BY created_at, rowid").fetchall()
    for number, (response,) in enumerate(rows, 1):
        reply = json.loads(response)
        rules.append({"name": f"call-{number} ({reply.get('latency_s', 0):.0f} s live)", "times": 1,
                      "reply": reply["content"], "finish_reason": reply.get("finish_reason") or "stop",
                      "usage": {"prompt_tokens": reply.get("prompt_tokens", 0),
                                "completion_tokens": reply.get("completion_tokens", 0)}})
    return rules
