"""SWE-bench specs as data, user overrides, interpreter lookup, and environments built from specs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import make_patch, make_repo
from typer.testing import CliRunner

from coharden.cli.main import app
from coharden.config import Settings
from coharden.environment.build import BuildError
from coharden.environment.interpreters import find_interpreter
from coharden.environment.spec_requirements import requirements_from_env_yml, requirements_from_repo
from coharden.environment.specbuild import (
    BUILD_RECIPE,
    DATE_BOUND_MISSED,
    SpecBuilder,
    SpecEnv,
    reusable,
)
from coharden.environment.specs import EnvSpec, SpecError, SpecTable, repo_slug
from coharden.execution.executor import InstanceExecutor
from coharden.schema.instance import Instance

SHARED = Path(os.environ.get("COHARDEN_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
VERIFIED = SHARED / "swebench_verified.jsonl"
REPOS = ["astropy/astropy", "django/django", "matplotlib/matplotlib", "mwaskom/seaborn", "pallets/flask",
         "psf/requests", "pydata/xarray", "pylint-dev/pylint", "pytest-dev/pytest", "scikit-learn/scikit-learn",
         "sphinx-doc/sphinx", "sympy/sympy"]


def test_all_twelve_verified_repositories_have_specs() -> None:
    table = SpecTable.load()
    assert set(REPOS) <= set(table.repos())
    sympy = table.get("sympy/sympy", "1.1")
    assert (sympy.python, sympy.runner, sympy.log_parser) == ("3.9", "sympy", "sympy")
    assert "mpmath==1.3.0" in sympy.pip_packages
    django = table.get("django/django", "3.0")
    assert django.runner == "django"
    assert django.env["LANG"] == "en_US.UTF-8"
    assert any("locale-gen" in step for step in django.system_steps())  # cannot run without root
    astropy = table.get("astropy/astropy", "4.3")
    assert astropy.python == "3.9"
    assert "numpy==1.25.2" in astropy.pip_packages
    assert table.get("astropy/astropy", "3.1").pip_packages.count("setuptools==59.8.0") == 1
    assert table.get("pytest-dev/pytest", "5.4").runner == "pytest"
    assert table.get("sphinx-doc/sphinx", "8.0").python == "3.10"
    assert table.get("pydata/xarray", "0.12").packages == "environment.yml"


@pytest.mark.skipif(not VERIFIED.is_file(), reason="shared SWE-bench data not present")
def test_every_verified_record_has_a_spec() -> None:
    table = SpecTable.load()
    records = [json.loads(line) for line in VERIFIED.read_text().splitlines() if line.strip()]
    for record in records:
        table.get(record["repo"], record["version"])  # raises on a gap


def test_unknown_repository_or_version_lists_the_known_ones() -> None:
    table = SpecTable.load()
    with pytest.raises(SpecError, match="known: .*sympy/sympy"):
        table.get("nobody/nothing", "1.0")
    with pytest.raises(SpecError, match=r"version '9\.9' \(known: .*1\.1"):
        table.get("sympy/sympy", "9.9")


def test_user_file_overrides_single_fields(tmp_path: Path) -> None:
    override = tmp_path / "specs.yaml"
    override.write_text("repos:\n  sympy/sympy:\n    versions:\n      '1.1': {python: '3.11'}\n"
                        "  my/own:\n    log_parser: pytest\n    versions:\n      '0.1': {python: '3.12', "
                        "test_cmd: 'pytest -rA'}\n")
    table = SpecTable.load(override)
    spec = table.get("sympy/sympy", "1.1")
    assert spec.python == "3.11"
    assert "mpmath==1.3.0" in spec.pip_packages
    assert table.get("my/own", "0.1").runner == "pytest"
    assert SpecTable.load().get("sympy/sympy", "1.1").python == "3.9"  # the packaged data is not changed


def test_bad_override_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        SpecTable.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(SpecError, match="'repos' mapping"):
        SpecTable.load(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("repos:\n  sympy/sympy:\n    versions:\n      '1.1': {pip_packages: 3}\n")
    with pytest.raises(SpecError, match="pip_packages"):
        SpecTable.load(wrong).get("sympy/sympy", "1.1")


def test_repo_slug_accepts_record_and_directory_forms() -> None:
    assert repo_slug("sympy/sympy") == "sympy/sympy"
    assert repo_slug("/work/repos/pytest-dev__pytest") == "pytest-dev/pytest"
    assert repo_slug("psf__requests") == "psf/requests"


def test_cli_env_spec_prints_one_and_lists_versions() -> None:
    runner = CliRunner()
    shown = runner.invoke(app, ["env", "spec", "psf/requests", "--version", "2.0", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert data["python"] == "3.9"
    assert data["runner"] == "pytest"
    assert data["log_parser"] == "pytest_options"
    listed = runner.invoke(app, ["env", "spec", "psf/requests"])
    assert listed.exit_code == 0
    assert "2.27" in listed.output
    unknown = runner.invoke(app, ["env", "spec", "psf/requests", "--version", "99"])
    assert unknown.exit_code == 2
    assert "known:" in unknown.output


def test_cli_env_system_lists_the_skipped_steps_and_runs_them(tmp_path: Path) -> None:
    """The steps spec builds skip (they need root and the package manager) are listed per repository, once each,
    and run with --run; a failing one fails the command with its exit code."""
    runner = CliRunner()
    listed = runner.invoke(app, ["env", "system", "sphinx-doc/sphinx", "sympy/sympy"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines() == ["apt-get update && apt-get install -y graphviz"]
    assert runner.invoke(app, ["env", "system", "sphinx-doc/sphinx", "--version", "3.0"]).output == ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("running system steps needs root and apt-get")
    marker = tmp_path / "ran"
    specs = tmp_path / "specs.yaml"
    specs.write_text("repos:\n  acme/widget:\n    log_parser: pytest\n    versions:\n      '1.0':\n"
                     "        python: '3.11'\n        test_cmd: pytest -rA\n        pre_install:\n"
                     f"          - apt-get --version > /dev/null && touch {marker}\n"
                     "          - pip install -e .\n"
                     "      '2.0':\n        python: '3.11'\n        test_cmd: pytest -rA\n        pre_install:\n"
                     "          - apt-get --no-such-option\n")
    ran = runner.invoke(app, ["env", "system", "acme/widget", "--version", "1.0", "--specs", str(specs), "--run"])
    assert ran.exit_code == 0, ran.output
    assert marker.exists()  # the system step ran; the local one (pip) is the build's, not listed here
    failed = runner.invoke(app, ["env", "system", "acme/widget", "--version", "2.0", "--specs", str(specs), "--run"])
    assert failed.exit_code != 0
    assert "system step failed" in failed.output


def test_find_interpreter_prefers_newest_patch_and_names_what_is_installed(tmp_path: Path) -> None:
    for version in ("3.9.1", "3.9.18", "3.10.2"):
        (tmp_path / "versions" / version / "bin").mkdir(parents=True)
        (tmp_path / "versions" / version / "bin" / "python").write_text("")
    assert find_interpreter("3.9", tmp_path).endswith("3.9.18/bin/python")
    installed = r"installed there: 3\.9\.1, 3\.9\.18, 3\.10\.2"
    with pytest.raises(BuildError, match=r"python 2\.1 is not installed .*" + installed):
        find_interpreter("2.1", tmp_path)


def _spec(**fields: object) -> EnvSpec:
    base = {"repo": "acme/widget", "version": "1.0", "python": "3.11", "test_cmd": "pytest -rA",
            "log_parser": "pytest"}
    return EnvSpec.model_validate({**base, **fields})


def test_requirements_are_read_like_the_harness(tmp_path: Path) -> None:
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "base.txt").write_text("attrs\n# comment\n")
    (tmp_path / "reqs" / "dev.txt").write_text("-r base.txt\n-e .\npytest>=7\ntypes-pkg_resources==0.1\n.[test]\n")
    spec = _spec(packages="requirements.txt", requirements_paths=["missing.txt", "reqs/dev.txt"])
    text = requirements_from_repo(tmp_path, spec, [("types-pkg_resources", "types-setuptools")])
    assert text.split() == ["attrs", "pytest>=7", "types-setuptools"]
    with pytest.raises(BuildError, match="no requirements file"):
        requirements_from_repo(tmp_path, _spec(packages="requirements.txt", requirements_paths=["x.txt"]), [])


def test_conda_environment_file_becomes_pip_requirements(tmp_path: Path) -> None:
    (tmp_path / "environment.yml").write_text(
        "name: x\nchannels: [conda-forge]\ndependencies:\n  - python=3.10\n  - numpy=1.23\n  - pip\n"
        "  - iris\n  - scipy>=1.5\n  - pip:\n      - pytest-env\n")
    found = requirements_from_env_yml(tmp_path, _spec(environment_yml_paths=["environment.yml"]))
    assert found == ["numpy==1.23", "scipy>=1.5", "pytest-env"]


def test_env_vars_come_from_eval_commands_and_the_test_command() -> None:
    spec = _spec(eval_commands=["export LANG=C.UTF-8", "sed -i x /etc/locale.gen"],
                 test_cmd="PYTHONWARNINGS='ignore::UserWarning' bin/test -C")
    assert spec.env == {"LANG": "C.UTF-8", "PYTHONWARNINGS": "ignore::UserWarning"}
    assert spec.runner == "sympy"
    assert spec.system_steps() == ["sed -i x /etc/locale.gen"]


def test_missing_interpreter_fails_the_build_with_a_clear_error(tmp_path: Path) -> None:
    repo, commit = make_repo(tmp_path / "repo", {"widget/__init__.py": "X = 1\n"})
    built = SpecBuilder(tmp_path / "cache", pyenv_root=tmp_path / "nopyenv").build(repo, _spec(python="3.1"), commit)
    assert not built.ok
    assert built.failed_step == "interpreter"
    assert "python 3.1 is not installed" in built.error
    again = SpecBuilder(tmp_path / "cache", pyenv_root=tmp_path / "nopyenv").build(repo, _spec(python="3.1"), commit)
    assert again.cached
    assert not again.ok
    # a failure recorded by an older build recipe is not reused: the newer steps get their chance
    record = again.env_dir / "build.json"
    record.write_text(again.model_copy(update={"recipe": BUILD_RECIPE - 1, "error": "old"}).model_dump_json())
    retried = SpecBuilder(tmp_path / "cache", pyenv_root=tmp_path / "nopyenv").build(repo, _spec(python="3.1"), commit)
    assert not retried.cached
    assert "python 3.1 is not installed" in retried.error



def test_a_build_that_missed_the_date_bound_is_rebuilt_by_a_newer_recipe(tmp_path: Path) -> None:
    """A working environment is reused whatever recipe built it, except one an older recipe built without the
    spec's date bound (its packages are not the harness's: sphinx 3.x got a docutils without ``roman``); a copy
    derived from an environment that was rebuilt since is stale too."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    record = tmp_path / "build.json"
    env = SpecEnv(ok=True, key="k", repo="r", version="1", env_dir=tmp_path, python=str(python),
                  recipe=BUILD_RECIPE - 1)
    record.write_text(env.model_dump_json())
    assert reusable(record) is not None
    missed = env.model_copy(update={"warnings": [f"{DATE_BOUND_MISSED} (uv pip compile failed): conflict"]})
    record.write_text(missed.model_dump_json())
    assert reusable(record) is None
    record.write_text(missed.model_copy(update={"recipe": BUILD_RECIPE}).model_dump_json())  # the current recipe's
    assert reusable(record) is not None
    origin = tmp_path / "origin.json"
    origin.write_text("{}")
    os.utime(origin, (record.stat().st_mtime + 10, record.stat().st_mtime + 10))
    assert reusable(record, newer_than=origin) is None
    assert reusable(record, newer_than=tmp_path / "absent.json") is not None


