"""Environments derived for a base commit that declares dependencies the environment-setup commit did not, and
the cache keys of specs that do not use the newer spec options."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from tests.conftest import make_patch, make_repo, run_git, write_files

from coharden.config import Settings
from coharden.environment.build import BuildError
from coharden.environment.dependency_probe import declared_requirements, probe_base_commit
from coharden.environment.derived import (
    SpecOrigin,
    dependency_digest,
    dependency_part,
    derive,
    instance_environment,
    relocate_venv,
)
from coharden.environment.interpreters import find_interpreter
from coharden.environment.specbuild import SpecBuilder, SpecEnv
from coharden.environment.specs import EnvSpec, SpecTable
from coharden.execution.executor import InstanceExecutor
from coharden.execution.sandbox import bwrap_path
from coharden.schema.instance import Instance

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_specs_without_the_new_options_keep_their_cache_keys() -> None:
    """Environments already built (an hour of the machine) stay valid: keys computed before exclude_newer,
    constraints, services and system_setup existed (values taken from that code) are unchanged; setting
    exclude_newer or constraints changes the key, a service or a system step does not (they act beside the
    environment)."""
    table = SpecTable.load()
    builder = SpecBuilder(Path("/nonexistent-cache"))
    assert builder.key(table.get("psf/requests", "2.0"), "0" * 40) == "spec-requests-2.0-d589f5c1a3d1"
    xarray = table.get("pydata/xarray", "0.12")
    assert builder.key(xarray.model_copy(update={"constraints": []}), "0" * 40) == "spec-xarray-0.12-25c9fa7e6bb8"
    assert builder.key(xarray, "0" * 40) != "spec-xarray-0.12-25c9fa7e6bb8"  # its constraints change what it has
    spec = table.get("psf/requests", "2.0")
    dated = spec.model_copy(update={"exclude_newer": "2022-06-01"})
    served = spec.model_copy(update={"services": ["httpbin"]})
    host = spec.model_copy(update={"system_setup": ["apt-get install -y tzdata"]})
    assert builder.key(dated, "0" * 40) != builder.key(spec, "0" * 40)
    assert builder.key(served, "0" * 40) == builder.key(spec, "0" * 40)
    assert builder.key(host, "0" * 40) == builder.key(spec, "0" * 40)  # acts on the machine, not the venv
    assert host.system_steps() == ["apt-get install -y tzdata"]


def test_exclude_newer_must_be_a_date() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        EnvSpec(repo="a/b", version="1", python="3.9", test_cmd="pytest", log_parser="pytest",
                exclude_newer="last tuesday")


def test_dependency_digest_follows_only_dependency_files(tmp_path: Path) -> None:
    repo, first = make_repo(tmp_path / "repo", {"setup.py": "X = 1\n", "pkg/a.py": "A = 1\n",
                                                "requirements/test.txt": "pytest\n"})
    spec = EnvSpec(repo="acme/pkg", version="1", python="3.9", test_cmd="pytest", log_parser="pytest")
    write_files(repo, {"pkg/a.py": "A = 2\n"})
    run_git(repo, "commit", "-qam", "code only")
    code_only = run_git(repo, "rev-parse", "HEAD").strip()
    write_files(repo, {"requirements/test.txt": "pytest\nhypothesis\n"})
    run_git(repo, "commit", "-qam", "a test requirement")
    requirement = run_git(repo, "rev-parse", "HEAD").strip()
    assert dependency_digest(repo, first, spec) == dependency_digest(repo, code_only, spec)
    assert dependency_digest(repo, requirement, spec) != dependency_digest(repo, first, spec)


def test_dependency_part_keeps_only_dependency_files(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path / "repo", {"setup.cfg": "[options]\n", "pkg/a.py": "A = 1\n",
                                            "requirements_test.txt": "pytest\n"})
    spec = EnvSpec(repo="acme/pkg", version="1", python="3.9", test_cmd="pytest", log_parser="pytest",
                   requirements_paths=["requirements_test.txt"])
    fix = make_patch(repo, {"setup.cfg": "[options]\ninstall_requires = appdirs\n", "pkg/a.py": "A = 2\n",
                            "requirements_test.txt": "pytest\nappdirs\n"})
    part = dependency_part(fix, spec)
    assert "setup.cfg" in part
    assert "requirements_test.txt" in part
    assert "pkg/a.py" not in part
    assert dependency_part(make_patch(repo, {"pkg/a.py": "A = 3\n"}), spec) == ""
    assert dependency_part("not a patch at all", spec) == ""


def test_relocate_venv_rewrites_scripts_of_the_copy(tmp_path: Path) -> None:
    old, new = tmp_path / "old" / "venv", tmp_path / "new" / "venv"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "tool").write_text(f"#!{old}/bin/python\nimport tool\n")
    (old / "bin" / "activate").write_text(f"echo hi\nVIRTUAL_ENV='{old}'\n")
    (old / "bin" / "python").symlink_to("/usr/bin/python3")
    import shutil

    shutil.copytree(old, new, symlinks=True)
    relocate_venv(new, old)
    assert (new / "bin" / "tool").read_text().startswith(f"#!{new}/bin/python\n")
    assert f"VIRTUAL_ENV='{new}'" in (new / "bin" / "activate").read_text()
    assert (old / "bin" / "tool").read_text().startswith(f"#!{old}/bin/python\n")  # the original is untouched
    assert (new / "bin" / "python").is_symlink()


def _wheel(directory: Path, name: str, body: str, version: str = "1.0") -> Path:
    """A minimal pure-Python wheel of module ``name`` (built by hand: no network, no build backend)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": body,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for rel, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    with zipfile.ZipFile(path, "w") as archive:
        for rel, text in files.items():
            archive.writestr(rel, text)
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def _setup(requires: list[str]) -> str:
    return ("from setuptools import setup\n"
            f"setup(name='widget', version='1.0', packages=['widget'], install_requires={requires!r})\n")


