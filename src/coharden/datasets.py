"""SWE-bench datasets by name, from a local copy (never the network).

``coharden mpe princeton-nlp/SWE-bench_Verified --id ID`` or ``--instances SWE-bench/SWE-bench_Lite`` reads the
records of a local copy, as the SWE-bench harness's ``--dataset_name`` accepts a dataset's name: the same
names (``owner/name``; the harness's aliases ``swe-bench``, ``lite``; the datasets' two owners
``princeton-nlp`` and ``SWE-bench`` name the same data) and a split (``NAME:SPLIT``, default ``test``). A copy
is a JSON or JSON Lines file of records under a data directory: ``$COHARDEN_DATASETS`` (several joined by
``:``), else ``datasets/`` in the cache directory (``$COHARDEN_CACHE``, default ``~/.cache/coharden``), at
``owner__name/SPLIT.jsonl`` (or ``owner/name/SPLIT.jsonl``, or ``owner__name.jsonl`` for the test split;
``.json`` alike).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from coharden.errors import InstanceError

#: The harness's aliases (swebench.harness.utils.load_swebench_dataset), plus ``verified``.
ALIASES = {**dict.fromkeys(("swe-bench", "swebench", "swe_bench"), "SWE-bench/SWE-bench"),
           **dict.fromkeys(("swe-bench-lite", "swebench-lite", "swe_bench_lite", "swe-bench_lite", "lite"),
                           "SWE-bench/SWE-bench_Lite"),
           **dict.fromkeys(("swe-bench-verified", "swebench-verified", "swe_bench_verified", "swe-bench_verified",
                            "verified"), "SWE-bench/SWE-bench_Verified")}
#: Owners that publish the same datasets (the harness moved from the first to the second).
SAME_OWNERS = ("princeton-nlp", "SWE-bench")
_NAME = re.compile(r"^(?P<owner>[A-Za-z0-9][\w.-]*)/(?P<name>[A-Za-z0-9][\w.-]*)(?::(?P<split>[\w.-]+))?$")


def data_dirs() -> list[Path]:
    """Where local copies are looked up, in order."""
    listed = os.environ.get("COHARDEN_DATASETS")
    if listed:
        return [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
    cache = Path(os.environ.get("COHARDEN_CACHE", Path.home() / ".cache" / "coharden")).expanduser()
    return [cache / "datasets"]


def parse_name(text: str) -> tuple[str, str, str] | None:
    """(owner, name, split) of a dataset name or alias; None when ``text`` is not one."""
    base, _, split = text.partition(":")
    alias = ALIASES.get(base.lower())
    match = _NAME.match(f"{alias}:{split}" if alias and split else alias or text)
    if match is None:
        return None
    return match["owner"], match["name"], match["split"] or "test"


def candidates(owner: str, name: str, split: str, directory: Path) -> list[Path]:
    """The files one data directory may hold a split in, in the order they are tried."""
    owners = [owner, *(o for o in SAME_OWNERS if o != owner)] if owner in SAME_OWNERS else [owner]
    found: list[Path] = []
    for who in owners:
        for stem in (directory / f"{who}__{name}" / split, directory / who / name / split,
                     *((directory / f"{who}__{name}",) if split == "test" else ())):
            found += [stem.with_name(stem.name + ".jsonl"), stem.with_name(stem.name + ".json")]
    return found


def resolve_records(path: Path) -> Path:
    """``path`` itself when it exists (or is no dataset name); else the local copy of the dataset it names."""
    if path.exists() or path.suffix in (".json", ".jsonl"):  # a records file that is missing: say so plainly
        return path
    parsed = parse_name(str(path))
    if parsed is None:
        return path
    owner, name, split = parsed
    dirs = data_dirs()
    for directory in dirs:
        for candidate in candidates(owner, name, split, directory):
            if candidate.is_file():
                return candidate
    where = ", ".join(str(d) for d in dirs)
    target = dirs[0] / f"{owner}__{name}" / f"{split}.jsonl"
    raise InstanceError(
        f"{path}: no such file, and no local copy of the dataset {owner}/{name} (split {split}) in {where} "
        f"(coharden never downloads); save its records as JSON Lines at {target}, or set $COHARDEN_DATASETS")