WIDGET = {
    "setup.py": "from setuptools import setup\nsetup(name='widget', version='1.0', packages=['widget'])\n",
    "widget/__init__.py": "from widget._gen import GENERATED\n\ndef double(x):\n    return x + x + 1\n",
    "tests/test_widget.py": "from widget import double, GENERATED\n\ndef test_gen():\n    assert GENERATED == 7\n",
    ".gitignore": "widget/_gen.py\n",
}
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.mark.slow
def test_spec_environment_runs_the_jobs_checkout_with_the_built_overlay(tmp_path: Path) -> None:
    """The install generates an ignored module (as a C-extension build would): it reaches every job's checkout
    through the overlay; the code that runs is the job's checkout (the fix applies), not the build's copy."""
    try:
        find_interpreter(HERE)
    except BuildError:
        pytest.skip(f"python {HERE} not installed under pyenv or on PATH")
    repo, commit = make_repo(tmp_path / "repo", WIDGET)
    fix = make_patch(repo, {"widget/__init__.py": WIDGET["widget/__init__.py"].replace(" + 1", "")})
    test = make_patch(repo, {"tests/test_widget.py": WIDGET["tests/test_widget.py"]
                             + "\ndef test_double():\n    assert double(2) == 4\n"})
    spec = _spec(python=HERE, pip_packages=["pytest"],
                 install="python -m pip install --no-build-isolation --no-deps -e . && "
                         "python -c \"open('widget/_gen.py', 'w').write('GENERATED = 7\\n')\"")
    settings = Settings(cache_dir=tmp_path / "cache", timeout=120)
    built = SpecBuilder(settings.cache_dir).build(repo, spec, commit)
    assert built.ok, built.error
    assert built.overlay is not None
    assert (built.overlay / "widget" / "_gen.py").is_file()
    # the build's checkout is not importable from elsewhere: the editable hook is gone
    probe = subprocess.run([built.python, "-c", "import widget"], cwd=tmp_path, capture_output=True, text=True)
    assert probe.returncode != 0
    assert SpecBuilder(settings.cache_dir).build(repo, spec, commit).cached
    instance = Instance(instance_id="acme__widget-1", repo=str(repo), base_commit=commit, patch=fix,
                        test_patch=test, FAIL_TO_PASS=["tests/test_widget.py::test_double"])
    with InstanceExecutor(instance, repo, built.settings(settings)) as executor:
        golden = executor.golden_test()
        buggy, fixed = executor.verdict("", golden), executor.verdict(fix, golden)
        gen = executor.verdict(fix, executor.test_patch(test, ids=["tests/test_widget.py::test_gen"]))
    assert buggy.failed
    assert "assert 5 == 4" in buggy.reason
    assert fixed.passed
    assert gen.passed


