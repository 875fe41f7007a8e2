"""SWE-bench spec environments: build time cold and warm (cached), and verify time per instance.

    python benchmarks/env_build.py --records RECORDS.jsonl --repos DIR [--repo owner/name ...] [--per-repo N]
                                   [--cache DIR] [--skip-cold]

For each repository (first ``--per-repo`` instances of each, in file order):

* cold build: the instance's spec environment built from nothing in a fresh cache (``--skip-cold``: reuse the
  given cache, and report the cold time recorded when it was built);
* warm build: the same call again (the cached environment is found and reused);
* verify: the golden test on the buggy and the fixed code through coharden's executor (a fresh checkout,
  patches applied, the sandboxed runner), no result store;
* bare run: the same test ids run twice (buggy, fixed) by hand in the same environment from a plain checkout -
  ``python -m pytest IDS`` with PYTHONPATH set - the floor any tool pays.

Prints one row per instance and the ratio verify / bare run, of the runs alone and with the bare checkout
(verify includes its own) (the issue's goal: a warm verify costs < 2x the bare test run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from coharden.config import Settings
from coharden.environment.specbuild import SpecBuilder
from coharden.environment.specs import SpecTable, repo_slug
from coharden.execution.executor import InstanceExecutor
from coharden.execution.testids import harness_ids, runnable_id
from coharden.instances import load_records
from coharden.schema.instance import Instance


def bare_run(instance: Instance, repo: Path, python: str, test_env: dict[str, str], overlay: Path | None
             ) -> tuple[float, float]:
    """(checkout seconds, run seconds) of buggy + fixed runs of the F2P ids by hand: a checkout, then per side
    git apply and pytest (pytest repos only). coharden's verify includes its own checkout, so the fair
    comparison is against both together; the runs alone are the floor no tool can beat."""
    ids = list(dict.fromkeys(runnable_id(i) for i in harness_ids(instance.FAIL_TO_PASS)))  # as pytest selects
    with tempfile.TemporaryDirectory(prefix="bare-") as tmp:
        checkout = time.monotonic()
        work = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(repo), str(work)], check=True)
        subprocess.run(["git", "checkout", "-q", instance.base_commit], cwd=work, check=True)
        if overlay is not None:
            shutil.copytree(overlay, work, dirs_exist_ok=True)
        env = {**os.environ, **{k: v.replace("{workspace}", str(work)) for k, v in test_env.items()}}
        started = time.monotonic()
        checkout = started - checkout
        for fix in ("", instance.patch):
            subprocess.run(["git", "checkout", "-q", "--", "."], cwd=work, check=True)
            for patch in (fix, instance.test_patch):
                if patch:
                    subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=work, check=True)
            subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ids], cwd=work, env=env,
                           capture_output=True, timeout=1800)
        return checkout, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=Path, required=True)
    parser.add_argument("--repos", type=Path, required=True)
    parser.add_argument("--repo", action="append", help="owner/name (repeat; default: every repository present)")
    parser.add_argument("--per-repo", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=None, help="cache directory (default: a fresh temp dir)")
    parser.add_argument("--skip-cold", action="store_true", help="reuse --cache; report recorded cold times")
    args = parser.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="coharden-envbench-"))
    table = SpecTable.load()
    chosen: dict[str, list[Instance]] = {}
    for inst in load_records(args.records):
        slug = repo_slug(inst.repo)
        if (args.repo and slug not in args.repo) or not (args.repos / slug.replace("/", "__")).is_dir():
            continue
        if len(chosen.setdefault(slug, [])) < args.per_repo:
            chosen[slug].append(inst)
    print(f"{'instance':34} {'cold s':>8} {'warm s':>7} {'verify s':>9} {'bare s':>7} {'+co s':>6} {'ratio':>6} "
          f"{'ratio+co':>8}  outcome")
    for slug, instances in chosen.items():
        repo = args.repos / slug.replace("/", "__")
        for inst in instances:
            spec = table.get(slug, str(inst.version))
            builder = SpecBuilder(cache)
            commit = inst.environment_setup_commit or inst.base_commit
            started = time.monotonic()
            built = builder.build(repo, spec, commit, replacements=table.replacements(), force=not args.skip_cold)
            cold = built.build_seconds if args.skip_cold else time.monotonic() - started
            started = time.monotonic()
            warm_env = builder.build(repo, spec, commit, replacements=table.replacements())
            warm = time.monotonic() - started
            if not warm_env.ok:
                print(f"{inst.instance_id:34} {cold:8.1f} {warm:7.2f} {'-':>9} {'-':>7} {'-':>6}  "
                      f"build failed ({built.failed_step})")
                continue
            settings = warm_env.settings(Settings(cache_dir=cache, timeout=1800))
            f2p = harness_ids(inst.FAIL_TO_PASS)  # the executor selects and grades them as the harness does
            started = time.monotonic()
            with InstanceExecutor(inst, repo, settings) as executor:
                golden = executor.test_patch(inst.test_patch, name="golden", ids=f2p)
                buggy, fixed = executor.verdict("", golden), executor.verdict(inst.patch, golden)
            verify = time.monotonic() - started
            checkout, bare = bare_run(inst, repo, warm_env.python, warm_env.test_env, warm_env.overlay) \
                if warm_env.runner == "pytest" else (float("nan"), float("nan"))
            print(f"{inst.instance_id:34} {cold:8.1f} {warm:7.2f} {verify:9.1f} {bare:7.1f} {checkout:6.1f} "
                  f"{verify / bare:6.2f} {verify / (bare + checkout):8.2f}  "
                  f"buggy {buggy.outcome.value}, fixed {fixed.outcome.value}", flush=True)
    if args.cache is None:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
