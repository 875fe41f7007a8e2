"""Pre-registration: the comparison's configuration and hypotheses, hashed and stored before any run.

``prereg.json`` holds ``{"schema", "config", "hypotheses", "sha256", "created"}`` where ``sha256`` is the
sha256 of the canonical JSON of ``{"schema", "config", "hypotheses"}`` (sorted keys, no whitespace). It is
written (and put in the result store under kind ``suite-prereg``) before the baseline run; the results file
names the hash, and :func:`verify` re-computes it, so an edited pre-registration is detected. An existing file
with a *different* hash is never overwritten: a changed plan needs a new output directory.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from coharden.errors import CoHardenError
from coharden.execution.store import Store
from coharden.llm.cache import canonical_json

SCHEMA = "coharden-suite-prereg-1"


def default_hypotheses(arm_names: list[str]) -> list[str]:
    if not arm_names:
        return []
    control, *others = arm_names
    found = [f"H{k}: arm {name!r} kills a larger share of the round-0 survivors than the control arm {control!r} "
             f"(the 95% paired cluster-bootstrap interval of the difference lies above 0)."
             for k, name in enumerate(others, 1)]
    if len(others) >= 2:
        found.append(f"H{len(found) + 1}: the kill rates of {others[0]!r} and {others[1]!r} differ (the intervals "
                     f"of their differences to {control!r} do not overlap).")
    return found


def load_hypotheses(path: Path) -> list[str]:
    """A YAML list of strings, ``{hypotheses: [...]}``, or a text file with one hypothesis per non-empty line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CoHardenError(f"{path}: cannot read hypotheses: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict):
        data = data.get("hypotheses")
    if isinstance(data, list) and all(isinstance(h, str) for h in data):
        return [" ".join(h.split()) for h in data]
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def digest(config: dict[str, Any], hypotheses: list[str]) -> str:
    body = {"schema": SCHEMA, "config": config, "hypotheses": hypotheses}
    return hashlib.sha256(canonical_json(body).encode("ascii")).hexdigest()


def preregister(path: Path, config: dict[str, Any], hypotheses: list[str], *,
                store: Store | None = None) -> dict[str, Any]:
    """Write (or confirm) the pre-registration at ``path``; return the record."""
    config = json.loads(canonical_json(config))  # plain JSON data: what is hashed is what is stored
    sha = digest(config, hypotheses)
    if path.exists():
        existing = verify(path)
        if existing["sha256"] != sha:
            raise CoHardenError(f"{path}: a different pre-registration is already stored (sha256 "
                                f"{existing['sha256'][:12]}, this run {sha[:12]}); use a new output directory")
        return existing
    record = {"schema": SCHEMA, "config": config, "hypotheses": hypotheses, "sha256": sha,
              "created": datetime.now(UTC).isoformat(timespec="seconds")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if store is not None:
        store.put_record("suite-prereg", sha, record)
    return record


def verify(path: Path) -> dict[str, Any]:
    """The pre-registration at ``path``, after checking that its content still hashes to its ``sha256``."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CoHardenError(f"{path}: cannot read pre-registration: {exc}") from exc
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise CoHardenError(f"{path}: not a coharden suite pre-registration")
    sha = digest(record.get("config", {}), record.get("hypotheses", []))
    if sha != record.get("sha256"):
        raise CoHardenError(f"{path}: pre-registration was modified after it was stored (content hashes to "
                            f"{sha[:12]}, recorded {str(record.get('sha256'))[:12]})")
    return record
