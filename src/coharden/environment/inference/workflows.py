"""Reader of GitHub Actions workflows (matrix Python versions, pip installs, pytest commands)."""

from __future__ import annotations

import re
import shlex

import yaml

from coharden.environment.inference.facts import TOOLING, Facts, dist_name, pytest_args
from coharden.environment.sources import FileSource

PIP_INSTALL = re.compile(r"^(?:python\d?(?:\.\d+)?\s+-m\s+pip|pip\d?(?:\.\d+)?|uv\s+pip)\s+install\b(?P<rest>.*)$")


def read_workflows(source: FileSource, facts: Facts) -> None:
    paths = [p for p in source.files() if p.startswith(".github/workflows/") and p.endswith((".yml", ".yaml"))]
    for path in paths:
        try:
            data = yaml.safe_load(source.read(path) or "")
        except yaml.YAMLError as exc:
            facts.notes.append(f"{path} does not parse ({exc.__class__.__name__}); ignored")
            continue
        if not isinstance(data, dict):
            continue
        for job_name, job in (data.get("jobs") or {}).items():
            if not isinstance(job, dict):
                continue
            matrix = ((job.get("strategy") or {}).get("matrix") or {})
            if isinstance(matrix, dict):
                for key in ("python-version", "python", "python_version", "py"):
                    facts.tested_versions("ci", matrix.get(key), path, f"jobs.{job_name}.strategy.matrix.{key}")
                for include in matrix.get("include") or []:
                    if isinstance(include, dict):
                        for key in ("python-version", "python", "python_version"):
                            facts.tested_versions("ci", include.get(key), path, f"jobs.{job_name} matrix.include")
            for step in job.get("steps") or []:
                if not isinstance(step, dict):
                    continue
                if "setup-python" in str(step.get("uses", "")):
                    value = (step.get("with") or {}).get("python-version")
                    if value is not None and "${{" not in str(value):
                        facts.tested_versions("ci", value, path, f"jobs.{job_name} setup-python")
                if isinstance(step.get("run"), str):
                    read_run_script(step["run"], f"{path} jobs.{job_name}", facts)


def read_run_script(script: str, label: str, facts: Facts) -> None:
    script = re.sub(r"\\\n\s*", " ", script)
    for raw in script.splitlines():
        for line in re.split(r"\s*&&\s*|\s*;\s*", raw.strip()):
            if not line or line.startswith("#") or "${{" in line or "$(" in line:
                continue
            match = PIP_INSTALL.match(line)
            if match:
                command = normalize_pip(match["rest"])
                if command:
                    facts.ci_installs.append(command)
                    facts.add(label, "run", line)
                continue
            args = pytest_args(line)
            if args is not None:
                facts.pytest_commands.append((args, label))
                facts.add(label, "run", line)
            elif re.match(r"^(tox|nox)\b", line):
                facts.notes.append(f"{label}: CI runs {line.split()[0]}; its configuration was read instead")


def normalize_pip(rest: str) -> str | None:
    """``pip install <rest>`` as ``python -m pip install ...`` for the environment, or None when it only installs
    tooling (pip itself, tox, build tools) or cannot be read."""
    try:
        tokens = shlex.split(rest)
    except ValueError:
        return None
    kept: list[str] = []
    installs_something = False
    skip_next = False
    for i, token in enumerate(tokens):
        if skip_next:
            skip_next = False
            continue
        if token in ("--user", "--system", "-U", "--upgrade", "--quiet", "-q", "--progress-bar"):
            if token == "--progress-bar":
                skip_next = True
            continue
        if token in ("-r", "--requirement", "-e", "--editable", "-c", "--constraint"):
            installs_something = True
            kept.append(token)
            continue
        if token.startswith("-"):
            kept.append(token)
            continue
        if i > 0 and tokens[i - 1] in ("-r", "--requirement", "-e", "--editable", "-c", "--constraint"):
            kept.append(token)
            continue
        if dist_name(token) in TOOLING and not token.startswith("."):
            continue
        installs_something = True
        kept.append(token)
    if not installs_something:
        return None
    return "python -m pip install " + " ".join(shlex.quote(t) for t in kept)
