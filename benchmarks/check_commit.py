"""Wall time of ``coharden check`` of a commit beside the bare pytest run of that commit's tests.

    python benchmarks/check_commit.py REPO [--rev HEAD] [--store FILE] [--python PY]

Prints, side by side: the commit's changed test files run by plain pytest at the commit (in a throwaway clone),
the first ``coharden check`` (a fresh store unless --store), and a second check of the same commit (the whole
report from the store, no test process), each with its ratio to the bare run and how its verdicts were got.
Nothing is written in REPO."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(cmd: list[str], cwd: Path) -> tuple[float, int, str]:
    """Wall seconds, exit status and stdout of ``cmd``."""
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    return time.monotonic() - started, proc.returncode, proc.stdout


def _how(stdout: str) -> str:
    """How a check's JSON report got its verdicts."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return "(no report)"
    if data.get("from_store"):
        return "the stored report, no test run"
    runs = data.get("runs", {})
    return f"{runs.get('made', 0)} run, {runs.get('cached', 0)} from the store, {runs.get('implied', 0)} implied"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    repo = args.repo.resolve()
    from coharden.check.commit import read_change
    from coharden.config import DEFAULT_TEST_PATTERNS

    change = read_change(repo, args.rev, DEFAULT_TEST_PATTERNS)
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", "--shared", str(repo), str(clone)], check=True)
        subprocess.run(["git", "checkout", "--quiet", "--detach", change.head], cwd=clone, check=True)
        bare, bare_rc, _ = _timed([args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   *change.test_files], clone)
        store = args.store or Path(tmp) / "store.sqlite"
        coharden = [sys.executable, "-m", "coharden", "check", args.rev, "--store", str(store), "--python",
                    args.python, "--fail-on", "never", "--format", "json"]
        first, first_rc, first_out = _timed(coharden, repo)
        second, second_rc, second_out = _timed(coharden, repo)
    print(f"commit {change.short}: tests {', '.join(change.test_files)}; fix {', '.join(change.fix_files)}")
    print(f"{'run':<34}{'wall s':>10}{'x bare':>10}{'exit':>6}  verdicts")
    for name, seconds, rc, how in (("bare pytest of the commit's tests", bare, bare_rc, ""),
                                   ("coharden check (first)", first, first_rc, _how(first_out)),
                                   ("coharden check (again, the store)", second, second_rc, _how(second_out))):
        print(f"{name:<34}{seconds:>10.2f}{seconds / bare if bare else 0:>10.1f}{rc:>6}  {how}")


if __name__ == "__main__":
    main()
