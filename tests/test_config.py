"""Settings in sections (``sandbox``, ``server``, ``tests``, ``environment``, ``mpe``): the old flat keys read
the same wherever they are given (a config file, ``-c``, keyword construction, ``with_overrides``), a sectioned
key wins over its flat one in one mapping and the later of two mappings wins, an unknown key is one error line,
and an old file's ``sandbox: docker`` still means ``test_host``."""

from __future__ import annotations

from pathlib import Path

import pytest

from coharden.config import (
    FLAT_KEYS,
    FLAT_SECTIONS,
    SECTIONS,
    EnvironmentSettings,
    SandboxSettings,
    ServerSettings,
    Settings,
    TestSettings,
    load_settings,
)
from coharden.errors import CoHardenError

FLAT = {"timeout": 60.0, "memory_mb": 2048, "fork_server": False, "test_lanes": 1, "runner": "django",
        "pytest_args": ["-x"], "pytest_version": "5.4.3", "services": ["httpbin"], "test_env": {"A": "b"},
        "pass_env": ["LANG"]}
SECTIONED = {"sandbox": {"timeout": 60.0, "memory_mb": 2048, "pass_env": ["LANG"]},
             "server": {"fork_server": False, "test_lanes": 1},
             "tests": {"runner": "django", "pytest_args": ["-x"]},
             "environment": {"pytest_version": "5.4.3", "services": ["httpbin"], "test_env": {"A": "b"}}}


def _same(a: Settings, b: Settings) -> bool:
    return a.model_dump() == b.model_dump()


def test_every_field_has_one_section_and_no_flat_field_is_left() -> None:
    assert set(FLAT_SECTIONS) == {"sandbox", "server", "tests", "environment"}
    assert set(SECTIONS) == set(FLAT_SECTIONS) | {"mpe", "llm", "engine", "loop", "agent", "build", "study"}
    assert set(SECTIONS) | {"store", "cache_dir", "repos_dir", "workers"} == Settings.model_fields.keys()
    assert len(FLAT_KEYS) == sum(len(m.model_fields) for m in FLAT_SECTIONS.values())  # no key in two sections
    assert (SECTIONS["sandbox"], SECTIONS["server"], SECTIONS["tests"], SECTIONS["environment"]) == (
        SandboxSettings, ServerSettings, TestSettings, EnvironmentSettings)


def test_flat_and_sectioned_keyword_construction_give_equal_settings() -> None:
    flat, sectioned = Settings(**FLAT), Settings(**SECTIONED)  # type: ignore[arg-type]
    assert _same(flat, sectioned)
    assert (flat.sandbox.timeout, flat.server.fork_server, flat.tests.runner, flat.environment.services) == (
        60.0, False, "django", ["httpbin"])
    assert flat.sandbox.memory_mb == 2048
    assert flat.sandbox.cpu_seconds is None
    assert not _same(flat, Settings())
    # sections given as models, with flat keys beside them
    made = Settings(sandbox=SandboxSettings(memory_mb=2048, pass_env=["LANG"]), timeout=60,
                    **{k: v for k, v in SECTIONED.items() if k != "sandbox"})  # type: ignore[arg-type]
    assert _same(made, flat)


def test_flat_and_sectioned_overrides_give_equal_settings() -> None:
    base = Settings(timeout=30, fork_server=True)
    assert _same(base.with_overrides(**FLAT), base.with_overrides(**SECTIONED))
    assert _same(base.with_overrides(**FLAT), Settings(**FLAT))  # type: ignore[arg-type]
    # a partial section is merged into it: the other fields keep their values
    kept = Settings(memory_mb=1024, network=True).with_overrides(sandbox={"timeout": 5})
    assert (kept.sandbox.timeout, kept.sandbox.memory_mb, kept.sandbox.network) == (5, 1024, True)


def test_the_sectioned_key_wins_in_one_mapping_and_the_later_mapping_wins_across(tmp_path: Path) -> None:
    assert Settings(timeout=10, sandbox={"timeout": 20}).sandbox.timeout == 20  # type: ignore[arg-type]
    base = Settings(sandbox={"timeout": 20})  # type: ignore[arg-type]
    assert base.with_overrides(timeout=30).sandbox.timeout == 30  # the override is the later mapping
    (tmp_path / "a.yaml").write_text("sandbox:\n  timeout: 20\n")
    (tmp_path / "b.yaml").write_text("timeout: 40\n")
    assert load_settings([tmp_path / "a.yaml", tmp_path / "b.yaml"]).sandbox.timeout == 40
    assert load_settings([tmp_path / "b.yaml", tmp_path / "a.yaml"]).sandbox.timeout == 20
    assert load_settings([str(tmp_path / "a.yaml"), "timeout=50"]).sandbox.timeout == 50
    assert load_settings([str(tmp_path / "b.yaml"), "sandbox.timeout=50"]).sandbox.timeout == 50


