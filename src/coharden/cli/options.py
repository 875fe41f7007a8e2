"""Every option that two or more commands share, defined once, with its validation.

Groups: the common options (config, repos, store, timeout, python, json, id), the LLM group (model,
endpoint, record/replay store and mode, cost caps, sampling) and the MPE group (operators, mutants per
operator, seed, tau, workers, mutator, cutoffs). A command takes the aliases it needs; where a flag means
something narrower in one command (``--workers`` in ``run`` counts instances), the command passes its own help
to the same factory, so the validation stays the one defined here. Numeric flags are range-checked at the
command line: a bad value is one line (``Error: Invalid value for '--tau': 1.5 is out of range (allowed: 0 to
1)``) before anything runs.

:func:`mpe_config` is the one place where the MPE group becomes an :class:`MPEConfig`.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coharden.errors import CoHardenError
from coharden.schema.mpe_config import LOOP_TAU, PAPER_TAU

if TYPE_CHECKING:
    from coharden.config import Settings
    from coharden.schema.mpe_config import MPEConfig
    from coharden.schema.mutant import Operator

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

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML settings file.")]
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


def mpe_config(settings: Settings, operators: Sequence[Operator] | None, per_operator: int | None, *,
               paper_classes: bool = False, mechanical: bool = True, llm_model: str | None = None,
               prefer_exercised: bool = False, workers: int = 1, confidence: float | None = None,
               max_mutants: int | None = None, no_implied: bool = False) -> MPEConfig:
    """The :class:`MPEConfig` of the MPE option group: every command that runs MPE builds it here. Seed and tau
    come from ``settings`` (the flags folded over the config file); ``operators`` None keeps MPEConfig's
    default; ``workers`` are the threads of one MPE (1 where whole instances run in parallel).

    Sequential MPE is the default; a ``per_operator`` given (or ``paper_classes``) runs a fixed budget of N per
    operator instead."""
    from coharden.schema.mpe_config import MPEConfig

    chosen: dict[str, Any] = {} if operators is None else {"operators": list(operators)}
    fixed = per_operator is not None or paper_classes
    if per_operator is not None:  # None keeps MPEConfig's default N
        chosen["per_operator"] = per_operator
    if confidence is not None:
        chosen["confidence"] = confidence
    check_estimate(chosen.get("confidence", 0.95), max_mutants, fixed=fixed,
                   operators=len(chosen.get("operators", MPEConfig().operators)))
    if max_mutants is not None:
        chosen["max_mutants"] = max_mutants
    return MPEConfig(**chosen, seed=settings.seed, tau=settings.tau, sequential=not fixed,
                     paper_classes=paper_classes, mechanical=mechanical, llm=llm_model,
                     prefer_exercised=prefer_exercised, workers=workers, implied=not no_implied)