def test_spec_environment_is_used_only_for_swebench_records_without_a_chosen_python(tmp_path: Path) -> None:
    from coharden.environment.derived import auto_spec_settings

    repo, commit = make_repo(tmp_path / "repo", {"a.py": "X = 1\n"})
    record = Instance(instance_id="sympy__sympy-1", repo="sympy/sympy", base_commit=commit, version="1.1",
                      environment_setup_commit=commit)
    settings = Settings(cache_dir=tmp_path / "cache")
    chosen = settings.with_overrides(python="/usr/bin/python3")
    assert auto_spec_settings(record, repo, chosen) is chosen  # --python wins
    local = record.model_copy(update={"version": None})
    assert auto_spec_settings(local, repo, settings) is settings  # not a SWE-bench record
    other = record.model_copy(update={"repo": "acme/unknown"})
    assert auto_spec_settings(other, repo, settings) is settings  # a repository no spec describes


def test_env_build_instance_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    no_records = runner.invoke(app, ["env", "build", "--instance", "x-1"])
    assert no_records.exit_code == 2
    assert "--records" in no_records.output
    records = tmp_path / "r.jsonl"
    records.write_text(json.dumps({"instance_id": "a-1", "repo": "acme/x", "base_commit": "HEAD"}) + "\n")
    missing = runner.invoke(app, ["env", "build", "--instance", "b-2", "--records", str(records)])
    assert missing.exit_code == 2
    assert "b-2" in missing.output
    neither = runner.invoke(app, ["env", "build"])
    assert neither.exit_code == 2
    assert "--instance" in neither.output


