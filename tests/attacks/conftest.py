"""Fixtures of the attack files: the bundled example, loaded once per module, and executors on it that are closed
after the test. A module sets ``ATTACK_TIMEOUT`` when its attacks need longer than 20 s a run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.attacks.hostile import EXAMPLE

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import LocalInstance, load_local, resolve_repo


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> LocalInstance:
    return load_local(EXAMPLE, tmp_path_factory.mktemp("cache"))


@pytest.fixture
def make_executor(example: LocalInstance, tmp_path: Path,
                  request: pytest.FixtureRequest) -> Iterator[Callable[..., InstanceExecutor]]:
    opened: list[InstanceExecutor] = []
    timeout = getattr(request.module, "ATTACK_TIMEOUT", 20)

    def make(store: Store | None = None, **overrides: object) -> InstanceExecutor:
        settings = Settings(timeout=timeout, cache_dir=tmp_path / "cache", workers=1).with_overrides(**overrides)
        executor = InstanceExecutor(example.instance, resolve_repo(example.instance, None), settings, store)
        opened.append(executor)
        return executor

    yield make
    for executor in opened:
        executor.close()
