"""Every option that two or more commands share, defined once, with its validation.

Groups (each a dataclass a command declares as one parameter, spelled out by :func:`option_group`): the run
options (repos, config, timeout, python, store; in :mod:`coharden.cli.common`), the LLM group (model, endpoint,
record/replay store and mode, cost caps, sampling: :class:`LLMOptions`, and :func:`llm_client` built from it),
the MPE group (operators, mutants per
operator, seed, tau, the estimate, mutator, LLM samples: :class:`MPEOptions`) and the engine group (executor,
address: :class:`EngineOptions`). What a user sets rarely is a setting of the config file instead
(``-c KEY=VALUE``, ``[tool.coharden]``). A command takes the aliases it needs; where a flag means
something narrower in one command (``--workers`` in ``run`` counts instances), the command passes its own help
to the same factory, so the validation stays the one defined here. Numeric flags are range-checked at the
command line: a bad value is one line (``Error: Invalid value for '--tau': 1.5 is out of range (allowed: 0 to
1)``) before anything runs.

:meth:`MPEOptions.config` is the one place where the MPE group becomes an :class:`MPEConfig`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, overload

import typer

from coharden.errors import CoHardenError, validation_message
from coharden.schema.mpe_config import LOOP_TAU, PAPER_TAU

if TYPE_CHECKING:
    from coharden.config import Settings
    from coharden.execution.engine import Engine
    from coharden.llm import Ledger, LLMClient, LLMConfig
    from coharden.schema.mpe_config import MPEConfig
    from coharden.schema.mutant import Operator

F = TypeVar("F", bound=Callable[..., Any])

#: the two laxity cutoffs as the help texts name them
MPE_TAU_HELP = f"{PAPER_TAU}, the paper's MPE cutoff"
LOOP_TAU_HELP = f"{LOOP_TAU}, the CoHarden loop's threshold"


# --- range checks ---------------------------------------------------------------------------------------------

def _allowed(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool = False) -> str:
    if lo is not None and hi is not None:
        if not (lo_open or hi_open):
            return f"{lo} to {hi}"
        return f"{'more than' if lo_open else 'at least'} {lo}, {'less than' if hi_open else 'at most'} {hi}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    return f"<= {hi}"


def in_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
             hi_open: bool = False) -> Callable[[Any], Any]:
    """A typer callback refusing a number outside [lo, hi] (``lo_open`` / ``hi_open``: lo / hi itself is refused
    too), and any float that is not finite (``nan`` compares false with every bound, so it would pass them all)."""

    def check(value: Any) -> Any:
        if value is None:
            return value
        for v in value if isinstance(value, list | tuple) else [value]:
            if isinstance(v, float) and not math.isfinite(v):
                raise typer.BadParameter(f"{v} is not a finite number (allowed: {_allowed(lo, hi, lo_open, hi_open)})")
            low = lo is not None and (v <= lo if lo_open else v < lo)
            high = hi is not None and (v >= hi if hi_open else v > hi)
            if low or high:
                raise typer.BadParameter(f"{v} is out of range (allowed: {_allowed(lo, hi, lo_open, hi_open)})")
        return value

    return check


def ranged(*decls: str, help: str, lo: float | None = None, hi: float | None = None,  # noqa: A002
           lo_open: bool = False, hi_open: bool = False, **kwargs: Any) -> Any:
    """``typer.Option(*decls)`` whose value must lie in [lo, hi]; the allowed range is appended to the help.
    ``default=`` is for the non-Annotated style (``x: int = ranged(...)``)."""
    head = (kwargs.pop("default"),) if "default" in kwargs else ()
    return typer.Option(*head, *decls, help=f"{help} [{_allowed(lo, hi, lo_open, hi_open)}]",
                        callback=in_range(lo, hi, lo_open=lo_open, hi_open=hi_open), **kwargs)


# --- output paths -----------------------------------------------------------------------------------------------

def unwritable(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` (a directory to fill, or a file to write) cannot be written, or None. Checked by creating
    (and removing) a file in the directory, or in its nearest existing ancestor when it does not exist yet
    (a file's directory too: SQLite writes its journal beside it): permissions, a read-only file system and a
    file in the way all show, for root too; nothing is left behind."""
    if not directory and path.is_dir():
        return f"{path} is a directory"
    if not directory and path.exists():
        try:
            with path.open("a"):
                pass
        except OSError as exc:
            return f"{path} is not writable ({exc.strerror or exc})"
    existing = path if directory else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".coharden-write-check-", dir=existing)
    except OSError as exc:
        return f"cannot write in {existing} ({exc.strerror or exc})"
    os.close(fd)
    Path(probe).unlink()
    return None


