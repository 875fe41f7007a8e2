"""``coharden agent`` (one agent run, the critic at its finish) and ``coharden run`` (the CoHarden loop and its
baselines). Both drive agents; the agent command lives here rather than in :mod:`coharden.agent`, whose
package import is heavy and would slow every start of the CLI.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from coharden.cli.command import Renamed, renamed_flags
from coharden.cli.common import RunOptions, cli_errors, console, err_console, pick_instance, print_counts, run_options
from coharden.cli.llm_options import LLMOptions, ModelOpt, StepLimitOpt, llm_options
from coharden.cli.mpe_options import MutatorOpt
from coharden.cli.options import AgentReadableOpt, IdOpt, IdsOpt, JsonOpt, output_option, ranged, workers_option
from coharden.config import AGENT_TIMEOUT_S, LOOP_AGENT_TIMEOUT_S, Settings
from coharden.errors import CoHardenError
from coharden.escaping import for_rich as esc

#: ``run``'s flags of the loop section, read for one more release as ``-c loop.KEY=VALUE``
LOOP_RENAMED = (Renamed("--tau", "loop.tau"), Renamed("--per-operator", "loop.per_operator"),
                Renamed("--samples", "loop.samples"), Renamed("--seed", "loop.seed"),
                Renamed("--paper-classes", "loop.paper_classes", switch="true"),
                Renamed("--agent-timeout", "agent.timeout"))
#: ``agent``'s flags of the agent section, read for one more release as ``-c agent.KEY=VALUE``
AGENT_RENAMED = (Renamed("--agent-timeout", "agent.timeout"), Renamed("--cost-limit", "agent.cost_limit"),
                 Renamed("--max-iterations", "agent.max_iterations"), Renamed("--threshold", "agent.threshold"))


@cli_errors
@run_options
@renamed_flags(*AGENT_RENAMED)
@llm_options(ModelOpt, "llm_opts", budget=False)
def agent_cmd(
    instance: Annotated[Path, typer.Argument(help="Instance directory, or SWE-bench records (.json/.jsonl).")],
    mode: Annotated[str, typer.Option("--mode", help="test-only, fix-only or joint.")] = "test-only",
    instance_id: IdOpt = None,
    llm_opts: LLMOptions = LLMOptions(),
    command: Annotated[str | None, typer.Option(
        "--command", help="Run this command-line agent instead of the default one (re-invoked until the critic "
        "accepts); {prompt_file} is replaced by the prompt file's path.")] = None,
    agent_readable: AgentReadableOpt = None,
    critic_skill: Annotated[list[Path] | None, typer.Option(
        "--critic-skill", help="A critic skill directory (critic.yaml + detectors); repeatable.")] = None,
    builtins: Annotated[str | None, typer.Option(
        "--builtins", help="Built-in gates, comma-separated (default: all that apply): clean_patch, "
        "structural_validity, ran_the_test, fail_to_pass; 'none' for only --critic-skill.")] = None,
    step_limit: StepLimitOpt = 50,
    output: Annotated[Path, output_option(help="Trajectories and preds.json go here.")
                      ] = Path("coharden-agent"),
    run: RunOptions = RunOptions(),
    as_json: JsonOpt = False,
) -> None:
    """Run an agent on one instance in a throwaway clone; the critic checks every finish (mechanical gates:
    clean patch, structural validity, ran the test, fail-to-pass) and its follow-up is the next turn.

    Writes OUTPUT/<instance_id>.traj.jsonl and OUTPUT/preds.json (SWE-bench / SWT-bench predictions, with the
    patch only when the critic accepted). Exit code 0 when accepted, 1 when not, 2 on errors."""
    from coharden.critic import CriticContext, Mode, default_critic
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.store import Store
    from coharden.execution.workspace import Workspace
    from coharden.instances import resolve_repo

    try:
        run_mode = Mode(mode)
    except ValueError as exc:
        raise CoHardenError(f"--mode: {mode!r} (known: {', '.join(m.value for m in Mode)})") from exc
    settings = run.settings(agent_readable=agent_readable)
    local = pick_instance(instance, instance_id, settings)
    inst = local.instance
    repo = resolve_repo(inst, settings.repos_dir)
    chosen = None if builtins is None else [b.strip() for b in builtins.split(",") if b.strip() not in ("", "none")]
    from coharden.agent import AgentTask

    task = AgentTask.from_instance(inst)
    agent = _agent_for(command, llm_opts, step_limit, settings)
    output.mkdir(parents=True, exist_ok=True)
    trajectory = output / f"{inst.instance_id}.traj.jsonl"
    with InstanceExecutor(inst, repo, settings, Store(settings.store)) as executor, \
            CriticContext(run_mode, executor=executor) as context, Workspace(repo, inst.base_commit) as ws:
        critic = default_critic(context, skills=critic_skill or [], builtins=chosen,
                                threshold=settings.agent.threshold, max_iterations=settings.agent.max_iterations)
        result = agent.run(task, ws, run_mode, critic, trajectory_path=trajectory)
    preds_path = output / "preds.json"
    preds = json.loads(preds_path.read_text()) if preds_path.is_file() else {}
    preds[inst.instance_id] = {"instance_id": inst.instance_id, "model_name_or_path": f"coharden-{agent.name}",
                               "model_patch": result.submission or ""}
    preds_path.write_text(json.dumps(preds, indent=2, sort_keys=True) + "\n")
    summary = {"instance_id": inst.instance_id, "mode": run_mode.value, "agent": agent.name,
               "exit_status": result.exit_status, "accepted": result.accepted, "iterations": result.iterations,
               "cost_usd": result.cost, "error": result.error, "error_kind": result.error_kind,
               "trajectory": str(trajectory),
               "preds": str(preds_path), "critic_scores": [r.score for r in result.critic_results]}
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        mark = "[green]accepted[/]" if result.accepted else f"[red]not accepted[/] ({result.exit_status})"
        console.print(f"{esc(inst.instance_id)} \\[{run_mode.value}] {esc(agent.name)}: {mark} after "
                      f"{result.iterations} follow-up(s); cost "
                      f"{'unknown' if result.cost is None else f'${result.cost:.4f}'}")
        if result.error:
            console.print(f"error: {esc(result.error)}", highlight=False)
        console.print(f"trajectory: {trajectory}\npredictions: {preds_path}")
    raise typer.Exit(0 if result.accepted else 1)


def _agent_confinement(settings: Settings) -> dict[str, Any]:
    """What every agent's bwrap confinement takes from the run's settings."""
    return {"cache_dir": settings.cache_dir, "allow_weak_sandbox": settings.sandbox.allow_weak_sandbox}


def _agent_for(command: str | None, llm_opts: LLMOptions, step_limit: int, settings: Settings):
    """The external command agent for --command, else the default (mini-swe-agent) agent over LLMClient."""
    if command:
        from coharden.agent import ExternalCommandAgent

        timeout = settings.agent.timeout or AGENT_TIMEOUT_S
        return ExternalCommandAgent(command, timeout=timeout, pass_env=settings.sandbox.pass_env,
                                    readable=settings.sandbox.agent_readable, **_agent_confinement(settings))
    client = llm_opts.client(settings, required=True, what="coharden agent (or use --command)")
    try:
        from coharden.agent.mini import MiniSweAgent
    except ImportError as exc:
        raise CoHardenError(f"{exc} (or use --command to run another agent)") from exc
    return MiniSweAgent(client, step_limit=step_limit, cost_limit=settings.agent.cost_limit,
                        python=settings.environment.python,
                        pass_env=settings.sandbox.pass_env, **_agent_confinement(settings))


@cli_errors
@run_options
@renamed_flags(*LOOP_RENAMED)
@llm_options(ModelOpt, "llm_opts", instance_budget=True)
def run_loop(
    instance: Annotated[Path | None, typer.Argument(help="Instance directory or records file.")] = None,
    instances: Annotated[Path | None, typer.Option("--instances", help="SWE-bench records (.json/.jsonl).")] = None,
    instance_id: IdsOpt = None,
    method: Annotated[str, typer.Option("--method", help="coharden, fix-only, fix-with-test, test-only, cogen, "
                                        "self-refine, no-lax-init, no-hardening.")] = "coharden",
    llm_opts: LLMOptions = LLMOptions(),
    rounds: Annotated[int, ranged("--rounds", help="K: joint rounds after round 0.", lo=1)] = 5,
    mutator: MutatorOpt = "mechanical",
    inject_tests: Annotated[Path | None, typer.Option("--inject-tests", help="fix-with-test: SWT-bench test "
                                                      "predictions to give the fix-only agent.")] = None,
    output: Annotated[Path, output_option(help="Output directory.")] = Path("coharden-run"),
    run_name: Annotated[str | None, typer.Option("--run-name", help="model_name_or_path of the outputs.")] = None,
    step_limit: StepLimitOpt = 50,
    workers: Annotated[int | None, workers_option("Instances in parallel.")] = None,
    agent_command: Annotated[str | None, typer.Option("--agent-command", help="Run this command as the agent "
                                                      "(external agent: no model needed with the mechanical "
                                                      "mutator; {prompt_file} is replaced).")] = None,
    agent_readable: AgentReadableOpt = None,
    run: RunOptions = RunOptions(),
) -> None:
    """From an issue to a rigorous reproduction test and a fix: the CoHarden loop, or a baseline. The hardening
    check's settings are the config's ``loop`` section (``-c loop.tau=0.3``, ``loop.seed``, ``loop.samples``,
    ...; ``coharden config keys``)."""
    from coharden.loop.config import Method

    if method not in {m.value for m in Method}:
        raise CoHardenError(f"--method: {method!r} (known: {', '.join(m.value for m in Method)})")
    settings = run.settings(workers=workers, agent_readable=agent_readable)
    chosen = _loop_instances(instance, instances, instance_id, settings)
    own = settings.loop
    words = {"tau": own.tau, "per_operator": own.per_operator, "seed": own.seed}
    loop_words = {"method": method, "rounds": rounds, "mutator": mutator, "paper_classes": own.paper_classes,
                  **{k: v for k, v in words.items() if v is not None}}
    request = _RunRequest(loop_words, output, run_name, step_limit, agent_command, inject_tests)
    summary = _run_loop(chosen, settings, llm_opts, request)
    print_counts(f"{summary['run']}: {summary['finished']}/{summary['instances']} instances ({output})",
                 ("decision", "instances"), summary["decisions"])
    console.print(f"cost: ${summary['cost_usd']:.4f}; inconclusive rounds: {summary['inconclusive_rounds']}")
    for iid, error in summary["errors"].items():
        err_console.print(f"[yellow]{esc(iid)}[/]: {esc(error)}", highlight=False)
    for iid, cause in summary["model_errors"].items():
        err_console.print(f"[red]{esc(iid)}[/]: {esc(cause)}", highlight=False, soft_wrap=True)
    if summary["model_failure"]:
        err_console.print("[bold red]error:[/] no instance produced a fix or a test: the model failed (causes above)")
    raise typer.Exit(1 if summary["errors"] or summary["model_failure"] else 0)


def _loop_instances(instance: Path | None, instances: Path | None, ids: list[str] | None, settings: Settings):
    from coharden.instances import load_instances

    source = instances or instance
    if source is None:
        raise CoHardenError("give an INSTANCE or --instances FILE")
    return [li.instance for li in load_instances(source, settings.cache_dir, ids or None)]


@dataclass(frozen=True)
class _RunRequest:
    """What ``coharden run`` asks of its instances' loops beyond the settings and the model: the loop's words
    (:class:`LoopConfig`'s: method, rounds, mutator, paper_classes and the tau / per_operator / seed given),
    where the run writes and under which name, the agent (``agent_command``, an external one, else the default
    agent with ``step_limit``) and the tests injected (fix-with-test)."""

    loop_words: dict[str, Any]
    output: Path
    run_name: str | None
    step_limit: int
    agent_command: str | None
    inject_tests: Path | None


def _agent_factory(request: _RunRequest, client: Any, settings: Settings):
    """What makes each instance's agent: the external command (its timeout the settings', else the loop's
    default), else the default agent talking to ``client``; both confined as the settings' sandbox says."""
    command = request.agent_command
    if command is not None:
        from coharden.agent.external import ExternalCommandAgent

        timeout = settings.agent.timeout or LOOP_AGENT_TIMEOUT_S

        def external():
            return ExternalCommandAgent(command, timeout=timeout, pass_env=settings.sandbox.pass_env,
                                        readable=settings.sandbox.agent_readable, **_agent_confinement(settings))

        return external
    try:
        from coharden.agent.mini import MiniSweAgent
    except ImportError as exc:
        raise CoHardenError(f"coharden run needs the default agent: {exc} (or use --agent-command)") from exc

    def default():
        return MiniSweAgent(client, step_limit=request.step_limit, python=settings.environment.python,
                            pass_env=settings.sandbox.pass_env, **_agent_confinement(settings))

    return default