@pytest.mark.slow
def test_base_commit_dependency_gets_a_derived_environment(tmp_path: Path) -> None:
    """The setup commit declares no dependency; a later base commit imports ``helperdep`` and declares it. The
    spec environment (built at the setup commit) lacks it, so the instance gets an environment derived for its
    base commit (the spec's ``constraints`` holding there too), where its golden test verifies; an instance
    whose dependency files did not change shares the spec environment; one whose new dependency cannot be
    installed gets a clear error."""
    try:
        find_interpreter(HERE)
    except BuildError:
        pytest.skip(f"python {HERE} not installed under pyenv or on PATH")
    wheels = tmp_path / "wheels"
    _wheel(wheels, "helperdep", "def offset():\n    return 0\n")
    _wheel(wheels, "helperdep", "def offset():\n    return 1\n", "2.0")  # the spec's constraints exclude it
    _wheel(wheels, "otherdep", "VERSION = 1\n", "1.0")  # a pre-install step's: the spec environment's own
    _wheel(wheels, "otherdep", "VERSION = 2\n", "2.0")
    repo, setup_commit = make_repo(tmp_path / "repos" / "acme__widget", {
        "setup.py": _setup([]),
        "widget/__init__.py": "def double(x):\n    return x + x + 1\n",
        "tests/test_widget.py": "from widget import double\n\ndef test_zero():\n    assert double(0) in (0, 1)\n"})
    write_files(repo, {"setup.py": _setup(["helperdep"]),
                       "widget/__init__.py": "from helperdep import offset\n\n"
                                             "def double(x):\n    return x + x + 1 + offset()\n"})
    run_git(repo, "commit", "-qam", "widget needs helperdep")
    needs = run_git(repo, "rev-parse", "HEAD").strip()
    fix = make_patch(repo, {"widget/__init__.py": "from helperdep import offset\n\n"
                                                  "def double(x):\n    return x + x + offset()\n"})
    test = make_patch(repo, {"tests/test_widget.py": "from widget import double\n\ndef test_zero():\n"
                             "    assert double(0) in (0, 1)\n\ndef test_two():\n    assert double(2) == 4\n"})
    specs = tmp_path / "specs.yaml"
    specs.write_text(f"repos:\n  acme/widget:\n    log_parser: pytest\n"
                     f"    constraints: ['helperdep<2', 'otherdep<2']\n"
                     f"    versions:\n      '1.0':\n        python: '{HERE}'\n        pip_packages: [pytest]\n"
                     f"        pre_install: ['apt-get install -y graphviz', 'python -m pip install --no-index "
                     f"--find-links {wheels} otherdep']\n"
                     f"        install: python -m pip install --no-build-isolation --no-index "
                     f"--find-links {wheels} -e .\n        test_cmd: pytest -rA\n")
    settings = Settings(cache_dir=tmp_path / "cache", swebench_specs=specs, timeout=120)
    instance = Instance(instance_id="acme__widget-2", repo="acme/widget", base_commit=needs, patch=fix,
                        test_patch=test, version="1.0", environment_setup_commit=setup_commit,
                        FAIL_TO_PASS=["tests/test_widget.py::test_two"],
                        PASS_TO_PASS=["tests/test_widget.py::test_zero"])
    env = instance_environment(instance, repo, settings)
    assert env.ok, env.error
    assert env.derived_from.startswith("spec-widget-1.0-")
    spec = SpecTable.load(specs).get("acme/widget", "1.0")
    assert env.key == f"{env.derived_from}-at-{dependency_digest(repo, needs, spec)}"
    assert any("helperdep" in w for w in env.warnings)
    # the spec's system step, skipped, is the derived copy's too (envcheck's hint reads it)
    assert any(w.startswith("skipped system step") and "graphviz" in w for w in env.warnings)
    base_python = Path(settings.cache_dir).resolve() / "envs" / env.derived_from / "venv" / "bin" / "python"
    assert subprocess.run([str(base_python), "-c", "import helperdep"], capture_output=True).returncode != 0
    other = subprocess.run([str(base_python), "-c", "import otherdep; print(otherdep.VERSION)"], capture_output=True,
                           text=True)
    assert other.stdout.strip() == "1", other.stderr  # the constraints held in the spec environment's build
    # the spec's constraints hold in the derived environment's install (the index offers helperdep 2.0 too)
    found = subprocess.run([env.python, "-c", "import helperdep; print(helperdep.offset())"], capture_output=True,
                           text=True)
    assert found.stdout.strip() == "0", found.stderr
    with InstanceExecutor(instance, repo, env.settings(settings)) as executor:
        golden = executor.golden_test()
        assert executor.verdict("", golden).failed
        assert executor.verdict(fix, golden).passed
    again = instance_environment(instance, repo, settings)
    assert again.cached
    assert again.warnings == env.warnings
    assert again.key == env.key

    # the same dependency files: the spec environment itself
    write_files(repo, {"README": "docs only\n"})
    run_git(repo, "add", "README")
    run_git(repo, "commit", "-qm", "docs")
    docs = instance.model_copy(update={"base_commit": run_git(repo, "rev-parse", "HEAD").strip()})
    assert instance_environment(docs, repo, settings).key == env.key  # same dependency files as `needs`
    setup_only = instance.model_copy(update={"base_commit": setup_commit, "patch": ""})
    assert instance_environment(setup_only, repo, settings).key == env.derived_from

    # the fix itself declares the dependency (the harness installs again after applying it): derived with it
    run_git(repo, "checkout", "-q", setup_commit)
    declares = make_patch(repo, {"setup.py": _setup(["helperdep"]), "widget/__init__.py": "import helperdep\n"})
    run_git(repo, "checkout", "-q", "main")
    by_fix = instance_environment(instance.model_copy(update={"base_commit": setup_commit, "patch": declares}),
                                  repo, settings)
    assert by_fix.ok, by_fix.error
    assert by_fix.derived_from == env.derived_from
    assert by_fix.key != env.key
    assert any("the fix changes setup.py" in w for w in by_fix.warnings)
    assert subprocess.run([by_fix.python, "-c", "import helperdep"], capture_output=True).returncode == 0

    # the spec environment's date constraints contradict what a commit declares (pip: "... The user requested
    # (constraint) ...", ResolutionImpossible): the install is retried without them, as the harness installs
    # without constraints (the install step stands in for pip's answer, so the test needs no index)
    origin = SpecEnv.model_validate_json((base_python.parents[2] / "build.json").read_text())
    (origin.env_dir / "date-constraints.txt").write_text("helperdep==0.5\n")
    answer = ("if [ \"${PIP_CONSTRAINT##*/}\" = date-constraints.txt ]; then echo 'ERROR: Cannot install widget "
              "because these package "
              "versions have conflicting dependencies.'; echo '    The user requested (constraint) helperdep==0.5'; "
              "echo 'ERROR: ResolutionImpossible'; exit 1; fi")
    bounded = spec.model_copy(update={"exclude_newer": "2024-01-01", "install": answer})
    unbound = derive(SpecOrigin(SpecBuilder(settings.cache_dir), repo, bounded, origin), setup_commit, "conflict")
    assert unbound.ok, unbound.error
    assert any("date constraints conflict" in w for w in unbound.warnings)
    assert [s.returncode for s in unbound.steps if s.command == answer] == [1, 0]
    assert (unbound.env_dir / "constraints.txt").read_text() == "helperdep<2\notherdep<2\n"  # the spec's own stay
    (origin.env_dir / "date-constraints.txt").unlink()

    # a dependency that cannot be installed: the environment fails with a clear error, and so does the envcheck
    write_files(repo, {"setup.py": _setup(["helperdep", "nosuchdep"]),
                       "widget/__init__.py": "import nosuchdep\n"})
    run_git(repo, "commit", "-qam", "widget needs nosuchdep")
    broken = instance.model_copy(update={"instance_id": "acme__widget-3",
                                         "base_commit": run_git(repo, "rev-parse", "HEAD").strip()})
    failed = instance_environment(broken, repo, settings)
    assert not failed.ok
    assert failed.failed_step == "install"
    assert "derived from" in failed.error
    assert "nosuchdep" in failed.error
    from coharden.study.envcheck import check_instance

    row = check_instance(broken, repo, settings)
    assert row.category == "install"
    assert "nosuchdep" in row.reason
    assert json.loads((Path(settings.cache_dir).resolve() / "envs" / "probes" / env.derived_from
                       / f"{broken.base_commit}.json").read_text())["missing"]


