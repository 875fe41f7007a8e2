"""Executors: the local pool and Ray give the same batch results; a killed Ray worker's job is retried; a
finished batch resumes from the store without running anything."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import make_patch, make_repo
from tests.mpe.test_mpe import BUGGY, FIX, GOLDEN, LAX, MISALIGNED

from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.execution.engine import LocalEngine, make_engine
from coharden.execution.store import Store
from coharden.mpe.batch import BatchGrading, BatchOutputs, run_batch
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Operator
from coharden.schema.prediction import Prediction

HAS_RAY = importlib.util.find_spec("ray") is not None
OPERATORS = [Operator.BEHAVIOR_SUBSTITUTION, Operator.INPUT_SPECIFIC_SHORTCUT]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("engine")
    repo, commit = make_repo(root / "rng", BUGGY)
    fix = make_patch(repo, FIX)
    golden = make_patch(repo, {"tests/test_rng.py": GOLDEN})
    instance = Instance(instance_id="rng__clamp", repo=str(repo), base_commit=commit, patch=fix, test_patch=golden)
    predictions = [Prediction(instance_id="rng__clamp", model_name_or_path=name,
                              model_patch=make_patch(repo, {"tests/test_rng.py": text}))
                   for name, text in (("lax", LAX), ("misaligned", MISALIGNED))]
    predictions.append(Prediction(instance_id="missing", model_name_or_path="x", model_patch="x"))
    return {"instances": {"rng__clamp": instance}, "predictions": predictions, "root": root}


def _strip(rows: list[dict[str, Any]]) -> str:
    """A row without what depends on timing: durations, and how a verdict was got. Two predictions that share
    the reference test run at once, so which of them made a reference run and which found it in the store
    depends on the schedule; the number of verdicts per test does not."""
    def clean(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"made", "cached", "implied", "not_needed"}:
            return sum(value.values())
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in ("timings", "duration")}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return json.dumps(clean(rows), sort_keys=True)


class CountingEngine(LocalEngine):
    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.jobs = 0

    def run(self, jobs, on_result=None):  # type: ignore[no-untyped-def]
        self.jobs += len(jobs)
        return super().run(jobs, on_result)


def _run(batch: dict[str, Any], tmp: Path, engine: Any, store_name: str = "s.sqlite") -> list[dict[str, Any]]:
    settings = Settings(timeout=60, store=tmp / store_name, cache_dir=tmp / "cache", workers=2)
    grading = BatchGrading(settings, MPEConfig(operators=OPERATORS, paper_classes=True))  # decisive on small pools
    outputs = BatchOutputs(Store(settings.store), tmp / "out")
    return run_batch(batch["instances"], batch["predictions"], grading, outputs, engine=engine)


def test_local_batch_resumes_from_the_store(batch: dict[str, Any], tmp_path: Path) -> None:
    first = CountingEngine(2)
    rows = _run(batch, tmp_path, first)
    assert [r.get("test_class", "error") for r in rows] == ["Lax", "Misaligned", "error"]
    assert first.jobs == 3
    again = CountingEngine(2)
    assert _strip(_run(batch, tmp_path, again)) == _strip(rows)
    assert again.jobs == 1  # only the row that ended in an error is tried again


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'coharden[ray]')")
def test_ray_gives_the_same_results_as_the_local_pool_even_when_a_worker_dies(batch: dict[str, Any],
                                                                             tmp_path: Path) -> None:
    import ray
    from ray import cloudpickle

    local_rows = _run(batch, tmp_path / "local", LocalEngine(2))
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    engine = make_engine("ray", workers=2)
    try:
        ray_rows = _run(batch, tmp_path / "ray", engine)
        assert _strip(ray_rows) == _strip(local_rows)

        # a worker process that dies mid-job: Ray runs the job again elsewhere, the result is the same
        marker = tmp_path / "died-once"
        jobs = [(_die_once, (str(marker), 21))]
        assert engine.run(jobs) == [42]
        assert marker.exists()
    finally:
        engine.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert not ray.is_initialized()


@pytest.mark.slow
@pytest.mark.skipif(not HAS_RAY or importlib.util.find_spec("ray._private.authentication") is None,
                    reason="needs a Ray with token authentication (pip install 'coharden[ray]')")
def test_a_ray_cluster_that_refuses_the_driver_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """A real Ray head with token authentication, joined by a driver without the token: one line that says which
    cluster and what to set, no traceback (Ray's own error is a page of retries and three chained exceptions)."""
    import socket

    import ray

    def free_port() -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]

    port = free_port()
    # every port of the head's own (not Ray's fixed defaults, which another Ray on this machine may hold)
    ports = [f"--{name}={free_port()}" for name in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                     "runtime-env-agent-port", "metrics-export-port")]
    ray_cli = Path(sys.executable).with_name("ray")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "a" * 32, "RAY_USAGE_STATS_ENABLED": "0"}
    # a short directory: Ray's sockets live in it, and a socket's path may not be longer than 107 bytes
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    head = subprocess.Popen([str(ray_cli), "start", "--head", "--block", "--port", str(port), "--num-cpus", "1",
                             "--include-dashboard", "false", "--temp-dir", str(temp), *ports],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None, "the Ray head did not start"
            assert time.monotonic() < deadline, "the Ray head is not listening after 60 s"
            time.sleep(0.5)
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
        # the driver gives up on the refusing head after 5 s of reconnecting instead of Ray's 60 (the error is the
        # same; the test 51 s -> 22 s here)
        monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "5")
        with pytest.raises(CoHardenError) as refused:
            make_engine("ray", workers=1, address=f"127.0.0.1:{port}").close()  # joined after all: it fails
    finally:
        try:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # the head and every process it started
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(head.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    head.wait(timeout=30)
                    break
        finally:
            shutil.rmtree(temp, ignore_errors=True)
    said = str(refused.value)
    assert f"could not join the Ray cluster at 127.0.0.1:{port}" in said
    assert "RAY_AUTH_MODE=token" in said
    assert "\n" not in said
    assert not ray.is_initialized()


def _die_once(marker: str, value: int) -> int:
    if not os.path.exists(marker):  # noqa: PTH110 - runs inside a Ray worker
        Path(marker).write_text("x")
        os._exit(1)
    return value * 2


def test_unknown_executor_is_a_clear_error() -> None:
    from coharden.errors import CoHardenError

    with pytest.raises(CoHardenError, match="unknown executor"):
        make_engine("slurm", workers=1)