def test_flat_and_sectioned_config_files_give_equal_settings(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "flat.yaml").write_text(yaml.safe_dump(FLAT))
    (tmp_path / "sectioned.yaml").write_text(yaml.safe_dump(SECTIONED))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.coharden]\ntimeout = 60\nmemory_mb = 2048\npass_env = ["LANG"]\nrunner = "django"\n'
        'pytest_args = ["-x"]\n[tool.coharden.server]\nfork_server = false\ntest_lanes = 1\n'
        '[tool.coharden.environment]\npytest_version = "5.4.3"\nservices = ["httpbin"]\n'
        '[tool.coharden.environment.test_env]\nA = "b"\n')
    flat = load_settings([tmp_path / "flat.yaml"])
    assert _same(flat, load_settings([tmp_path / "sectioned.yaml"]))
    assert _same(flat, load_settings(cwd=tmp_path))  # pyproject.toml, flat and sectioned keys mixed
    assert _same(flat, Settings(**FLAT))  # type: ignore[arg-type]


def test_flat_and_sectioned_dash_c_keys_give_equal_settings() -> None:
    flat = ["timeout=60", "memory_mb=2048", "pass_env=[\"LANG\"]", "fork_server=false", "test_lanes=1",
            "runner=django", "pytest_args=[\"-x\"]", "pytest_version=5.4.3", "services=[\"httpbin\"]",
            "test_env.A=b"]
    sectioned = ["sandbox.timeout=60", "sandbox.memory_mb=2048", "sandbox.pass_env=[\"LANG\"]",
                 "server.fork_server=false", "server.test_lanes=1", "tests.runner=django",
                 "tests.pytest_args=[\"-x\"]", "environment.pytest_version=5.4.3",
                 "environment.services=[\"httpbin\"]", "environment.test_env.A=b"]
    assert _same(load_settings(flat), load_settings(sectioned))
    assert _same(load_settings(flat), Settings(**FLAT))  # type: ignore[arg-type]
    whole = load_settings(['sandbox={"timeout": 60, "memory_mb": 2048}'])  # a section as one JSON value
    assert (whole.sandbox.timeout, whole.sandbox.memory_mb) == (60, 2048)


@pytest.mark.parametrize(("spec", "said"), [
    ("sandbox.timout=60", "no such setting 'timout' (sandbox settings: agent_readable"),
    ("server.nope=1", "no such setting 'nope' (server settings: collect_once"),
    ("tests.timeout=60", "no such setting 'timeout' (tests settings: pytest_args, runner, test_patterns)"),
    ("environment.python.x=1", "no such setting 'python.x' (environment settings:"),
    ("sandbox.timeout.x=1", "no such setting 'timeout.x' (sandbox settings:"),
    ("timout=60", "no such setting 'timout' (known: agent_readable"),
])
def test_an_unknown_key_is_one_error_line(spec: str, said: str) -> None:
    with pytest.raises(CoHardenError) as error:
        load_settings([spec])
    message = str(error.value)
    assert said in message
    assert "\n" not in message


def test_a_sections_unknown_key_in_a_file_or_keywords_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("sandbox:\n  timout: 60\n")
    with pytest.raises(CoHardenError, match=r"sandbox\.timout: Extra inputs are not permitted") as error:
        load_settings([tmp_path / "bad.yaml"])
    assert "\n" not in str(error.value)
    with pytest.raises(CoHardenError, match="invalid setting: sandbox.timeout"):
        Settings().with_overrides(timeout=-1)


def test_an_old_sandbox_string_still_means_test_host(tmp_path: Path) -> None:
    (tmp_path / "old.yaml").write_text("sandbox: docker\ntimeout: 30\n")
    old = load_settings([tmp_path / "old.yaml"])
    assert (old.sandbox.test_host, old.sandbox.timeout, old.sandbox.bwrap) == ("docker", 30, True)
    assert Settings(sandbox="docker").sandbox.test_host == "docker"  # type: ignore[arg-type]
    assert load_settings(["sandbox=docker"]).sandbox.test_host == "docker"
    assert Settings(sandbox="docker", test_host="local").sandbox.test_host == "local"  # type: ignore[arg-type]
    # a mapping is the new section; then a later string still reads as test_host, the section's rest kept
    (tmp_path / "new.yaml").write_text("sandbox:\n  timeout: 30\n  test_host: local\n")
    both = load_settings([tmp_path / "new.yaml", tmp_path / "old.yaml"])
    assert (both.sandbox.test_host, both.sandbox.timeout) == ("docker", 30)
    with pytest.raises(CoHardenError, match="test_host"):
        load_settings(["sandbox=kubernetes"])
