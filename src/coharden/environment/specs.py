"""SWE-bench environment specs as data: one spec per (repository, version).

The facts (interpreter version, packages and pins, pre-install and install commands, environment variables,
test command, log parser) are transcribed from the SWE-bench harness's published tables into
``coharden/data/swebench_specs.json``; see its ``source`` field for the commit they come from. A user file in
the same shape (or only the fields to change) overrides them field by field: ``--specs FILE`` or the
``swebench_specs`` setting.

``packages`` keeps the harness's meaning: ``requirements.txt`` (read the repository's requirement files at
the environment-setup commit), ``environment.yml`` (a conda environment file: its dependencies are installed
with pip here) or a space-separated package list (conda there, pip here).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coharden.config import RunnerName
from coharden.errors import CoHardenError

# commands that need root or a system package manager: a plain machine cannot run them
_EMPTY_LINK = re.compile(r"&&(?:\s*&&)+\s*")  # "a && && b": one link of the chain is empty
_SYSTEM = re.compile(r"\b(apt-get|apt|locale-gen|yum|conda)\b|/etc/")


class SpecError(CoHardenError):
    """An unknown repository or version, or a specs file that cannot be read."""


class EnvSpec(BaseModel):
    """How SWE-bench builds and tests one (repository, version)."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    version: str
    python: str
    packages: str = ""
    pip_packages: list[str] = Field(default_factory=list)
    pre_install: list[str] = Field(default_factory=list)
    install: str = ""
    eval_commands: list[str] = Field(default_factory=list)
    test_cmd: str
    log_parser: str
    no_use_env: bool = False
    requirements_paths: list[str] = Field(default_factory=list)
    environment_yml_paths: list[str] = Field(default_factory=list)
    # resolve unpinned packages as they were on this date (YYYY-MM-DD; uv's --exclude-newer): today's releases
    # can differ from the ones the harness's images got (a newer Pygments highlights differently)
    exclude_newer: str = Field(default="", pattern=r"^(\d{4}-\d{2}-\d{2}(T[\d:]+Z?)?)?$")
    # services started inside the test sandbox, on loopback, around every test command (e.g. httpbin)
    services: list[str] = Field(default_factory=list)
    # coharden's own: system steps the harness's images get implicitly and the tests need, run by
    # ``coharden env system`` like the spec's own root steps (astropy: a current tzdata, whose
    # leap-seconds.list astropy reads when its bundled table has expired; the images carried a fresh one)
    system_setup: list[str] = Field(default_factory=list)
    # coharden's own: pip constraints on every install step, where today's release of a package the spec leaves
    # unpinned breaks tests that passed in the harness's images with the release of their day (xarray: sparse
    # 0.16 made ``COO(coords, data)`` require ``shape``)
    constraints: list[str] = Field(default_factory=list)

    @property
    def runner(self) -> RunnerName:
        """Which coharden runner executes this spec's tests (from its test command)."""
        from coharden.execution.runners import runner_for_command

        return runner_for_command(self.test_cmd)

    @property
    def env(self) -> dict[str, str]:
        """Environment variables of test runs: the ``export NAME=value`` lines of ``eval_commands`` and the
        ``NAME=value`` prefixes of the test command."""
        found: dict[str, str] = {}
        for command in [*self.eval_commands, self.test_cmd]:
            try:
                words = shlex.split(command)
            except ValueError:
                continue
            if words and words[0] == "export":
                words = words[1:]
            for word in words:
                match = re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(.*)", word)
                if not match:
                    break
                found[match[1]] = match[2]
        return found

    def system_steps(self) -> list[str]:
        """Pre-install and eval commands that need root / a system package manager (skipped locally), each as
        it can run: an empty link of a ``&&`` chain (SWE-bench's matplotlib specs have ``upgrade && &&
        apt-get``, a syntax error in bash) is dropped; the stored spec, and so the environment's key, stays as
        published."""
        steps = [*(c for c in [*self.pre_install, *self.eval_commands] if _SYSTEM.search(c)), *self.system_setup]
        return [_EMPTY_LINK.sub("&& ", step) for step in steps]

    def local_pre_install(self) -> list[str]:
        return [c for c in self.pre_install if not _SYSTEM.search(c)]

    def identity_json(self) -> str:
        """What names a built environment: every field that changes it. ``services`` and ``system_setup`` act
        beside the environment and do not; ``exclude_newer`` and ``constraints`` count only when set, so
        environments built before they existed keep their cache keys."""
        drop = {"services", "system_setup"} | {k for k in ("exclude_newer", "constraints") if not getattr(self, k)}
        return self.model_dump_json(exclude=drop)

    def digest(self) -> str:
        return hashlib.sha256(self.identity_json().encode()).hexdigest()[:12]


class SpecTable:
    """All specs: the packaged data file, optionally overridden by a user file."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @classmethod
    def load(cls, override: Path | None = None) -> SpecTable:
        data = json.loads(json.dumps(_packaged()))  # a deep copy the override may change
        if override is not None:
            _merge(data, _read_override(override))
        return cls(data)

    def repos(self) -> list[str]:
        return sorted(self.data["repos"])

    def versions(self, repo: str) -> list[str]:
        return list(self._repo(repo)["versions"])

    def _repo(self, repo: str) -> dict[str, Any]:
        try:
            return self.data["repos"][repo]
        except KeyError:
            raise SpecError(f"no SWE-bench spec for repository {repo!r} (known: {', '.join(self.repos())})") from None

    def get(self, repo: str, version: str) -> EnvSpec:
        entry = self._repo(repo)
        versions = entry["versions"]
        if version not in versions:
            raise SpecError(f"no spec for {repo} version {version!r} (known: {', '.join(versions)})")
        fields = {k: v for k, v in entry.items() if k != "versions"}
        try:
            return EnvSpec.model_validate({**fields, **versions[version], "repo": repo, "version": version})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise SpecError(f"spec {repo} {version} is invalid: {problems}") from None

    def replacements(self) -> list[tuple[str, str | None]]:
        return [(a, b) for a, b in self.data.get("replace_requirements", [])]


@cache
def _packaged() -> dict[str, Any]:
    text = resources.files("coharden.data").joinpath("swebench_specs.json").read_text()
    return json.loads(text)


def _read_override(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SpecError(f"{path}: specs file not found")
    try:
        data = yaml.safe_load(path.read_text())  # JSON is YAML
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: cannot parse: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("repos"), dict):
        raise SpecError(f"{path}: a specs file is a mapping with a 'repos' mapping "
                        "({repo: {versions: {version: {field: value}}}})")
    return data


def _merge(base: dict[str, Any], override: dict[str, Any]) -> None:
    """Field-level merge: mappings merge recursively, anything else replaces."""
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def repo_slug(repo: str) -> str:
    """'owner/name' of a record's repo field, also accepting 'owner__name' and a path ending in it."""
    name = repo.rstrip("/").split("/")[-1] if "__" in repo.rstrip("/").split("/")[-1] else repo
    if "__" in name:
        owner, _, rest = name.partition("__")
        return f"{owner}/{rest}"
    return repo


_IMPORT_NAME = {"scikit-learn": "sklearn"}


def import_name(spec: EnvSpec) -> str:
    """The module a spec's repository installs (``scikit-learn`` -> ``sklearn``)."""
    name = spec.repo.split("/")[-1]
    return _IMPORT_NAME.get(name, name.replace("-", "_"))