def _run_loop(chosen, settings: Settings, llm_opts: LLMOptions, request: _RunRequest) -> dict:
    """The loop (or a baseline) over ``chosen`` as ``request`` asks, with a progress line per running instance;
    the LLM mutator's N is ``settings.loop.samples``."""
    from pydantic import ValidationError
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

    from coharden.execution.store import Store
    from coharden.loop.config import LoopConfig
    from coharden.loop.run import LoopRun
    from coharden.loop.runner import run_all
    from coharden.schema.prediction import load_predictions

    try:
        # model_validate: the loop's words (tau, mutator, seed, ...) are read into its MPEConfig by a validator
        loop_config = LoopConfig.model_validate(request.loop_words)
    except (ValueError, ValidationError) as exc:
        raise CoHardenError(f"coharden run: {exc}") from exc
    method, mutator, seed = loop_config.method.value, loop_config.mutator, loop_config.seed
    client: Any = None  # the LLMClient of the default agent and of LLM mutants (None: neither runs)
    if request.agent_command is None or "llm" in mutator:  # an external agent with mechanical mutants needs no model
        client = llm_opts.client(settings, required=True, what="coharden run")
    agent_factory = _agent_factory(request, client, settings)
    default_name = (f"{method}-external" if request.agent_command is not None
                    else f"{method}-{client.config.model.replace('/', '__')}")
    injected = None
    if request.inject_tests is not None:
        injected = {p.instance_id: p.model_patch or "" for p in load_predictions(request.inject_tests)}
    mutator_factory = None
    if "llm" in mutator:
        from coharden.mutation.llm_operators import LLMMutator, LLMMutatorSettings

        def mutator_factory():
            return LLMMutator(client, LLMMutatorSettings.of(settings.mpe, samples=settings.loop.samples, seed=seed))

    progress = Progress(TextColumn("{task.fields[label]}", markup=False), BarColumn(), MofNCompleteColumn(),
                        TimeRemainingColumn(), TextColumn("{task.description}", markup=False),
                        console=err_console, disable=not err_console.is_terminal)
    with progress:
        task = progress.add_task("", total=len(chosen), label="instances")
        rounds_of: dict[str, TaskID] = {}  # instance id -> its rounds task (while it runs)

        def advance(iid: str, result, error: str | None) -> None:
            progress.update(task, advance=1, description=f"{iid}: {result.decision if result else 'error'}")

        def on_phase(event) -> None:
            """Rounds and phase (agent, gate, mutants) of each running instance, one line each."""
            if event.instance_id not in rounds_of:
                rounds_of[event.instance_id] = progress.add_task("", total=event.rounds, label=event.instance_id)
            line = rounds_of[event.instance_id]
            if event.phase == "done":
                progress.remove_task(rounds_of.pop(event.instance_id))
            else:
                progress.update(line, completed=event.completed, description=event.describe())

        run = LoopRun(settings, loop_config, request.output, request.run_name or default_name, Store(settings.store),
                      client.ledger if client is not None else None, injected or {}, on_phase)
        return run_all(chosen, run, agent_factory, llm_mutator_factory=mutator_factory, progress=advance)
