"""Per-instance log folders of a batch MPE, laid out as the SWE-bench harness lays out its evaluation logs:
``LOG_DIR/RUN_ID/MODEL/INSTANCE_ID/`` (``MODEL``: the prediction's ``model_name_or_path``, ``/`` as ``__``)
holding ``patch.diff`` (the prediction as given), ``report.json`` (the harness's per-instance shape, see
:func:`harness_report`: tools that read the harness's reports read it), ``mpe.json`` (coharden's full record of
the instance, as its line in ``mpe.jsonl``) and ``run_instance.log`` (what happened, in words: the test's
verdicts on the buggy and the fixed code, the class, the laxity, every mutant with its cell, or why there is
none). Written as each instance finishes, so an interrupted run keeps the logs of what finished.

Every field is formatted without trusting its type: a row from an older store or an ungraded mutant holds
``None`` where a number is expected, and a log that cannot be written must never stop the batch."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from coharden.mpe.result import BREAKING, IMPLAUSIBLE
from coharden.schema.prediction import Prediction

#: SWE-bench's ``tests_status`` buckets, in the harness's order
TEST_STATUS_KEYS = ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")
_PASSING = frozenset({"PASSED", "XFAIL"})


def safe_name(name: str) -> str:
    """A path component for an id (``/`` and other separators replaced, never ``.`` or ``..``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.+=@-]+", "_", name).strip(".") or "_"
    return cleaned


def instance_dir(log_dir: Path, run_id: str, model: str, instance_id: str) -> Path:
    """``LOG_DIR/RUN_ID/MODEL/INSTANCE_ID``: one system's predictions apart from another's, as in the harness."""
    return log_dir / safe_name(run_id) / safe_name(model.replace("/", "__")) / safe_name(instance_id)