@pytest.mark.slow
def test_a_pin_that_does_not_resolve_names_the_step_and_the_log_tail(tmp_path: Path) -> None:
    try:
        find_interpreter(HERE)
    except BuildError:
        pytest.skip(f"python {HERE} not installed")
    repo, commit = make_repo(tmp_path / "repo", {"widget/__init__.py": "X = 1\n"})
    spec = _spec(python=HERE, pip_packages=["coharden-no-such-package-xyz==0.0.1"])
    built = SpecBuilder(tmp_path / "cache").build(repo, spec, commit)
    assert not built.ok
    assert built.failed_step == "pins"
    assert "coharden-no-such-package-xyz" in built.error
    assert (built.env_dir / "build.log").is_file()


def test_a_runaway_build_step_is_stopped_by_the_process_limit(tmp_path: Path) -> None:
    """A build step runs the repository's own setup code with the network on: it gets no sandbox, but a process
    limit, so a setup.py that re-runs itself without end fails its step instead of filling the machine."""
    from coharden.execution.confinement import BUILD_STEPS
    from coharden.execution.pidslimit import PidsCgroup

    probe = PidsCgroup.create(BUILD_STEPS.max_processes or 0)
    if probe is None and os.geteuid() == 0:
        pytest.skip("no pids cgroup can be made here, and RLIMIT_NPROC does not bind root")
    if probe is not None:
        probe.close()
    script = tmp_path / "bomb.py"
    script.write_text(
        "import os, sys, time\n"
        "started = 0\n"
        "for _ in range(2000):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    started += 1\n"
        "print('STARTED', started)\n"
        "sys.exit(0 if started < 2000 else 3)\n")
    result = SpecEnv(ok=False, key="k", repo="r", version="v", env_dir=tmp_path)
    log = (tmp_path / "build.log").open("w")
    run = SpecBuilder(tmp_path / "cache").step_runner(result, tmp_path, dict(os.environ), log)
    assert run("install", f"{sys.executable} {script}")
    started = int(result.steps[-1].output_tail.split("STARTED ", 1)[1].split()[0])
    assert started < BUILD_STEPS.max_processes  # type: ignore[operator]
    log.close()


