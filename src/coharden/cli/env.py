"""``coharden env ...``: environments for real repositories (infer a plan, build it, run under mock services);
``coharden reproduce`` (:mod:`coharden.cli.reproduce`) shares its arguments and the plan inference.

Mounted on the main app by :mod:`coharden.cli.main`; the layers below are imported inside the commands.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from coharden.cli.command import Renamed, renamed_flags
from coharden.cli.common import RUN_RENAMED, cli_errors, console, err_console, new_app, read_text
from coharden.cli.common import fail as _fail
from coharden.cli.common import settings_from as _settings
from coharden.cli.llm_options import LLMOptions, llm_options, model_option
from coharden.cli.options import ConfigOpt, JsonOpt, output_option
from coharden.errors import CoHardenError

env_app = new_app(help="Environments for real repositories: infer a plan, build it (venv or Docker), "
                  "smoke-test it, refine it with a model.")

RepoArg = Annotated[Path, typer.Argument(help="A local git repository.")]
CommitOpt = Annotated[str, typer.Option("--commit", help="Commit to build the environment for.")]
ModelOpt = Annotated[str | None, model_option("litellm model name (default $COHARDEN_LLM_MODEL; no model: no "
                                              "refinement / generation / labels).")]
#: The build flags that set a ``build`` key (read for one release, as ``-c build.KEY=VALUE``).
BUILD_RENAMED = (Renamed("--docker", "build.docker", switch="true"), Renamed("--base-python", "build.base_python"),
                 Renamed("--installer", "build.installer"), Renamed("--smoke", "build.smoke", switch="true"),
                 Renamed("--no-smoke", "build.smoke", switch="false"), Renamed("--sample", "build.smoke_sample"),
                 Renamed("--seed", "build.smoke_seed"), Renamed("--max-attempts", "build.max_attempts"))
#: the model options of the env and reproduce commands that may call a model
with_llm_options = llm_options(ModelOpt, "llm_opts")


def _load_plan(path: Path) -> Any:
    from coharden.environment.plan import EnvPlan

    if not path.is_file():
        raise CoHardenError(f"{path}: plan file not found")
    return EnvPlan.from_json(read_text(path, "plan"), source=str(path))


def _outside_top(repo: Path, commit: str, *, directory: bool, quiet: bool = False) -> str | None:
    """None when ``repo`` is the top of a git repository; else what it is (inside one, or in none), which only
    ``directory`` mode at HEAD accepts (the directory's files on disk are used)."""
    from coharden.execution.git import git

    if not repo.is_dir():
        raise CoHardenError(f"{repo}: not a directory")
    top = git(["rev-parse", "--show-toplevel"], repo, check=False)
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == repo.resolve():
        return None
    inside = f"lies inside the git repository {top.stdout.strip()}" if top.returncode == 0 else \
        "is not a git repository"
    if not directory or commit != "HEAD":
        raise CoHardenError(f"{repo}: {inside}; give the repository's top directory")
    if not quiet:
        err_console.print(f"[dim]{repo} {inside}: analysing the files of this directory only[/]")
    return inside


def infer_plan(repo: Path, commit: str, *, directory: bool = False, quiet: bool = False) -> Any:
    """The plan of ``repo`` at ``commit``. ``repo`` must be the top of a git repository, not a directory inside
    one (whose enclosing repository would be analysed instead); with ``directory``, such a directory, or one
    outside any repository, is analysed alone, as its files are on disk."""
    from coharden.environment.inference import infer_plan
    from coharden.environment.sources import DirSource, GitSource

    if _outside_top(repo, commit, directory=directory, quiet=quiet) is not None:
        return infer_plan(DirSource(repo.resolve()), repo=str(repo.resolve()), commit="")
    source = GitSource(repo, commit)
    return infer_plan(source, repo=str(source.repo), commit=source.commit)


def _build_target(repo: Path, commit: str, cache_dir: Path) -> tuple[Path, str]:
    """The (repository, commit) ``env build`` builds: ``repo`` itself, or for a directory that ``env infer``
    analyses alone (inside a repository, or in none), a repository of the files it reads there, committed once
    and cached by their contents, so the plan and the build see the same files."""
    from coharden.environment.sources import DirSource
    from coharden.execution.snapshot import snapshot_files

    if _outside_top(repo, commit, directory=True) is None:
        return repo, commit
    root = repo.resolve()
    return snapshot_files(root, DirSource(root).files(), cache_dir / "directories")


# --- coharden env ------------------------------------------------------------------------------------------------
@env_app.command("infer")
@cli_errors
def envinfer_plan(
    repo: RepoArg,
    commit: CommitOpt = "HEAD",
    output: Annotated[Path | None, output_option(directory=False, help="Write the plan (JSON) here.")] = None,
    dockerfile: Annotated[Path | None, output_option(flag="--dockerfile", short=None, directory=False,
                                                     help="Also write a Dockerfile here.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Infer an environment plan from packaging, requirements, tox / nox and CI files (no build)."""
    from coharden.environment.dockerfile import render_dockerfile

    plan = infer_plan(repo, commit, directory=True)
    if output is not None:
        output.write_text(plan.to_json())
    if dockerfile is not None:
        dockerfile.write_text(render_dockerfile(plan))
    if as_json or output is None:
        print(plan.to_json(), end="")
        return
    table = Table(title=f"environment plan for {plan.repo} @ {plan.commit[:12] or 'files on disk'}")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_row("python", f"{plan.python} (requires {plan.python_requires or 'any'}; tested "
                  f"{', '.join(plan.python_tested) or '-'})")
    table.add_row("install", "\n".join(plan.install))
    table.add_row("tests", " ".join(["pytest", *plan.test_args, *plan.test_paths]))
    table.add_row("source roots", ", ".join(plan.source_roots) or "-")
    table.add_row("env", ", ".join(f"{k}={v}" for k, v in plan.env.items()) or "-")
    console.print(table)
    for note in plan.notes:
        console.print(f"- {note}")
    console.print(f"plan written to {output}")


@env_app.command("dockerfile")
@cli_errors
def env_dockerfile(
    plan_file: Annotated[Path, typer.Argument(help="A plan (JSON) from `coharden env infer`.")],
    output: Annotated[Path | None, output_option(directory=False, help="Write here (default: stdout).")] = None,
) -> None:
    """Render a plan as a Dockerfile on python:X.Y-slim."""
    from coharden.environment.dockerfile import render_dockerfile

    text = render_dockerfile(_load_plan(plan_file))
    if output is None:
        print(text, end="")
    else:
        output.write_text(text)


@env_app.command("spec")
@cli_errors
def env_spec(
    repo: Annotated[str, typer.Argument(help="owner/name of a SWE-bench repository, e.g. sympy/sympy.")],
    version: Annotated[str | None, typer.Option("--version", help="The record's version (omit: list them).")]
    = None,
    specs: Annotated[Path | None, typer.Option("--specs", help="A file overriding the packaged specs.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the SWE-bench environment spec of a repository version (unknown ones list the known)."""
    from coharden.cli.envspec import show_spec

    show_spec(repo, version, specs, as_json)


@env_app.command("system")
@cli_errors
def env_system(
    repos: Annotated[list[str] | None, typer.Argument(help="owner/name of SWE-bench repositories, e.g. "
                                                      "sphinx-doc/sphinx (default: every repository).")] = None,
    version: Annotated[str | None, typer.Option("--version", help="One version (default: every version).")] = None,
    specs: Annotated[Path | None, typer.Option("--specs", help="A file overriding the packaged specs.")] = None,
    run: Annotated[bool, typer.Option("--run", help="Run them (as root, with the system's package manager).")]
    = False,
) -> None:
    """The system steps of the specs (apt-get installs such as sphinx's graphviz, locales) that spec builds
    skip: printed, or run with ``--run``. Tests that need such a package fail or skip without it."""
    from coharden.cli.envspec import system_steps

    system_steps(repos, version, specs, run)


@env_app.command("build")
@cli_errors
@renamed_flags(RUN_RENAMED[0], *BUILD_RENAMED, Renamed("--specs", "environment.swebench_specs"))
@with_llm_options
def env_build(
    repo: Annotated[Path | None, typer.Argument(help="A local git repository (omit with --instance).")] = None,
    commit: CommitOpt = "HEAD",
    instance: Annotated[str | None, typer.Option("--instance", help="Build the SWE-bench spec environment of this "
                                                  "record of --records instead.")] = None,
    records: Annotated[Path | None, typer.Option("--records", help="SWE-bench records (JSON / JSONL).")] = None,
    repos: Annotated[Path | None, typer.Option("--repos", help="Directory of owner__name repositories.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when a cached build exists.")] = False,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Use this plan instead of inferring one.")]
    = None,
    log: Annotated[Path | None, output_option(flag="--log", short=None, directory=False, help="Refinement log, "
                                              "JSONL (default: env-refine.jsonl next to the result store).")] = None,
    output: Annotated[Path | None, output_option(directory=False, help="Write the final plan here.")] = None,
    llm_opts: LLMOptions = LLMOptions(),
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build the environment (cached per repository, commit and plan), smoke-test it, and refine the plan with
    a model when it fails. How it builds (a Docker image, the installer, the base interpreter, the smoke test,
    the plans tried) is the config's build section: -c build.KEY=VALUE. Exit status 1 when the environment does
    not work."""
    from coharden.environment.attempt_log import AttemptLog
    from coharden.environment.build import make_builder
    from coharden.environment.plan import EnvTarget
    from coharden.environment.refine import refine_environment

    if instance is not None:
        from coharden.cli.envspec import build_for_instance

        settings = _settings(config)
        ok = build_for_instance(settings, records, instance, repos, force=force, as_json=as_json)
        raise typer.Exit(0 if ok else 1)
    if repo is None:
        raise CoHardenError("give a repository, or --instance ID with --records FILE")
    settings = _settings(config)
    plan = _load_plan(plan_file) if plan_file else infer_plan(repo, commit, directory=True, quiet=True)
    repo, commit = _build_target(repo, commit, settings.cache_dir)
    llm = llm_opts.client(settings)
    builder = make_builder(settings, log=lambda msg: err_console.print(f"[dim]{msg}[/]"))
    result = refine_environment(EnvTarget(repo, commit, plan), builder, settings, llm=llm,
                                log=AttemptLog(log or settings.store.with_name("env-refine.jsonl"),
                                               progress=lambda msg: err_console.print(msg)))
    if output is not None:
        output.write_text(result.plan.to_json())
    if as_json:
        print(result.model_dump_json(indent=2, exclude={"plan": {"evidence"}}))
    else:
        _render_build(result)
    raise typer.Exit(0 if result.ok else 1)


def _render_build(result: Any) -> None:
    table = Table(title="environment attempts")
    for col in ("#", "plan", "build", "smoke", "model patch", "stop"):
        table.add_column(col, overflow="fold")
    for a in result.attempts:
        smoke = "-" if a.smoke is None else (f"ok ({a.smoke['passed']}/{a.smoke['sampled']} passed)"
                                             if a.smoke["ok"] else a.smoke["reason"][:120])
        build = "cached" if a.build_cached else ("ok" if a.build_ok else (a.build_error.splitlines() or ["failed"])[0])
        patch = json.dumps(a.patch)[:120] if a.patch is not None else (a.patch_error or "-")
        table.add_row(str(a.attempt), a.plan_digest[:10], build[:120], smoke, patch, a.stop)
    console.print(table)
    if result.build is not None and result.build.ok:
        console.print(f"python: {result.build.python} ({result.build.python_version})")
        for warning in result.build.warnings:
            console.print(f"[yellow]warning:[/] {warning}")
    mark = "[green]works[/]" if result.ok else f"[red]does not work[/]: {result.stop_reason}"
    console.print(f"environment: {mark}")


@env_app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def env_run(
    ctx: typer.Context,
    rules: Annotated[Path | None, typer.Option("--rules", help="Mock server rules (YAML / JSON); default: "
                                               "every request gets a fixed reply.")] = None,
) -> None:
    """Run a command (after --) with the model-provider variables pointing at a local mock server, and
    connections to anything but loopback refused for Python processes."""
    from coharden.environment.mockenv import MockServices

    if not ctx.args:
        _fail("give a command after --, e.g. coharden env run -- python agent.py")
        return
    with MockServices(rules) as services:
        err_console.print(f"[dim]mock model server at {services.server.base_url}[/]")
        code = subprocess.run(ctx.args, env={**os.environ, **services.env}, check=False).returncode
    raise typer.Exit(code)