def writable(flag: str, *, directory: bool = True) -> Callable[[Any], Any]:
    """A typer callback: the output path of ``flag`` must be writable, checked before any work starts (an
    ``eval`` that graded everything and then could not write its report lost the work)."""

    def check(value: Any) -> Any:
        if value is not None and (why := unwritable(Path(value), directory=directory)):
            raise typer.BadParameter(why, param_hint=f"'{flag}'")
        return value

    return check


def output_option(*, help: str, directory: bool = True, flag: str = "--output", short: str | None = "-o"  # noqa: A002
                  ) -> Any:
    """``--output/-o``: a directory (or ``directory=False``: a file) checked for writability when parsed."""
    return typer.Option(flag, *([short] if short else []), help=help,
                        callback=writable(flag, directory=directory))


# --- common ---------------------------------------------------------------------------------------------------

ConfigOpt = Annotated[list[str] | None, typer.Option(
    "--config", "-c", metavar="FILE|KEY=VALUE", help="A YAML or TOML settings file, or KEY=VALUE setting one "
    "setting (timeout=60, mpe.trust_tests=true, mpe.timeout_floor=5); repeatable, applied in order over "
    "[tool.coharden] of pyproject.toml (which a FILE replaces).")]
ReposOpt = Annotated[Path | None, typer.Option("--repos", help="Directory holding owner__name repositories.")]
IdOpt = Annotated[str | None, typer.Option("--id", help="Instance id, when the records file has several.")]
IdsOpt = Annotated[list[str] | None, typer.Option("--id", help="Only these instance ids (repeatable).")]
PythonOpt = Annotated[str | None, typer.Option("--python", help="Interpreter that runs the tests.")]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="SQLite result store (caches runs).",
                                               callback=writable("--store", directory=False))]
WeakSandboxOpt = Annotated[bool, typer.Option(
    "--allow-weak-sandbox", help="Grade untrusted tests even where the full sandbox cannot be made here (no bwrap "
    "or namespaces, no pids cgroup); the weaker confinement is recorded on every verdict. Without it such a run "
    "is refused.")]
PassEnvOpt = Annotated[list[str] | None, typer.Option(
    "--pass-env", metavar="NAME", help="Pass the host's variable NAME to test processes (repeatable). They get "
    "only PATH, locale, time zone and user names otherwise: never a key or token of yours.")]