def test_a_spec_environment_forks_the_runs_of_a_runner_that_forks(tmp_path: Path) -> None:
    """sympy's bin/test runs as a fork of a warm server in its spec environment, as pytest runs do; Django's
    runtests.py and interpreters older than the fork server's 3.7 get a fresh process per run."""
    from coharden.environment.specbuild import SpecEnv

    def env(runner: str, python_version: str = "3.9.18") -> SpecEnv:
        return SpecEnv(ok=True, key="k", repo="r/r", version="1", env_dir=tmp_path, python="/x/python",
                       python_version=python_version, runner=runner)

    base = Settings()
    assert env("sympy").settings(base).server.fork_server
    assert env("pytest").settings(base).server.fork_server
    assert not env("django").settings(base).server.fork_server
    assert not env("sympy", "3.6.15").settings(base).server.fork_server
    assert not env("sympy").settings(base.with_overrides(fork_server=False)).server.fork_server


def test_every_packaged_system_step_is_valid_bash() -> None:
    """`env system` prints steps a user pastes or runs with --run: each must parse (SWE-bench's matplotlib specs
    publish `upgrade && && apt-get`), while the stored spec stays as published."""
    import subprocess

    table = SpecTable.load()
    steps = {step for repo in table.repos() for version in table.versions(repo_slug(repo))
             for step in table.get(repo_slug(repo), version).system_steps()}
    assert steps
    bad = [s for s in steps if subprocess.run(["bash", "-n", "-c", s], capture_output=True).returncode != 0]
    assert bad == []
    assert _spec(pre_install=["apt-get -y update && apt-get -y upgrade && && apt-get install -y ffmpeg"]
                 ).system_steps() == ["apt-get -y update && apt-get -y upgrade && apt-get install -y ffmpeg"]