def _extension(value: int) -> str:
    return ("#include <Python.h>\n"
            f"static PyObject *answer(PyObject *self, PyObject *args) {{ return PyLong_FromLong({value}); }}\n"
            "static PyMethodDef methods[] = {{\"answer\", answer, METH_NOARGS, \"\"}, {NULL, NULL, 0, NULL}};\n"
            "static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, \"_speed\", NULL, -1, methods};\n"
            "PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&module); }\n")


@pytest.mark.slow
def test_changed_extension_sources_get_extensions_built_at_the_base_commit(tmp_path: Path) -> None:
    """The spec environment's C extension is built from the setup commit's source. An instance whose base commit
    has another source gets an environment derived there, whose extension is its own (astropy-13236 ran a
    ``_column_mixins`` built from a later ``.pyx``); a base commit that changes only Python code shares the
    spec environment."""
    try:
        find_interpreter(HERE)
    except BuildError:
        pytest.skip(f"python {HERE} not installed under pyenv or on PATH")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    setup_py = ("from setuptools import Extension, setup\n"
                "setup(name='widget', version='1.0', packages=['widget'],\n"
                "      ext_modules=[Extension('widget._speed', ['widget/_speed.c'])])\n")
    repo, base = make_repo(tmp_path / "repos" / "acme__widget", {
        "setup.py": setup_py, "widget/__init__.py": "", "widget/_speed.c": _extension(1)})
    write_files(repo, {"widget/__init__.py": "# later\n"})
    run_git(repo, "commit", "-qam", "python only")
    python_only = run_git(repo, "rev-parse", "HEAD").strip()
    write_files(repo, {"widget/_speed.c": _extension(2)})
    run_git(repo, "commit", "-qam", "the extension changes")
    setup_commit = run_git(repo, "rev-parse", "HEAD").strip()
    test = make_patch(repo, {"tests/test_widget.py": "from widget._speed import answer\n\n"
                                                     "def test_answer():\n    assert answer() == 1\n"})
    specs = tmp_path / "specs.yaml"
    specs.write_text(f"repos:\n  acme/widget:\n    log_parser: pytest\n    versions:\n      '1.0':\n"
                     f"        python: '{HERE}'\n        pip_packages: [pytest, setuptools]\n"
                     f"        install: python -m pip install --no-build-isolation --no-index -e .\n"
                     f"        test_cmd: pytest -rA\n")
    settings = Settings(cache_dir=tmp_path / "cache", swebench_specs=specs, timeout=120)
    instance = Instance(instance_id="acme__widget-1", repo="acme/widget", base_commit=base, patch="",
                        test_patch=test, version="1.0", environment_setup_commit=setup_commit,
                        PASS_TO_PASS=["tests/test_widget.py::test_answer"])
    env = instance_environment(instance, repo, settings)
    assert env.ok, env.error
    assert env.derived_from
    assert env.commit == base
    assert any("compiled extensions' sources differ" in w for w in env.warnings)
    with InstanceExecutor(instance, repo, env.settings(settings)) as executor:
        verdict = executor.verdict("", executor.test_patch(test, name="t", ids=instance.PASS_TO_PASS))
    assert verdict.passed, verdict.reason  # the extension answers 1, as the base commit's source says
    later = instance.model_copy(update={"base_commit": python_only})
    assert instance_environment(later, repo, settings).key == env.key  # the same extension sources as `base`
    at_setup = instance.model_copy(update={"base_commit": setup_commit})
    assert instance_environment(at_setup, repo, settings).key == env.derived_from


