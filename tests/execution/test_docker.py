"""The Docker test host: image naming and the command line are checked everywhere; real runs need an engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import GOOD_TEST, calc_test_file, make_patch

from coharden.config import SandboxSettings, Settings
from coharden.errors import CoHardenError
from coharden.execution.docker import ContainerRun, docker_available, docker_command, swebench_image
from coharden.execution.executor import InstanceExecutor
from coharden.schema.instance import Instance


def test_swebench_image_naming() -> None:
    expected = "swebench/sweb.eval.x86_64.sympy_1776_sympy-20590:latest"
    assert swebench_image("sympy__sympy-20590", arch="x86_64") == expected
    arm = swebench_image("Django__Django-1", arch="arm64", namespace="")
    assert arm == "sweb.eval.arm64.django_1776_django-1:latest"


def test_docker_command_isolates_the_container(tmp_path: Path) -> None:
    cmd = docker_command(ContainerRun(image="img:1", workspace=tmp_path / "ws", scratch=tmp_path / "s",
                                      inner=["python", "-m", "pytest", "tests/test_x.py::test_a b"]),
                         SandboxSettings(timeout=30, memory_mb=512, network=False))
    assert cmd[:3] == ["docker", "run", "--rm"]
    assert f"{tmp_path / 'ws'}:/testbed" in cmd
    assert ["--network", "none"] == cmd[cmd.index("--network"):cmd.index("--network") + 2]
    assert "512m" in cmd
    assert cmd[-4] == "img:1"
    assert "timeout -s KILL 31 python -m pytest 'tests/test_x.py::test_a b'" in cmd[-1]


def test_docker_sandbox_without_an_engine_is_a_clear_error(calc_repo: tuple[Path, str], tmp_path: Path) -> None:
    if docker_available():
        pytest.skip("a Docker engine is running here")
    inst = Instance(instance_id="calc__1", repo=str(calc_repo[0]), base_commit=calc_repo[1])
    with pytest.raises(CoHardenError, match="Docker engine"):
        InstanceExecutor(inst, calc_repo[0], Settings(test_host="docker", cache_dir=tmp_path))


@pytest.mark.skipif(not docker_available(), reason="no Docker engine reachable (docker info failed)")
def test_verdicts_inside_a_python_image(calc_repo: tuple[Path, str], calc_fix: str, tmp_path: Path) -> None:
    # python:3.11-slim has no pytest; install it in a derived image once would need network, so use the image
    # named by COHARDEN_TEST_IMAGE (an image with python and pytest) when set.
    import os

    image = os.environ.get("COHARDEN_TEST_IMAGE")
    if not image:
        pytest.skip("set COHARDEN_TEST_IMAGE to an image with python and pytest")
    repo, commit = calc_repo
    inst = Instance(instance_id="calc__1", repo=str(repo), base_commit=commit)
    settings = Settings(test_host="docker", docker_image=image, cache_dir=tmp_path, timeout=120)
    with InstanceExecutor(inst, repo, settings) as ex:
        test = ex.test_patch(make_patch(repo, calc_test_file(GOOD_TEST)), name="t")
        assert ex.verdict("", test).failed
        assert ex.verdict(calc_fix, test).passed
