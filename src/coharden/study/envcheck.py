"""Environment check: does the golden test of every reachable SWE-bench instance behave as the benchmark says
in its spec environment (FAIL_TO_PASS fail on the buggy code and pass on the fixed code, PASS_TO_PASS pass)?

A failed instance says why, in one category: ``interpreter`` / ``install`` / ``import`` (the environment),
``network`` (a test needs the network, which test runs do not have), ``flaky`` (a second run disagrees with
the first), ``timeout`` (the fixed run exceeded the time limit), ``tests`` (a wanted test keeps failing, or
never fails on the buggy code), ``repo`` (no snapshot, or one that lacks a file the commit needs).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from coharden.config import Settings
from coharden.errors import CoHardenError, SnapshotError
from coharden.execution.sandbox import NETWORK_FAILURE
from coharden.execution.testids import harness_ids
from coharden.schema.instance import Instance
from coharden.schema.verdict import Outcome, TestStatus, Verdict

# data a test downloads when its bundled copy is stale or absent (astropy's IERS and leap-second tables)
_OFFLINE_DATA = re.compile(r"IERS\w*(Warning|Error)|leap-second (auto-update|file)|auto-update failed|"
                           r"Could not download|failed to download", re.I)
# a skip for want of a module: xarray's 'requires cdms2', pytest.importorskip's "could not import 'x'"
_SKIPPED_FOR = re.compile(r"\b(?:requires|could not import|No module named)\s+'?([A-Za-z_][\w.]*)")
_MISSING_MODULE = re.compile(r"(ModuleNotFoundError|ImportError): No module named '?[\w.]+'?")
_BAD = (TestStatus.FAILED, TestStatus.ERROR, TestStatus.SKIPPED, TestStatus.MISSING)


@dataclass
class EnvCheckRow:
    instance_id: str
    repo: str
    version: str
    verified: bool
    category: str = ""  # empty when verified
    reason: str = ""
    f2p: int = 0
    p2p: int = 0
    failing: list[str] = field(default_factory=list)
    seconds: float = 0.0
    absent: int = 0  # PASS_TO_PASS ids naming a file the checkout lacks (lines of pytester's inner runs): not run


def _statuses(verdict: Verdict, ids: list[str]) -> dict[str, list[TestStatus]]:
    return {i: verdict.tests.get(i, [TestStatus.MISSING]) for i in ids}


def _failing(statuses: dict[str, list[TestStatus]]) -> list[str]:
    return [i for i, st in statuses.items() if any(s in _BAD for s in st)]


def check_instance(instance: Instance, repo: Path, settings: Settings) -> EnvCheckRow:
    """Build (or reuse) the instance's environment and check its golden test."""
    from coharden.environment.build import BuildError
    from coharden.environment.derived import instance_environment
    from coharden.environment.specbuild import SKIPPED_SYSTEM_STEP
    from coharden.environment.specs import repo_slug
    from coharden.execution.executor import InstanceExecutor

    started = time.monotonic()
    row = EnvCheckRow(instance.instance_id, repo_slug(instance.repo), str(instance.version), False,
                      f2p=len(instance.FAIL_TO_PASS), p2p=len(instance.PASS_TO_PASS))
    try:
        # the spec environment, or one derived from it where the base commit needs more dependencies
        built = instance_environment(instance, repo, settings)
    except (CoHardenError, BuildError) as exc:
        row.category, row.reason = "install", str(exc)[:500]
        return row
    except Exception as exc:  # noqa: BLE001 - one instance's surprise must not end the batch
        row.category, row.reason = "install", f"environment: {type(exc).__name__}: {exc}"[:500]
        return row
    if not built.ok:
        row.category = built.failed_step if built.failed_step in ("interpreter", "import") else "install"
        row.reason = built.error[-600:]
        row.seconds = round(time.monotonic() - started, 1)
        return row
    run_settings = built.settings(settings)
    f2p = harness_ids(instance.FAIL_TO_PASS)
    p2p = [i for i in harness_ids(instance.PASS_TO_PASS) if i not in f2p]
    try:
        with InstanceExecutor(instance, repo, run_settings) as executor:
            absent = executor.absent_files(p2p, instance.test_patch)
            p2p, row.absent = [i for i in p2p if i not in absent], len(absent)
            # whole test files, as the harness runs them (a test may read what an earlier one of its file left)
            golden = executor.test_patch(instance.test_patch, name="golden", ids=f2p).model_copy(
                update={"whole_files": True})
            # the fixed code runs FAIL_TO_PASS and PASS_TO_PASS in one process, as the harness does
            both = executor.test_patch(instance.test_patch, name="golden+p2p", ids=f2p + p2p).model_copy(
                update={"whole_files": True})
            kept = [i for i in both.ids if i not in golden.ids]
            buggy = executor.verdict("", golden)
            fixed = executor.verdict(instance.patch, both)
            if _judge(row, golden.ids, kept, buggy, fixed) and row.category == "tests":
                # a second run (nothing is cached without a store) tells flaky from deterministic
                if executor.verdict(instance.patch, both).outcome is Outcome.PASS:
                    row.category = "flaky"
    except SnapshotError as exc:
        row.category, row.reason = "repo", str(exc)[:500]
    except CoHardenError as exc:
        row.category, row.reason = "tests", f"cannot run: {exc}"[:500]
    except Exception as exc:  # noqa: BLE001 - one instance's surprise must not end the batch
        row.category, row.reason = "tests", f"cannot run ({type(exc).__name__}): {exc}"[:500]
    row.verified = not row.category
    skipped = [w for w in built.warnings if w.startswith(SKIPPED_SYSTEM_STEP)]
    if skipped and not row.verified:  # a package the harness's image had may be what is missing
        row.reason += f" [{len(skipped)} system step(s) of the spec skipped: coharden env system {row.repo} --run]"
    row.seconds = round(time.monotonic() - started, 1)
    return row