@pytest.mark.skipif(bwrap_path() is None, reason="bwrap cannot build a sandbox on this machine")
def test_probe_runs_the_repository_confined(tmp_path: Path) -> None:
    """The probe imports the project and collects its tests: that is the repository's own code, so it runs
    confined like a test. An import that writes outside the probe's checkout, or into the objects it borrows,
    changes nothing; a missing dependency is still found."""
    outside = Path(tempfile.mkdtemp(prefix="coharden-probe-escape-", dir="/var/tmp"))
    try:
        targets = (str(outside / "escaped"), str(tmp_path / "repo" / ".git" / "objects" / "x"))
        attack = (f"import pathlib\n"
                  f"for target in {targets!r}:\n"
                  f"    try:\n        pathlib.Path(target).write_text('owned')\n    except OSError:\n        pass\n")
        repo, commit = make_repo(tmp_path / "repo", {"widget/__init__.py": attack,
                                                     "tests/test_widget.py": "import widget\n\ndef test_a():\n"
                                                                             "    pass\n"})
        spec = EnvSpec(repo="acme/widget", version="1.0", python=HERE, test_cmd="pytest -rA", log_parser="pytest")
        env = SpecEnv(ok=True, key="probe-test", repo="acme/widget", version="1.0", env_dir=tmp_path / "env",
                      python=sys.executable)
        assert probe_base_commit(repo, spec, env, commit, ["tests/test_widget.py"]) == ""
        assert not (outside / "escaped").exists()
        assert not (repo / ".git" / "objects" / "x").exists()

        write_files(repo, {"widget/__init__.py": "import nosuchdep_for_probe\n"})
        run_git(repo, "commit", "-qam", "needs a dependency")
        missing = probe_base_commit(repo, spec, env, run_git(repo, "rev-parse", "HEAD").strip(),
                                    ["tests/test_widget.py"])
        assert "nosuchdep_for_probe" in missing
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def test_declared_requirements_are_read_statically(tmp_path: Path) -> None:
    """setup.cfg's install_requires, pyproject's [project] dependencies and a literal list in setup.py (inline or
    through a module-level name) are read without running anything; what is not a literal is left out."""
    write_files(tmp_path, {
        "setup.cfg": "[options]\ninstall_requires =\n    # a comment\n    attrs>=17\n"
                     "    colorama;sys_platform=='win32'\n",
        "pyproject.toml": "[project]\nname = 'w'\ndependencies = ['tomli>=1', 'attrs>=17']\n",
        "setup.py": "from setuptools import setup\nREQS = ['wcwidth', 'py>=1.5']\nsetup(install_requires=REQS)\n"})
    assert declared_requirements(tmp_path) == ["attrs>=17", "colorama;sys_platform=='win32'", "tomli>=1",
                                               "wcwidth", "py>=1.5"]
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(install_requires=compute())\n")
    (tmp_path / "setup.cfg").write_text("[options\nbroken")
    (tmp_path / "pyproject.toml").write_text("[project\n")
    assert declared_requirements(tmp_path) == []


