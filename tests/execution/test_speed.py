"""The fast paths of MPE give the verdicts of a fresh serial run: parallel phases (F->P side by side, recordings
on the workers), cached verdicts and recordings (a rerun starts no test process), one recording for a test and
its identical copy."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from coharden.config import Settings
from coharden.evaluation.grading import GradeOptions
from coharden.evaluation.grading_jobs import Grading, InstanceWork, grade_all
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pool import ExecutorPool
from coharden.execution.store import Store
from coharden.instances import load_local, resolve_repo
from coharden.mpe.evaluate import MPERequest, evaluate
from coharden.mutation.context import record_targets
from coharden.mutation.pool import Recording, fix_context, record_calls
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Operator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "printer_brackets"


def _comparable(result: Any) -> str:
    data = result.to_json(timings=False)
    return json.dumps(data, sort_keys=True)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cache = tmp_path_factory.mktemp("cache")
    local = load_local(EXAMPLE, cache)
    return {"instance": local.instance, "repo": resolve_repo(local.instance, None), "cache": cache,
            "candidates": {c.name: c.patch for c in local.candidates}}


def _mpe(example: dict[str, Any], tmp: Path, *, workers: int, store: Store | None, name: str = "lax"
         ) -> tuple[Any, int]:
    """MPE of candidate ``name`` vs golden; the number of pytest processes it started (all executors)."""
    settings = Settings(timeout=60, cache_dir=example["cache"], workers=workers)
    made: list[InstanceExecutor] = []

    def factory() -> InstanceExecutor:
        ex = InstanceExecutor(example["instance"], example["repo"], settings, store)
        made.append(ex)
        return ex

    with factory() as ex, ExecutorPool(factory, size=workers) as pool:
        candidate = ex.test_patch(example["candidates"][name], name=name)
        result = evaluate(ex, MPERequest(example["instance"].patch, candidate, ex.golden_test(),
                                         MPEConfig(workers=workers, seed=3, max_mutants=33)), pool=pool)
    return result, sum(e.runs for e in made)


@pytest.mark.slow
def test_parallel_and_cached_runs_equal_a_fresh_serial_run(example: dict[str, Any], tmp_path: Path) -> None:
    serial, serial_runs = _mpe(example, tmp_path, workers=1, store=None)
    assert serial.mutants
    assert serial.fail_to_pass
    store = Store(tmp_path / "s.sqlite")
    parallel, parallel_runs = _mpe(example, tmp_path, workers=2, store=store)
    cached, cached_runs = _mpe(example, tmp_path, workers=2, store=store)
    assert _comparable(parallel) == _comparable(serial)
    assert _comparable(cached) == _comparable(serial)
    assert parallel_runs == serial_runs > 0
    assert cached_runs == 0  # verdicts and recordings both come from the store
    assert serial.timings["recording"] > 0
    assert "timeouts" in serial.timings


def test_a_test_and_its_identical_copy_are_recorded_once(example: dict[str, Any]) -> None:
    settings = Settings(timeout=60, cache_dir=example["cache"], workers=1)
    inst = example["instance"]
    with InstanceExecutor(inst, example["repo"], settings, None) as ex:
        golden = ex.golden_test()
        copy = golden.model_copy(update={"name": "copy", "patch": golden.patch + "\n"})
        targets = record_targets(fix_context(ex, inst.patch))
        assert targets
        before = ex.runs
        both = record_calls(ex, Recording(inst.patch, [golden, copy], targets))
        assert ex.runs - before == 1
        alone = record_calls(ex, Recording(inst.patch, [golden], targets))
    assert [r["from_test"] for r in both if r["kind"] == "session"] == ["golden", "copy"]
    strip = [{k: v for k, v in r.items() if k != "from_test"} for r in both if r.get("from_test") == "golden"]
    assert strip == [{k: v for k, v in r.items() if k != "from_test"} for r in alone]
    assert len(both) == 2 * len(alone)


def _grades(example: dict[str, Any], tmp: Path, engine: Any, workers: int) -> str:
    settings = Settings(timeout=60, cache_dir=example["cache"], store=tmp / "s.sqlite", workers=workers)
    work = InstanceWork()
    for name in ("lax", "rigorous", "misaligned"):
        work.add_test(example["candidates"][name])
    work.add_fix(example["instance"].patch)
    iid = example["instance"].instance_id
    options = GradeOptions(mpe=MPEConfig(operators=[Operator.INCOMPLETE_FIX, Operator.INPUT_SPECIFIC_SHORTCUT],
                                         per_operator=2), workers=workers)
    store = Store(settings.store) if engine is None else None
    grades = grade_all({iid: example["instance"]}, {iid: work}, Grading(settings, store, options), engine=engine)
    return json.dumps(dataclasses.asdict(grades[iid]), sort_keys=True, default=str)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (the dev extra has it)")
def test_eval_on_ray_equals_the_local_executor(example: dict[str, Any], tmp_path: Path) -> None:
    import ray

    from coharden.execution.engine import LocalEngine, make_engine

    # the local executor against Ray (that parallel equals a fresh serial run is
    # test_parallel_and_cached_runs_equal_a_fresh_serial_run's: a serial run here would only cost CI time)
    local = _grades(example, tmp_path / "local", LocalEngine(2), 2)
    engine = make_engine("ray", workers=2)
    try:
        on_ray = _grades(example, tmp_path / "ray", engine, 2)
    finally:
        engine.close()
    assert not ray.is_initialized()
    assert '"Lax"' in local
    assert '"Rigorous"' in local
    assert on_ray == local


# --- real data: 3 sympy instances ----------------------------------------------------------------------------

SHARED = Path(os.environ.get("COHARDEN_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
REPOS = os.environ.get("COHARDEN_REPOS")
SYMPY_PYTHON = os.environ.get("COHARDEN_SYMPY_PYTHON")
REAL_IDS = ["sympy__sympy-14976", "sympy__sympy-15017", "sympy__sympy-18763",
            "sympy__sympy-24066"]  # the last fix changes no module `import sympy` loads: its runs are warm


def _strip_durations(value: Any) -> Any:
    """Without durations. Recorded values are embedded by their structural encoding (sympy's ``srepr``), which
    is the same for equal values whatever ran before in the process; the pickles embedded before carried a
    sympy object's caches (sympy-18763), so they differed between a serial (cold) and a warm run."""
    if isinstance(value, dict):
        return {k: _strip_durations(v) for k, v in value.items() if k not in ("duration", "output_tail")}
    if isinstance(value, list):
        return [_strip_durations(v) for v in value]
    return value


@pytest.mark.realdata
@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(not (SHARED / "swebench_verified_sympy.jsonl").is_file(), reason=f"no shared data at {SHARED}")
@pytest.mark.skipif(not REPOS or not (Path(REPOS) / "sympy__sympy").is_dir(),
                    reason="set COHARDEN_REPOS to a directory holding a sympy clone as sympy__sympy")
@pytest.mark.skipif(not SYMPY_PYTHON or not Path(SYMPY_PYTHON).exists(),
                    reason="set COHARDEN_SYMPY_PYTHON to a Python 3.11 with pytest and mpmath==1.3.0")
def test_real_parallel_and_cached_mpe_equal_a_fresh_serial_run(tmp_path: Path) -> None:
    from coharden.study.data import StudySource, load_data
    from coharden.study.real_bugs import RealBugsStudy, StudyConfig

    settings = Settings(python=SYMPY_PYTHON, repos_dir=Path(REPOS or ""), timeout=300, preload=["mpmath"])
    data = load_data(StudySource(SHARED, python_version="3.11.7"), settings.tests.test_patterns)

    def golden_mpe(study: RealBugsStudy, iid: str) -> str:
        inst = data.instances[iid]
        team = study.team(inst)
        golden = team.executors[0].golden_test()
        config = study.config.mpe.model_copy(update={"workers": study.config.workers})
        result = evaluate(team.executors[0], MPERequest(inst.patch, golden, golden, config), pool=team)
        return json.dumps(_strip_durations(result.to_json(timings=False)), sort_keys=True)

    # the serial run imports sympy afresh in every test process; the parallel one keeps it imported (warm)
    studies = {w: RealBugsStudy(data, settings.with_overrides(warm_imports=["sympy"] if w == 2 else []),
                                Store(tmp_path / f"{w}.sqlite"),
                                StudyConfig(mpe=MPEConfig(per_operator=3), workers=w, ids=REAL_IDS))
               for w in (1, 2)}
    try:
        for iid in REAL_IDS:
            serial = golden_mpe(studies[1], iid)
            parallel = golden_mpe(studies[2], iid)
            cached = golden_mpe(studies[2], iid)
            assert '"mutants": []' not in serial, iid
            assert parallel == serial, iid
            assert cached == serial, iid
    finally:
        for study in studies.values():
            study.close()


# --- the real-bugs study on an engine (offline data built from a bundled example) ----------------------------

def _stable(rows: dict[str, list[dict[str, Any]]]) -> str:
    """Rows without what differs between runs (times, durations, whether a step was resumed)."""
    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()
                    if k not in ("seconds", "mpe_wall", "timings", "duration", "resumed", "bare_test_seconds",
                                 "bare_test_wall", "time_limits", "output_tail")}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    # what a process prints of itself: object addresses and its temporary directories (a worktree, a scratch
    # directory) differ between the serial run's processes and Ray's, whatever the verdicts
    text = json.dumps(clean(rows), sort_keys=True)
    return re.sub(r"/tmp/[^\s'\"\\]+", "/tmp/<path>", re.sub(r"0x[0-9a-f]{6,}", "0x<address>", text))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (the dev extra has it)")