AgentReadableOpt = Annotated[list[Path] | None, typer.Option(
    "--agent-readable", metavar="PATH", help="A host path the external agent's command may read in its sandbox "
    "(its installation, its settings); repeatable. It sees the workspace and the system directories otherwise.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


#: The longest ``--timeout``: a week (a limit must fit the CPU-time rlimit and the clock's arithmetic).
MAX_TIMEOUT = 7 * 24 * 3600


def timeout_option(help: str = "Seconds per test process.") -> Any:  # noqa: A002
    return ranged("--timeout", help=help, lo=0, lo_open=True, hi=MAX_TIMEOUT)


TimeoutOpt = Annotated[float | None, timeout_option()]

# --- the LLM group --------------------------------------------------------------------------------------------

def model_option(help: str = "litellm model name (default $COHARDEN_LLM_MODEL).") -> Any:  # noqa: A002
    return typer.Option("--model", "-m", help=help)


ModelOpt = Annotated[str | None, model_option()]
ApiBaseOpt = Annotated[str | None, typer.Option("--api-base", help="Model endpoint URL (default "
                                                "$COHARDEN_LLM_API_BASE).")]
LLMStoreOpt = Annotated[Path | None, typer.Option("--llm-store", help="LLM call record/replay store (default: "
                                                  "llm-calls.sqlite next to --store).")]
LLMModeOpt = Annotated[str, typer.Option("--llm-mode", help="auto (replay stored calls, record new ones), record "
                                         "(always call, overwrite), replay (offline, fail on a miss).")]
BudgetOpt = Annotated[float | None, ranged("--budget-usd", help="LLM cost cap for the whole run (USD).", lo=0)]
InstanceBudgetOpt = Annotated[float | None, ranged("--instance-budget-usd", help="LLM cost cap per instance (USD).",
                                                   lo=0)]
TemperatureOpt = Annotated[float | None, ranged("--temperature", help="LLM sampling temperature.", lo=0)]
MaxTokensOpt = Annotated[int | None, ranged("--max-tokens", help="LLM completion token limit (a reply reaching it "
                                            "is rejected as truncated).", lo=1)]
StepLimitOpt = Annotated[int, ranged("--step-limit", help="Model calls per agent run (0: no limit).", lo=0)]


@dataclass(frozen=True)
class LLMOptions:
    """The model options of a command that may call a model: --model, --api-base, --llm-store, --llm-mode and,
    where the command takes them, --budget-usd, --instance-budget-usd, --temperature, --max-tokens (declared as
    one parameter with :func:`llm_options`)."""

    model: str | None = None
    api_base: str | None = None
    llm_store: Path | None = None
    llm_mode: str = "auto"
    budget_usd: float | None = None
    instance_budget_usd: float | None = None
    temperature: float | None = None
    max_tokens: int | None = None

    @property
    def configured(self) -> bool:
        """A model is named (by --model or ``$COHARDEN_LLM_MODEL``)."""
        return bool(self.model or os.environ.get("COHARDEN_LLM_MODEL"))

    @overload
    def client(self, default_store: Path, *, required: Literal[True], what: str = ...,
               ledger: Ledger | None = ..., model: str | None = ...) -> LLMClient: ...

    @overload
    def client(self, default_store: Path, *, required: bool = ..., what: str = ...,
               ledger: Ledger | None = ..., model: str | None = ...) -> LLMClient | None: ...

    def client(self, default_store: Path, *, required: bool = False, what: str = "this command",
               ledger: Ledger | None = None, model: str | None = None) -> LLMClient | None:
        """A client from these flags and ``COHARDEN_LLM_*`` (``model`` instead of --model where a command has
        a second one); None when no model is named (and none is required)."""
        if not (model or self.configured) and not required:
            return None
        return llm_client(model=model or self.model, api_base=self.api_base, llm_store=self.llm_store,
                          llm_mode=self.llm_mode, default_store=default_store, budget_usd=self.budget_usd,
                          instance_budget_usd=self.instance_budget_usd, ledger=ledger, what=what,
                          temperature=self.temperature, max_tokens=self.max_tokens)


def llm_options(model: Any, param: str = "llm_options", *, budget: bool = True, instance_budget: bool = False,
                sampling: bool = False) -> Callable[[F], F]:
    """``command`` declares ``<param>: LLMOptions = LLMOptions()`` and gets the model options in that place;
    ``model`` is the command's ``--model`` alias (its help says what the model is for); ``budget``: the run's
    cost cap, ``instance_budget``: a cap per instance, ``sampling``: --temperature and --max-tokens."""
    aliases: dict[str, Any] = {"model": model, "api_base": ApiBaseOpt}
    if sampling:
        aliases |= {"max_tokens": MaxTokensOpt, "temperature": TemperatureOpt}
    aliases |= {"llm_store": LLMStoreOpt, "llm_mode": LLMModeOpt}
    if budget:
        aliases["budget_usd"] = BudgetOpt
    if instance_budget:
        aliases["instance_budget_usd"] = InstanceBudgetOpt
    return option_group(LLMOptions, aliases, param)


def llm_client(*, model: str | None, api_base: str | None, llm_store: Path | None, llm_mode: str,
               default_store: Path, budget_usd: float | None = None, instance_budget_usd: float | None = None,
               ledger: Ledger | None = None, what: str = "this command", llm_config: LLMConfig | None = None,
               **config: Any) -> LLMClient:
    """An LLM client from the LLM option group and ``$COHARDEN_LLM_*``: record/replay store (default next to
    the result store), mode, and cost caps; ``config`` sets more :class:`LLMConfig` fields (temperature,
    max_tokens, ...), or ``llm_config`` gives the whole configuration. A missing model or a bad mode is a
    clear error."""
    from pydantic import ValidationError

    from coharden.llm import Budget, CacheMode, CallStore, LLMClient, LLMConfig

    try:
        mode = CacheMode(llm_mode)
    except ValueError as exc:
        raise CoHardenError(f"--llm-mode: {llm_mode!r} (known: auto, record, replay)") from exc
    try:
        if llm_config is None:
            llm_config = LLMConfig.from_env(model=model, api_base=api_base,
                                            **{k: v for k, v in config.items() if v is not None})
    except ValidationError as exc:
        if any(e["loc"] == ("model",) for e in exc.errors()):
            raise CoHardenError(f"{what} needs --model (or $COHARDEN_LLM_MODEL)") from exc
        raise CoHardenError(f"LLM configuration: {validation_message(exc)}") from exc
    budget = None
    if budget_usd is not None or instance_budget_usd is not None:
        budget = Budget(per_run_usd=budget_usd, per_instance_usd=instance_budget_usd)
    return LLMClient(llm_config, store=CallStore(llm_store or default_store.with_name("llm-calls.sqlite")), mode=mode,
                     budget=budget, ledger=ledger)


# --- the MPE group --------------------------------------------------------------------------------------------


def _operator_help() -> str:
    # the built-in names come from the schema; importing the registry itself would load every operator module
    # (libcst), and reading the installed ones' entry points takes a while, on each start of the CLI
    from coharden.schema.mutant import MECHANICAL_DEFAULT

    return (f"Comma-separated mutant operators (default: every built-in mechanical one): "
            f"{', '.join(op.value for op in MECHANICAL_DEFAULT)}; an installed package's operators (entry-point "
            "group coharden.operators) by name; vanilla too for --mutator llm.")


OperatorsOpt = Annotated[str | None, typer.Option("--operators", help=_operator_help())]
PerOperatorOpt = Annotated[int | None, ranged("--per-operator", help="A fixed budget: N mutants per operator, "
                                              "a seeded sample, all run (default with --paper-classes: 3, the "
                                              "paper's N; without: sequential MPE).", lo=1)]
ConfidenceOpt = Annotated[float, ranged("--confidence", help="Confidence level of the laxity's interval (exact "
                                       "Clopper-Pearson).", lo=0.5, hi=1, lo_open=True, hi_open=True)]
MaxMutantsOpt = Annotated[int | None, ranged("--max-mutants", help="Sequential MPE: the most mutants run per "
                                             "test (default 40; at least one per operator).", lo=1)]


def seed_option(help: str = "Seed of every sampler (mutant sample, shown mutants).") -> Any:  # noqa: A002
    return ranged("--seed", help=help, lo=0)


SeedOpt = Annotated[int | None, seed_option()]


def tau_option(help: str = f"Laxity cutoff between Rigorous and Lax (default {MPE_TAU_HELP}).") -> Any:  # noqa: A002
    return ranged("--tau", help=help, lo=0, hi=1)


TauOpt = Annotated[float | None, tau_option()]


def workers_option(help: str = "Parallel workers (default: the CPU count).") -> Any:  # noqa: A002
    return ranged("--workers", "-w", help=help, lo=1)


WorkersOpt = Annotated[int | None, workers_option()]
PreferExercisedOpt = Annotated[bool, typer.Option("--prefer-exercised", help="With --per-operator: sample first "
                                                  "among mutants that change code the tests run.")]
NoImpliedOpt = Annotated[bool, typer.Option("--no-implied", help="Make every run, also those whose outcome is "
                                            "implied (a test that never enters the functions a mutant changes): "
                                            "the check mode; results must be equal.")]
PaperClassesOpt = Annotated[bool, typer.Option("--paper-classes", help="The paper's rule exactly: N mutants per "
                                                "operator, no early stop, the point laxity against tau, every "
                                                "non-F->P test Misaligned.")]
CutoffsOpt = Annotated[str | None, typer.Option("--cutoffs", help="Comma-separated cutoffs (0 to 1) of the "
                                                "Rigorous/Lax sensitivity table (one test: its class at each).")]
MutatorOpt = Annotated[str, typer.Option("--mutator", help="Mutant sources: mechanical, llm, or mechanical,llm.")]
SamplesOpt = Annotated[int, ranged("--samples", help="LLM mutator: mutants wanted per operator.", lo=1)]

MUTATORS = ("mechanical", "llm")


def parse_mutators(value: str) -> list[str]:
    """The mutant sources of a --mutator value, in canonical order."""
    sources = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in sources if v not in MUTATORS]
    if not sources or unknown:
        raise CoHardenError(f"--mutator: {', '.join(unknown) or 'empty'} (known: {', '.join(MUTATORS)})")
    return [m for m in MUTATORS if m in sources]


def parse_operators(value: str | None) -> list[Operator]:
    """Operators from a comma-separated --operators value (default: the built-in mechanical ones). Naming
    operators loads the registry, so a plugin that cannot be loaded is said here, before the run."""
    from coharden.mutation.registry import registry
    from coharden.schema.mutant import MECHANICAL_DEFAULT, Operator

    if not value:
        return list(MECHANICAL_DEFAULT)
    known = [*registry(), Operator.VANILLA]
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise CoHardenError(f"--operators: unknown {', '.join(map(repr, unknown))} "
                            f"(known: {', '.join(op.value for op in known)})")
    return [Operator(name) for name in names]


def parse_cutoffs(value: str | None, default: Sequence[float]) -> list[float]:
    """Cutoffs from a comma-separated --cutoffs value, each between 0 and 1."""
    if value is None:
        return list(default)
    bad = CoHardenError(f"--cutoffs: {value!r} (allowed: numbers from 0 to 1, comma-separated)")
    try:
        cut = [float(c) for c in value.split(",") if c.strip()]
    except ValueError as exc:
        raise bad from exc
    if not cut or any(not 0 <= c <= 1 for c in cut):
        raise bad
    return cut


def check_estimate(confidence: float, max_mutants: int | None, *, fixed: bool, operators: int) -> None:
    """Refuse a --confidence outside (0.5, 1), a --max-mutants with a fixed budget, and a --max-mutants below
    the per-operator minimum (one mutant of each operator), each as one clear error."""
    from coharden.schema.mpe_config import MIN_PER_OPERATOR

    if not 0.5 < confidence < 1:
        raise CoHardenError(f"--confidence: {confidence} is out of range (allowed: between 0.5 and 1, both "
                            "excluded)")
    if max_mutants is None:
        return
    if fixed:
        raise CoHardenError("--max-mutants caps sequential MPE; --per-operator and --paper-classes run a fixed "
                            "budget of N per operator")
    if max_mutants < MIN_PER_OPERATOR * operators:
        raise CoHardenError(f"--max-mutants: {max_mutants} is below the per-operator minimum "
                            f"({MIN_PER_OPERATOR} mutant for each of the {operators} operators: at least "
                            f"{MIN_PER_OPERATOR * operators})")


@dataclass(frozen=True)
class MPEOptions:
    """The MPE group: the flags a user sets often. Every other MPE setting (``trust_tests``,
    ``reject_tampering``, ``timeout_factor``, ``timeout_floor``, ``prefer_exercised``, ...) comes from the
    config's ``mpe`` section (``-c mpe.KEY=VALUE``, ``[tool.coharden.mpe]``). :meth:`config` is the one place
    where the group becomes an :class:`MPEConfig`."""

    operators: str | None = None
    per_operator: int | None = None
    seed: int | None = None
    tau: float | None = None
    paper_classes: bool = False
    confidence: float | None = None
    max_mutants: int | None = None
    mutator: str = "mechanical"
    samples: int = 3
    no_implied: bool = False

    @property
    def sources(self) -> list[str]:
        """The mutant sources of ``--mutator`` (checked)."""
        return parse_mutators(self.mutator)

    def config(self, settings: Settings, *, workers: int = 1, mechanical: bool = True,
               llm_model: str | None = None, llm_operators: Sequence[Operator] = ()) -> MPEConfig:
        """The :class:`MPEConfig` of a command: ``settings.mpe`` (defaults < config files < ``-c mpe.KEY=...``)
        with these flags on top. ``workers`` are the threads of one MPE (1 where whole instances run in
        parallel); ``mechanical`` / ``llm_model`` / ``llm_operators``: the pool's sources, when an LLM mutator
        joins it (its operators join the mechanical ones, or replace them without ``mechanical``).

        Sequential MPE is the default; ``--per-operator`` (or ``--paper-classes``) runs a fixed budget of N per
        operator instead."""
        from pydantic import ValidationError

        from coharden.schema.mpe_config import MPEConfig

        base = settings.mpe
        chosen: dict[str, Any] = {"workers": workers, "mechanical": mechanical, "llm": llm_model}
        operators = parse_operators(self.operators) if self.operators else list(base.operators)
        if llm_operators:
            operators = list(dict.fromkeys([*(operators if mechanical else []), *llm_operators]))
        chosen["operators"] = operators
        for name in ("per_operator", "seed", "tau", "confidence", "max_mutants"):
            if getattr(self, name) is not None:
                chosen[name] = getattr(self, name)
        if self.paper_classes:
            chosen["paper_classes"] = True
        if self.no_implied:  # --no-implied: the check mode (else the config's mpe.implied, on by default)
            chosen["implied"] = False
        if self.per_operator is not None or self.paper_classes:
            chosen["sequential"] = False
        check_estimate(chosen.get("confidence", base.confidence), self.max_mutants,
                       fixed=not chosen.get("sequential", base.sequential) or chosen.get("paper_classes", False),
                       operators=len(operators))
        try:
            return MPEConfig.model_validate({**base.model_dump(), **chosen})
        except ValidationError as exc:
            raise CoHardenError(f"invalid MPE setting: {validation_message(exc)}") from exc


_MPE_OPTIONS: dict[str, Any] = {"operators": OperatorsOpt, "per_operator": PerOperatorOpt, "seed": SeedOpt,
                                "tau": TauOpt, "paper_classes": PaperClassesOpt, "confidence": ConfidenceOpt,
                                "max_mutants": MaxMutantsOpt, "mutator": MutatorOpt, "samples": SamplesOpt,
                                "no_implied": NoImpliedOpt}


def mpe_options(*names: str, param: str = "mpe_opts", **aliases: Any) -> Callable[[F], F]:
    """``command`` declares ``<param>: MPEOptions = MPEOptions()`` and gets the MPE flags ``names`` (all of the
    group when none are named) in that place; ``aliases`` replace a flag's alias where the command's help says
    more (``per_operator=...``)."""
    chosen = {name: _MPE_OPTIONS[name] for name in (names or _MPE_OPTIONS)}
    return option_group(MPEOptions, {**chosen, **aliases}, param)


# --- the engine group -----------------------------------------------------------------------------------------

ENGINES = ("local", "ray")


def _engine_name(value: str) -> str:
    if value not in ENGINES:
        raise typer.BadParameter(f"{value!r} (known: {', '.join(ENGINES)})")
    return value


ExecutorOpt = Annotated[str, typer.Option("--executor", callback=_engine_name, help="Where jobs run: local, or ray "
                                          "(one job per instance, on a Ray cluster).")]
AddressOpt = Annotated[str | None, typer.Option("--address", help="Ray cluster address (--executor ray).")]


@dataclass(frozen=True)
class EngineOptions:
    """``--executor`` and ``--address``: where a command's batch jobs run (checked when parsed)."""

    executor: str = "local"
    address: str | None = None

    @property
    def local(self) -> bool:
        return self.executor == "local"

    def engine(self, workers: int, on_interrupt: Callable[[int], None] | None = None) -> Engine:
        """The engine the jobs run on (close it when done)."""
        from coharden.execution.engine import make_engine

        return make_engine(self.executor, workers=workers, address=self.address, on_interrupt=on_interrupt)


#: ``command`` declares ``engine: EngineOptions = EngineOptions()`` and gets --executor and --address there.
def engine_options(param: str = "engine") -> Callable[[F], F]:
    return option_group(EngineOptions, {"executor": ExecutorOpt, "address": AddressOpt}, param)


# --- option groups ----------------------------------------------------------------------------------------------

def option_group(cls: type, aliases: dict[str, Any], param: str) -> Callable[[F], F]:
    """A decorator that spells a group of options once: the command declares ``<param>: cls = cls()`` and its
    command line gets one option per entry of ``aliases`` (field name -> ``Annotated`` alias) in that place,
    with the dataclass field's default (typer reads ``__signature__``); the body receives one ``cls``. Fields
    not in ``aliases`` keep their defaults (a command takes the part of a group it needs); a field without a
    default is a required option."""
    defaults = {f.name: inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
                for f in dataclasses.fields(cls)}

    def decorate(command: F) -> F:
        sig = inspect.signature(command, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name != param:
                params.append(p)
                continue
            params += [p.replace(name=name, annotation=alias, default=defaults[name])
                       for name, alias in aliases.items()]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            group = cls(**{name: kwargs.pop(name, defaults[name]) for name in aliases})
            return command(*args, **{param: group}, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return wrapper  # type: ignore[return-value]

    return decorate
