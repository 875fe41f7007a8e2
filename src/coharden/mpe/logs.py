"""Per-instance log folders of a batch MPE, laid out as the SWE-bench harness lays out its evaluation logs:
``LOG_DIR/RUN_ID/MODEL/INSTANCE_ID/`` (``MODEL``: the prediction's ``model_name_or_path``, ``/`` as ``__``)
holding ``patch.diff`` (the prediction as given), ``report.json`` (the harness's per-instance shape, see
:func:`harness_report`: tools that read the harness's reports read it), ``mpe.json`` (coharden's full record of
the instance, as its line in ``mpe.jsonl``) and ``run_instance.log`` (what happened, in words: the test's
verdicts on the buggy and the fixed code, the class, the laxity, every mutant with its cell, or why there is
none). Written as each instance finishes, so an interrupted run keeps the logs of what finished.

Every field is formatted without trusting its type: a row from an older store or an ungraded mutant holds
``None`` where a number is expected, and a log that cannot be written must never stop the batch.

Names come from the prediction file, so a folder name must neither escape the log directory nor be shared by two
names. A name that is already a plain path component keeps the harness's folder (``acme/otter`` ->
``acme__otter``); any other (spaces, separators, leading or trailing dots, ``..``, NUL, longer than
:data:`MAX_COMPONENT` bytes, empty) gets its cleaned form plus a hash of the whole name (:func:`folder_name`), so
names that clean alike stay apart. What can still meet (``a/b`` and ``a__b``, or names that differ in case only,
one folder on a case-insensitive disk) is refused before anything runs (:func:`check_log_folders`); so is a
folder written earlier for another name: each folder keeps the name it was written for in :data:`NAME_FILE`."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError
from coharden.escaping import log_value
from coharden.mpe.result import BREAKING, IMPLAUSIBLE
from coharden.schema.prediction import Prediction

#: The longest folder name written, in bytes (file systems allow 255 per component).
MAX_COMPONENT = 200
#: The file in every folder of the layout (run, model, instance) holding, as a JSON string, the name it is for.
NAME_FILE = ".coharden-name"
_PLAIN = re.compile(r"[A-Za-z0-9_.+=@-]+")


class LogFolderError(CoHardenError):
    """Two names of one batch would share a log folder, or a folder was written for another name."""


#: SWE-bench's ``tests_status`` buckets, in the harness's order
TEST_STATUS_KEYS = ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")
_PASSING = frozenset({"PASSED", "XFAIL"})


def safe_name(name: str) -> str:
    """A path component for an id (``/`` and other separators replaced, never ``.`` or ``..``); lossy: see
    :func:`folder_name` for the folder of a name."""
    cleaned = re.sub(r"[^A-Za-z0-9_.+=@-]+", "_", name).strip(".") or "_"
    return cleaned


def folder_name(name: str, *, model: bool = False) -> str:
    """The folder of one name: the harness's (a model's ``/`` as ``__``) when that is a plain path component
    (letters, digits, ``_.+=@-``; no leading or trailing dot; at most :data:`MAX_COMPONENT` bytes); otherwise
    its cleaned form, cut short, with ``-`` and 12 hex digits of the SHA-256 of the whole name, so two names
    that clean alike get two folders, deterministically."""
    base = name.replace("/", "__") if model else name
    if _PLAIN.fullmatch(base) and base.strip(".") == base and len(base) <= MAX_COMPONENT:
        return base
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{safe_name(base)[:MAX_COMPONENT - 13].rstrip('.')}-{digest}"


def instance_dir(log_dir: Path, run_id: str, model: str, instance_id: str) -> Path:
    """``LOG_DIR/RUN_ID/MODEL/INSTANCE_ID``: one system's predictions apart from another's, as in the harness."""
    return log_dir / folder_name(run_id) / folder_name(model, model=True) / folder_name(instance_id)


def _written_for(folder: Path) -> str | None:
    """The name ``folder`` was written for (its :data:`NAME_FILE`), None when it has none (or is not there)."""
    try:
        return str(json.loads((folder / NAME_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def _legacy_names(folder: Path) -> tuple[str, str] | None:
    """(model, instance id) of an instance folder written before folders kept their names: its report.json."""
    try:
        row = json.loads((folder / "report.json").read_text(encoding="utf-8"))
        return str(row["model_name_or_path"]), str(row["instance_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_log_folders(log_dir: Path, run_id: str, predictions: Sequence[Prediction]) -> None:
    """Refuse, before anything runs, names that would share a log folder: two systems (or two instance ids of
    one system) of this batch whose folders are equal, ignoring case (one folder on a case-insensitive disk),
    and any folder already on disk written for another name. The error names both names and the folder."""
    run = log_dir / folder_name(run_id)
    if (earlier := _written_for(run)) is not None and earlier != run_id:
        raise LogFolderError(f"log folder {run} was written for run {earlier!r}, not {run_id!r}; give another "
                             "--run-id or --log-dir")
    models: dict[str, str] = {}
    instances: dict[tuple[str, str], str] = {}
    for pred in predictions:
        model, iid = pred.model_name_or_path, pred.instance_id
        model_folder, instance_folder = folder_name(model, model=True), folder_name(iid)
        other = models.setdefault(model_folder.casefold(), model)
        if other != model:
            raise LogFolderError(f"systems {other!r} and {model!r} would share the log folder "
                                 f"{run / model_folder}; rename one of them in the predictions")
        other = instances.setdefault((model_folder.casefold(), instance_folder.casefold()), iid)
        if other != iid:
            raise LogFolderError(f"instance ids {other!r} and {iid!r} of system {model!r} would share the log "
                                 f"folder {run / model_folder / instance_folder}")
    for model in models.values():
        folder = run / folder_name(model, model=True)
        if (earlier := _written_for(folder)) is not None and earlier != model:
            raise LogFolderError(f"log folder {folder} was written for system {earlier!r}, not {model!r}; give "
                                 "another --run-id or --log-dir")
    for (model_key, _), iid in instances.items():
        model = models[model_key]
        folder = run / folder_name(model, model=True) / folder_name(iid)
        earlier = _written_for(folder)
        legacy = _legacy_names(folder) if earlier is None else None
        if (earlier is not None and earlier != iid) or (legacy is not None and legacy != (model, iid)):
            was = repr(earlier) if earlier is not None else f"{legacy[1]!r} of system {legacy[0]!r}"  # type: ignore[index]
            raise LogFolderError(f"log folder {folder} was written for instance {was}, not {iid!r} of system "
                                 f"{model!r}; give another --run-id or --log-dir")


def _claim(folder: Path, name: str) -> None:
    """Make ``folder`` and record the name it is for (the check before the run refused any other)."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / NAME_FILE
    if _written_for(folder) != name:
        marker.write_text(json.dumps(name) + "\n", encoding="utf-8")


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
    line = f"{label}: {log_value(verdict.get('outcome', '?'))}"
    reason = str(verdict.get("reason") or "").strip()
    return [line + (f" ({log_value(reason)})" if reason else "")]


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
            f"stop: {log_value(row.get('stop') or '-')}")