def test_probe_finds_a_declared_requirement_the_environment_lacks(tmp_path: Path) -> None:
    """A base commit declaring a dependency its import never needs (pytest 5.4's ``wcwidth``, used only when a
    terminal line is measured) or excluding the installed version (pylint's base commits pin an older astroid)
    gets a derived environment: the harness installs the project at the base commit, so pip would install or
    replace it there. A marker that does not apply is skipped."""
    test = {"tests/test_widget.py": "import widget\n\ndef test_a():\n    pass\n"}
    spec = EnvSpec(repo="acme/widget", version="1.0", python=HERE, test_cmd="pytest -rA", log_parser="pytest")
    env = SpecEnv(ok=True, key="probe-test", repo="acme/widget", version="1.0", env_dir=tmp_path / "env",
                  python=sys.executable)
    cases = {"fine": (["pytest>=1", "nosuchdep_declared; python_version < '3'"], ""),
             "missing": (["pytest>=1", "nosuchdep_declared"], "DistributionNotFound"),
             "conflict": (["pytest<1"], "VersionConflict")}
    for name, (requires, expected) in cases.items():
        repo, commit = make_repo(tmp_path / name, {"setup.py": _setup(requires), "widget/__init__.py": "", **test})
        found = probe_base_commit(repo, spec, env, commit, ["tests/test_widget.py"])
        assert expected in found if expected else found == "", (name, found)