def test_study_on_ray_equals_the_local_serial_run(tmp_path: Path) -> None:
    """The engine path (``run_on_engine``) on Ray against the default local run; a local engine takes the same
    path, so a third run would only cost CI time."""
    import ray
    from tests.study.test_study import _study_data_dir

    from coharden.execution.engine import make_engine
    from coharden.study.data import StudySource, load_data
    from coharden.study.distributed import run_on_engine
    from coharden.study.real_bugs import RealBugsStudy, StudyConfig

    repos = tmp_path / "repos"
    repos.mkdir()
    data_dir = _study_data_dir(tmp_path, repos)
    version = ".".join(map(str, sys.version_info[:3]))

    def run(name: str, engine: Any) -> str:
        settings = Settings(repos_dir=repos, store=tmp_path / f"{name}.sqlite", cache_dir=tmp_path / "cache",
                            timeout=60, workers=2)
        data = load_data(StudySource(data_dir, python_version=version), settings.tests.test_patterns)
        config = StudyConfig(workers=2, bytecode=[])
        with RealBugsStudy(data, settings, Store(settings.store), config) as study:
            rows = study.run() if engine is None else run_on_engine(study, engine)
        assert rows["golden"]
        assert len(rows["mpe"]) == 3
        return _stable(rows)

    serial = run("serial", None)
    engine = make_engine("ray", workers=2)
    try:
        assert json.loads(run("ray", engine)) == json.loads(serial)  # parsed: a failure shows the field
    finally:
        engine.close()
    assert not ray.is_initialized()


@pytest.mark.parametrize("command", [["eval", "--instances", "nowhere.jsonl"],
                                     ["study", "real-bugs", "--data", "nowhere", "--repos", "nowhere"]])
def test_an_unknown_executor_is_a_one_line_error(command: list[str]) -> None:
    from typer.testing import CliRunner

    from coharden.cli import app

    result = CliRunner().invoke(app, [*command, "--executor", "nope"])
    assert result.exit_code != 0
    assert "Invalid value for '--executor': 'nope' (known: local, ray)" in result.output
    assert "Traceback" not in result.output