def run_log(row: dict[str, Any]) -> str:
    """The text of ``run_instance.log`` for one batch row. Every value from the prediction or its runs (names,
    ids, reasons, errors, descriptions) goes through :func:`coharden.escaping.log_value`: one line each, so
    none can forge a line (``class: Rigorous``) of its own."""
    v = log_value
    lines = [f"instance: {v(row.get('instance_id'))}", f"test: {v(row.get('model_name_or_path'))}"]
    if "error" in row:
        return "\n".join([*lines, f"error: {v(row['error'])}", ""])
    if row.get("test_ids"):
        lines.append("test ids: " + ", ".join(v(t) for t in row["test_ids"]))
    lines += _verdict("on the buggy code", row.get("candidate_buggy"))
    lines += _verdict("on the fixed code", row.get("candidate_fixed"))
    lines.append(f"class: {v(row.get('test_class') or '?')}")
    if row.get("laxity") is not None:
        lines.append(_laxity_line(row))
    if row.get("reason"):
        lines.append(f"reason: {v(row['reason'])}")
    lines += [f"warning: {v(w)}" for w in row.get("warnings") or []]
    timings = row.get("timings")
    if isinstance(timings, dict) and timings.get("total") is not None:
        lines.append(f"time: {number(timings.get('total'), '.1f')}s")
    mutants = row.get("mutants") or []
    if mutants:
        lines.append(f"mutants ({len(mutants)}; `coharden mutants show {v(row.get('instance_id'))}:ID` prints one):")
        for m in mutants:
            m = m if isinstance(m, dict) else {}
            mutant = m.get("mutant") or {}
            # a mutant with no cell (inadmissible, implausible) is stored with cell null: its reason stands there
            cell = m.get("cell") or (IMPLAUSIBLE if (m.get("plausibility") or {}).get("outcome") in BREAKING
                                     else "-")
            lines.append(f"  {v(cell):11}  {v(mutant.get('id', '?'))}  {v(mutant.get('location', ''))}  "
                         f"{v(mutant.get('description', ''))}")
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
    """Write one instance's folder (each level keeping the name it is for); returns it. Run
    :func:`check_log_folders` over the batch first."""
    folder = instance_dir(log_dir, run_id, prediction.model_name_or_path, prediction.instance_id)
    _claim(folder.parent.parent, run_id)
    _claim(folder.parent, prediction.model_name_or_path)
    _claim(folder, prediction.instance_id)
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
