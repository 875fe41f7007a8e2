"""``coharden env spec`` and ``coharden env build --instance``: SWE-bench spec environments (the command
bodies; :mod:`coharden.cli.env` declares the options)."""

from __future__ import annotations

import json
from pathlib import Path

from coharden.cli.common import console, err_console
from coharden.config import Settings
from coharden.errors import CoHardenError


def show_spec(repo: str, version: str | None, specs: Path | None, as_json: bool) -> None:
    from coharden.environment.specs import SpecTable, repo_slug

    table = SpecTable.load(specs)
    slug = repo_slug(repo)
    if version is None:
        versions = table.versions(slug)
        print(json.dumps({"repo": slug, "versions": versions}) if as_json else f"{slug}: {', '.join(versions)}")
        return
    spec = table.get(slug, version)
    data = spec.model_dump(mode="json")
    data.update(runner=spec.runner, env=spec.env, skipped_locally=spec.system_steps())
    if as_json:
        print(json.dumps(data, indent=2))
        return
    for key, value in data.items():
        if value in ("", [], {}, False):
            continue
        if isinstance(value, list):
            console.print(f"[bold]{key}[/]:")
            for item in value:
                console.print(f"  - {item}", markup=False, highlight=False)
        else:
            console.print(f"[bold]{key}[/]: ", end="")
            console.print(str(value), markup=False, highlight=False)


def system_steps(repos: list[str] | None, version: str | None, specs: Path | None, run: bool) -> None:
    """Print the distinct system steps of ``repos``' specs (every repository when None), or run them in order
    with bash as root; the first failing step stops with its exit code."""
    import os
    import shutil
    import subprocess

    from coharden.environment.specs import SpecTable, repo_slug

    table = SpecTable.load(specs)
    steps: dict[str, None] = {}
    for repo in repos or table.repos():
        slug = repo_slug(repo)
        for v in [version] if version else table.versions(slug):
            steps.update(dict.fromkeys(table.get(slug, v).system_steps()))
    if not run:
        for step in steps:
            print(step)
        return
    if steps and os.geteuid() != 0:
        raise CoHardenError("--run needs root (the steps install system packages); run them yourself: "
                            + "; ".join(steps))
    for step in steps:
        err_console.print(f"$ {step}", style="dim", markup=False, highlight=False)
        tool = step.split()[0] if step.split() else ""
        if tool in ("apt-get", "apt") and shutil.which(tool) is None:
            raise CoHardenError(f"{tool} is not on this machine: install the package of this step by other means: "
                                f"{step}")
        proc = subprocess.run(["bash", "-c", step], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                              check=False)
        if proc.returncode != 0:
            raise CoHardenError(f"system step failed (exit code {proc.returncode}): {step}")


def build_for_instance(settings: Settings, records: Path | None, instance_id: str, repos: Path | None,
                       *, force: bool, as_json: bool) -> bool:
    """Build (or reuse) the spec environment of one SWE-bench record; True when it works."""
    from coharden.environment.specbuild import SpecBuilder
    from coharden.environment.specs import SpecTable, repo_slug
    from coharden.instances import load_instances, resolve_repo

    if records is None:
        raise CoHardenError("--instance needs --records FILE (SWE-bench records, JSON or JSONL)")
    instance = load_instances(records, settings.cache_dir, [instance_id])[0].instance
    repo = resolve_repo(instance, repos or settings.repos_dir)
    table = SpecTable.load(settings.environment.swebench_specs)
    if not instance.version:
        raise CoHardenError(f"{instance_id}: the record has no version field (SWE-bench specs are per version)")
    spec = table.get(repo_slug(instance.repo), instance.version)
    builder = SpecBuilder(settings.cache_dir, installer=settings.build.installer,
                          log=lambda msg: err_console.print(msg, style="dim", markup=False, highlight=False))
    built = builder.build(repo, spec, instance.environment_setup_commit or instance.base_commit,
                          replacements=table.replacements(), force=force)
    if as_json:
        print(built.model_dump_json(indent=2))
    else:
        state = "reused" if built.cached else "built"
        if built.ok:
            console.print(f"{state} {built.env_dir} (python {built.python_version}, runner {built.runner}, "
                          f"{built.build_seconds:.0f}s)")
        else:
            err_console.print(f"environment failed at step {built.failed_step}: {built.error}", markup=False)
        for warning in built.warnings:
            err_console.print(f"warning: {warning}", markup=False, highlight=False)
    return built.ok