def _judge(row: EnvCheckRow, f2p: list[str], p2p: list[str], buggy: Verdict, fixed: Verdict) -> bool:
    """Fill the row's category / reason from the buggy run (FAIL_TO_PASS) and the fixed run (both kinds);
    True when something is wrong."""
    texts = " ".join(v.reason + " " + v.output_tail for v in (buggy, fixed))
    missing = _MISSING_MODULE.search(texts)
    if missing and fixed.outcome in (Outcome.HARNESS_ERROR, Outcome.COLLECTION_ERROR):
        # the code under test needs a module the environment lacks: typically a dependency declared at the
        # instance's base commit but not at the environment-setup commit the environment was installed from
        row.category, row.reason = "import", f"fixed code: {fixed.outcome.value}: {missing.group(0)}"
    elif fixed.outcome is Outcome.TIMEOUT:
        row.category, row.reason = "timeout", f"fixed code: {fixed.short()}"[:500]
    elif fixed.outcome is Outcome.HARNESS_ERROR:
        row.category, row.reason = "tests", f"fixed code: {fixed.short()}"[:500]
    elif fixed.outcome is not Outcome.PASS:
        fixed_bad, kept_bad = _failing(_statuses(fixed, f2p)), _failing(_statuses(fixed, p2p))
        row.failing = (fixed_bad + kept_bad)[:10]
        # the failing tests' own messages decide (other tests' output may mention connections)
        skipped_for = _SKIPPED_FOR.search(fixed.reason)
        if skipped_for and all(set(st) <= {TestStatus.SKIPPED, TestStatus.PASSED, TestStatus.XFAIL}
                               for st in (_statuses(fixed, f2p) | _statuses(fixed, p2p)).values()):
            # only skips, for want of an optional module: the environment lacks it (often conda-only)
            from coharden.environment.spec_requirements import CONDA_ONLY

            module = skipped_for.group(1)
            conda = " (a conda-only package: pip cannot install it)" if module.lower() in CONDA_ONLY else ""
            row.category = "import"
            row.reason = (f"{len(fixed_bad + kept_bad)} wanted tests are skipped: the environment lacks the optional "
                          f"module {module}{conda}: {fixed.short()}")[:600]
            return True
        offline = _OFFLINE_DATA.search(fixed.reason)
        row.category = "network" if offline or NETWORK_FAILURE.search(fixed.reason) else "tests"
        why = (f"data the tests download is stale or missing and cannot be fetched offline ({offline.group(0)}); "
               if offline else "")
        row.reason = (f"{why}on the fixed code {len(fixed_bad)} FAIL_TO_PASS and {len(kept_bad)} PASS_TO_PASS tests "
                      f"do not pass: {fixed.short()}")[:600]
    elif buggy.outcome is Outcome.PASS:
        row.category, row.reason = "tests", "the golden test passes on the buggy code"
    elif buggy.outcome not in (Outcome.FAIL, Outcome.COLLECTION_ERROR):
        row.category, row.reason = "tests", f"buggy code: {buggy.short()}"[:500]
    return bool(row.category)


def summarize(rows: list[EnvCheckRow]) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = {}
    for row in rows:
        counts = table.setdefault(row.repo, Counter())
        counts["instances"] += 1
        counts["verified" if row.verified else row.category] += 1
    return {repo: dict(c) for repo, c in sorted(table.items())}


def render_table(rows: list[EnvCheckRow]) -> str:
    categories = ["interpreter", "install", "import", "network", "flaky", "timeout", "tests", "repo"]
    summary = summarize(rows)
    lines = ["| repository | instances | verified | " + " | ".join(categories) + " |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in categories) + " |"]
    total: Counter[str] = Counter()
    for repo, counts in summary.items():
        total.update(counts)
        lines.append(f"| {repo} | {counts.get('instances', 0)} | {counts.get('verified', 0)} | "
                     + " | ".join(str(counts.get(c, 0)) for c in categories) + " |")
    lines.append(f"| **all** | {total['instances']} | {total['verified']} | "
                 + " | ".join(str(total[c]) for c in categories) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(rows: list[EnvCheckRow], output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    with open(output / "envcheck.jsonl", "w") as handle:
        for row in rows:
            handle.write(json.dumps(asdict(row)) + "\n")
    failed = [r for r in rows if not r.verified]
    body = ["# Environment check (golden tests in spec environments)", "", render_table(rows)]
    if failed:
        body += ["## Failed instances", ""]
        body += [f"- `{r.instance_id}` ({r.category}): {r.reason.splitlines()[0] if r.reason else ''}"
                 for r in failed]
    absent = [r for r in rows if r.absent]
    if absent:
        body += ["", "## PASS_TO_PASS ids not run", "",
                 "Ids naming a file the checkout does not have: lines of pytest runs a test starts itself (pytester),"
                 " which the harness's log parser read as tests.", ""]
        body += [f"- `{r.instance_id}`: {r.absent}" for r in absent]
    (output / "envcheck.md").write_text("\n".join(body) + "\n")


def load_done(output: Path) -> dict[str, EnvCheckRow]:
    path = output / "envcheck.jsonl"
    if not path.is_file():
        return {}
    rows = [EnvCheckRow(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    return {r.instance_id: r for r in rows}