def number(value: Any, spec: str = ".3f") -> str:
    """``value`` formatted by ``spec`` when it is a number, else ``-`` (None, missing) or its text."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, int | float):
        return format(value, spec)
    return str(value)


def _verdict(label: str, verdict: Any) -> list[str]:
    if not isinstance(verdict, dict):
        return []
    line = f"{label}: {verdict.get('outcome', '?')}"
    reason = str(verdict.get("reason") or "").strip()
    return [line + (f" ({reason})" if reason else "")]


def _laxity_line(row: dict[str, Any]) -> str:
    interval = row.get("interval")
    bounds = ""
    if isinstance(interval, list | tuple) and len(interval) == 2:
        bounds = f" [{number(interval[0])}, {number(interval[1])}]"
    counts = row.get("matrix_counts") or row.get("matrix") or {}
    if not isinstance(counts, dict):
        counts = {}
    cells = "/".join(number(counts.get(c, 0), "d") for c in ("alpha", "beta", "gamma", "delta"))
    return (f"laxity: {number(row.get('laxity'))}{bounds}; matrix alpha/beta/gamma/delta {cells}; "
            f"stop: {row.get('stop') or '-'}")


def run_log(row: dict[str, Any]) -> str:
    """The text of ``run_instance.log`` for one batch row."""
    lines = [f"instance: {row.get('instance_id')}", f"test: {row.get('model_name_or_path')}"]
    if "error" in row:
        return "\n".join([*lines, f"error: {row['error']}", ""])
    if row.get("test_ids"):
        lines.append("test ids: " + ", ".join(map(str, row["test_ids"])))
    lines += _verdict("on the buggy code", row.get("candidate_buggy"))
    lines += _verdict("on the fixed code", row.get("candidate_fixed"))
    lines.append(f"class: {row.get('test_class') or '?'}")
    if row.get("laxity") is not None:
        lines.append(_laxity_line(row))
    if row.get("reason"):
        lines.append(f"reason: {row['reason']}")
    lines += [f"warning: {w}" for w in row.get("warnings") or []]
    timings = row.get("timings")
    if isinstance(timings, dict) and timings.get("total") is not None:
        lines.append(f"time: {number(timings.get('total'), '.1f')}s")
    mutants = row.get("mutants") or []
    if mutants:
        lines.append(f"mutants ({len(mutants)}; `coharden mutants show {row.get('instance_id')}:ID` prints one):")
        for m in mutants:
            m = m if isinstance(m, dict) else {}
            mutant = m.get("mutant") or {}
            # a mutant with no cell (inadmissible, implausible) is stored with cell null: its reason stands there
            cell = m.get("cell") or (IMPLAUSIBLE if (m.get("plausibility") or {}).get("outcome") in BREAKING
                                     else "-")
            lines.append(f"  {str(cell):11}  {mutant.get('id', '?')}  {mutant.get('location', '')}  "
                         f"{mutant.get('description', '')}")
    return "\n".join([*lines, ""])


def _passed(verdict: Any, test_id: str) -> bool | None:
    """Whether ``test_id`` passed in ``verdict`` (every case it expanded to); None when not run."""
    if not isinstance(verdict, dict):
        return None
    cases = (verdict.get("tests") or {}).get(test_id)
    if not cases:
        return None
    return all(c in _PASSING for c in cases)


def harness_report(prediction: Prediction, row: dict[str, Any]) -> dict[str, Any]:
    """The instance's ``report.json`` in the SWE-bench harness's shape, ``{instance_id: {patch_is_None,
    patch_exists, patch_successfully_applied, resolved, tests_status}}``, read as SWT-bench reads a test:
    ``resolved`` is the candidate test failing on the buggy code and passing on the fixed code (F->P), and
    ``tests_status`` files each of its test ids under what it did there (``FAIL_TO_PASS`` ``success`` is the
    wanted one; an id without a verdict on either side is a ``FAIL_TO_PASS`` ``failure``). coharden's own
    fields ride along: ``test_class``, ``laxity`` and its ``interval``, and ``error`` when the instance could
    not be graded."""
    patch = prediction.model_patch
    status: dict[str, dict[str, list[str]]] = {k: {"success": [], "failure": []} for k in TEST_STATUS_KEYS}
    for test_id in row.get("test_ids") or []:
        before = _passed(row.get("candidate_buggy"), test_id)
        after = _passed(row.get("candidate_fixed"), test_id)
        if before is None or after is None:  # no verdict on either side: not what a reproduction test must do
            status["FAIL_TO_PASS"]["failure"].append(test_id)
        else:
            bucket = f"{'PASS' if before else 'FAIL'}_TO_{'PASS' if after else 'FAIL'}"
            status[bucket]["success"].append(test_id)
    graded = "error" not in row
    entry: dict[str, Any] = {
        "patch_is_None": patch is None,
        "patch_exists": bool(patch and patch.strip()),
        "patch_successfully_applied": graded and row.get("applied", True) is not False,
        "resolved": graded and bool(row.get("fail_to_pass")),
        "tests_status": status,
        "test_class": row.get("test_class") if graded else "Error",
        "laxity": row.get("laxity"),
        "interval": row.get("interval"),
    }
    if not graded:
        entry["error"] = row["error"]
    return {prediction.instance_id: entry}


def write_instance_log(log_dir: Path, run_id: str, prediction: Prediction, row: dict[str, Any]) -> Path:
    """Write one instance's folder; returns it."""
    folder = instance_dir(log_dir, run_id, prediction.model_name_or_path, prediction.instance_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "patch.diff").write_text(prediction.model_patch or "")
    (folder / "report.json").write_text(json.dumps(harness_report(prediction, row), indent=2) + "\n")
    (folder / "mpe.json").write_text(json.dumps(row, indent=2, sort_keys=True) + "\n")
    (folder / "run_instance.log").write_text(run_log(row))
    return folder


def try_instance_log(log_dir: Path, run_id: str, prediction: Prediction, row: dict[str, Any]) -> str | None:
    """:func:`write_instance_log`, never raising: why the folder could not be written, or None. One instance's
    log (a full disk, a field no formatter expected) must not stop the batch; the caller records the reason as
    that instance's error."""
    try:
        write_instance_log(log_dir, run_id, prediction, row)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the batch goes on and says it
        return f"its log folder was not written ({type(exc).__name__}: {exc})"
    return None
