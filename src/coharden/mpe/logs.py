"""Per-instance log folders of a batch MPE, laid out as the SWE-bench harness lays out its evaluation logs:
``LOG_DIR/RUN_ID/MODEL/INSTANCE_ID/`` (``MODEL``: the prediction's ``model_name_or_path``, ``/`` as ``__``)
holding ``patch.diff`` (the prediction as given), ``report.json`` (the
instance's row, as in ``mpe.jsonl``) and ``run_instance.log`` (what happened, in words: the test's verdicts
on the buggy and the fixed code, the class, the laxity, every mutant with its cell, or why there is none).
Written as each instance finishes, so an interrupted run keeps the logs of what finished."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from coharden.mpe.result import BREAKING, IMPLAUSIBLE
from coharden.schema.prediction import Prediction


def safe_name(name: str) -> str:
    """A path component for an id (``/`` and other separators replaced, never ``.`` or ``..``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.+=@-]+", "_", name).strip(".") or "_"
    return cleaned


def instance_dir(log_dir: Path, run_id: str, model: str, instance_id: str) -> Path:
    """``LOG_DIR/RUN_ID/MODEL/INSTANCE_ID``: one system's predictions apart from another's, as in the harness."""
    return log_dir / safe_name(run_id) / safe_name(model.replace("/", "__")) / safe_name(instance_id)


def _verdict(label: str, verdict: Any) -> list[str]:
    if not isinstance(verdict, dict):
        return []
    line = f"{label}: {verdict.get('outcome', '?')}"
    reason = str(verdict.get("reason") or "").strip()
    return [line + (f" ({reason})" if reason else "")]


def run_log(row: dict[str, Any]) -> str:
    """The text of ``run_instance.log`` for one batch row."""
    lines = [f"instance: {row.get('instance_id')}", f"test: {row.get('model_name_or_path')}"]
    if "error" in row:
        return "\n".join([*lines, f"error: {row['error']}", ""])
    if row.get("test_ids"):
        lines.append("test ids: " + ", ".join(row["test_ids"]))
    lines += _verdict("on the buggy code", row.get("candidate_buggy"))
    lines += _verdict("on the fixed code", row.get("candidate_fixed"))
    lines.append(f"class: {row.get('test_class', '?')}")
    if row.get("laxity") is not None:
        interval = row.get("interval")
        bounds = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
        counts = row.get("matrix_counts") or {}
        lines.append(f"laxity: {row['laxity']:.3f}{bounds}; matrix alpha/beta/gamma/delta "
                     f"{'/'.join(str(counts.get(c, 0)) for c in ('alpha', 'beta', 'gamma', 'delta'))}; "
                     f"stop: {row.get('stop', '-')}")
    if row.get("reason"):
        lines.append(f"reason: {row['reason']}")
    lines += [f"warning: {w}" for w in row.get("warnings") or []]
    mutants = row.get("mutants") or []
    if mutants:
        lines.append(f"mutants ({len(mutants)}; `coharden mutants show {row.get('instance_id')}:ID` prints one):")
        for m in mutants:
            mutant = m.get("mutant") or {}
            # a mutant with no cell (inadmissible, implausible) is stored with cell null: its reason stands there
            cell = m.get("cell") or (IMPLAUSIBLE if (m.get("plausibility") or {}).get("outcome") in BREAKING
                                     else "-")
            lines.append(f"  {cell:11}  {mutant.get('id', '?')}  {mutant.get('location', '')}  "
                         f"{mutant.get('description', '')}")
    return "\n".join([*lines, ""])


def write_instance_log(log_dir: Path, run_id: str, prediction: Prediction, row: dict[str, Any]) -> Path:
    """Write one instance's folder; returns it."""
    folder = instance_dir(log_dir, run_id, prediction.model_name_or_path, prediction.instance_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "patch.diff").write_text(prediction.model_patch or "")
    (folder / "report.json").write_text(json.dumps(row, indent=2, sort_keys=True) + "\n")
    (folder / "run_instance.log").write_text(run_log(row))
    return folder
