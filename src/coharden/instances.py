"""Load instances: SWE-bench records (JSON / JSONL) or a local instance directory (manifest + patch files).

Errors name the file, the line (JSONL) or record index (JSON), and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from coharden.datasets import resolve_records
from coharden.errors import InstanceError, RepoError
from coharden.execution.git import check_repo
from coharden.execution.snapshot import snapshot_files
from coharden.jsonl import json_lines
from coharden.schema.instance import Instance

MANIFEST_NAMES = ("instance.yaml", "instance.yml", "instance.json")


class Candidate(BaseModel):
    """A hand-labelled candidate test of a local instance (bundled examples)."""

    name: str
    patch: str
    label: str | None = None


class LocalInstance(BaseModel):
    instance: Instance
    directory: Path
    candidates: list[Candidate] = Field(default_factory=list)


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(f"field {'.'.join(map(str, e['loc'])) or '<record>'}: {e['msg']}" for e in exc.errors())


def _validate(data: Any, where: str) -> Instance:
    if not isinstance(data, dict):
        raise InstanceError(f"{where}: a record must be a JSON object, got {type(data).__name__}")
    try:
        return Instance.model_validate(data)
    except ValidationError as exc:
        raise InstanceError(f"{where}: {_validation_message(exc)}") from exc
    except json.JSONDecodeError as exc:  # a FAIL_TO_PASS string that is not JSON
        raise InstanceError(f"{where}: field FAIL_TO_PASS/PASS_TO_PASS is not valid JSON: {exc}") from exc


def load_records(path: Path) -> list[Instance]:
    """SWE-bench records from a .jsonl file (one per line) or a .json file (a list, or one object), or from the
    local copy of a dataset named like the SWE-bench harness's ``--dataset_name`` (see :mod:`coharden.datasets`)."""
    path = resolve_records(path)
    if not path.is_file():
        raise InstanceError(f"{path}: file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InstanceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    instances: list[Instance] = []
    if path.suffix == ".jsonl" or (path.suffix != ".json" and "\n{" in text.strip()):
        for number, data in json_lines(path, InstanceError, text=text):
            instances.append(_validate(data, f"{path}:{number}"))
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InstanceError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from exc
        records = data if isinstance(data, list) else [data]
        instances = [_validate(rec, f"{path}: record {i}") for i, rec in enumerate(records)]
    seen: set[str] = set()
    for inst in instances:
        if inst.instance_id in seen:
            raise InstanceError(f"{path}: duplicate instance_id {inst.instance_id!r}")
        seen.add(inst.instance_id)
    return instances


def materialize_directory(directory: Path, cache_dir: Path) -> tuple[Path, str]:
    """Turn a plain project directory into a git repository with one deterministic commit.

    The repository lives under ``cache_dir`` keyed by a hash of the directory's contents, so editing the
    project gives a new repository and the same project always gives the same commit id.
    """
    files = [p.relative_to(directory).as_posix() for p in directory.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc") and ".git" not in p.parts]
    try:
        return snapshot_files(directory, files, cache_dir)
    except PermissionError as exc:  # the cache (and with it the default store) is not ours to write
        raise InstanceError(f"cannot write in the cache directory {cache_dir} ({exc.strerror}): set "
                            "COHARDEN_CACHE (or -c cache_dir=DIR) to a writable directory") from exc


def _read_field(directory: Path, manifest: Path, data: dict[str, Any], field: str) -> str:
    """A text field given inline or as a path to a file next to the manifest."""
    value = data.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InstanceError(f"{manifest}: field {field}: must be a string (inline text or a file name)")
    candidate = directory / value
    if "\n" not in value and len(value) < 256 and candidate.is_file():
        return candidate.read_text()
    if field in ("patch", "test_patch") and "\n" not in value:
        raise InstanceError(f"{manifest}: field {field}: file {value!r} not found")
    return value


def load_local(directory: Path, cache_dir: Path) -> LocalInstance:
    """A hand-made instance: a manifest (instance.yaml) naming the repository and patch files.

    ``repo`` is a git repository (``base_commit`` required) or a plain directory that is materialized into
    a git repository (``base_commit`` then defaults to its commit).
    """
    manifest = next((directory / n for n in MANIFEST_NAMES if (directory / n).is_file()), None)
    if manifest is None:
        raise InstanceError(f"{directory}: no instance manifest ({' / '.join(MANIFEST_NAMES)})")
    try:
        data = yaml.safe_load(manifest.read_text())
    except yaml.YAMLError as exc:
        raise InstanceError(f"{manifest}: cannot parse: {exc}") from exc
    if not isinstance(data, dict):
        raise InstanceError(f"{manifest}: the manifest must be a mapping")
    data = dict(data)
    raw_candidates = data.pop("candidates", []) or []
    repo_value = data.get("repo")
    if not isinstance(repo_value, str):
        raise InstanceError(f"{manifest}: field repo: required (a path or owner/name)")
    repo_path = (directory / repo_value).resolve()
    if repo_path.is_dir():
        try:
            check_repo(repo_path)
            is_git = (repo_path / ".git").exists()
        except RepoError:
            is_git = False
        if is_git:
            data["repo"] = str(repo_path)
            if "base_commit" not in data:
                raise InstanceError(f"{manifest}: field base_commit: required when repo is a git repository")
        else:
            repo, head = materialize_directory(repo_path, cache_dir)
            data["repo"] = str(repo)
            data.setdefault("base_commit", head)
    for field in ("problem_statement", "patch", "test_patch"):
        data[field] = _read_field(directory, manifest, data, field)
    data.setdefault("instance_id", directory.name)
    instance = _validate(data, str(manifest))
    candidates: list[Candidate] = []
    for index, raw in enumerate(raw_candidates):
        if not isinstance(raw, dict) or "patch" not in raw:
            raise InstanceError(f"{manifest}: field candidates.{index}: needs at least 'patch'")
        patch_file = directory / str(raw["patch"])
        if not patch_file.is_file():
            raise InstanceError(f"{manifest}: field candidates.{index}.patch: file {raw['patch']!r} not found")
        candidates.append(Candidate(name=str(raw.get("name", patch_file.stem)), patch=patch_file.read_text(),
                                    label=raw.get("label")))
    return LocalInstance(instance=instance, directory=directory, candidates=candidates)


def resolve_repo(instance: Instance, repos_dir: Path | None) -> Path:
    """The local repository of an instance: ``repo`` as a path, or ``owner/name`` under ``repos_dir``."""
    direct = Path(instance.repo).expanduser()
    if direct.is_absolute() or direct.exists():
        return check_repo(direct)
    if repos_dir is None:
        raise RepoError(
            f"{instance.instance_id}: repo {instance.repo!r} is not a local path; pass --repos DIR holding "
            f"{instance.repo.replace('/', '__')}"
        )
    candidate = repos_dir / instance.repo.replace("/", "__")
    if not candidate.exists():
        raise RepoError(f"{instance.instance_id}: repository not found at {candidate}")
    return check_repo(candidate)


def load_instances(source: Path, cache_dir: Path, ids: list[str] | None = None) -> list[LocalInstance]:
    """Instances from a records file, a dataset name with a local copy, or a local instance directory (optionally
    filtered by id)."""
    source = resolve_records(source)
    if source.is_dir():
        found = [load_local(source, cache_dir)]
    else:
        found = [LocalInstance(instance=inst, directory=source.parent) for inst in load_records(source)]
    if ids:
        wanted = set(ids)
        missing = wanted - {li.instance.instance_id for li in found}
        if missing:
            raise InstanceError(f"{source}: no instance with id {', '.join(sorted(missing))}")
        found = [li for li in found if li.instance.instance_id in wanted]
    return found
