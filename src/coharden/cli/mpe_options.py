"""The MPE option group: operators, mutants per operator, seed, tau, the estimate, mutator
(:class:`MPEOptions`, declared with :func:`mpe_options`), and the parsers of their values.

:meth:`MPEOptions.config` is the one place where the MPE group becomes an :class:`MPEConfig`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coharden.cli.command import Renamed
from coharden.cli.options import F, option_group, ranged
from coharden.errors import CoHardenError, validation_message
from coharden.schema.mpe_config import PAPER_TAU

if TYPE_CHECKING:
    from coharden.config import Settings
    from coharden.schema.mpe_config import MPEConfig
    from coharden.schema.mutant import Operator


#: the MPE cutoff as the help texts name it (the loop's threshold is the loop.tau key)
MPE_TAU_HELP = f"{PAPER_TAU}, the paper's MPE cutoff"


# --- the MPE group --------------------------------------------------------------------------------------------


def _operator_help() -> str:
    # the built-in names come from the schema; importing the registry itself would load every operator module
    # (libcst), and reading the installed ones' entry points takes a while, on each start of the CLI
    from coharden.schema.mutant import MECHANICAL_DEFAULT

    return (f"Comma-separated mutant operators (default: every built-in mechanical one): "
            f"{', '.join(MECHANICAL_DEFAULT)}; an installed package's operators (entry-point "
            "group coharden.operators) by name; vanilla too for --mutator llm.")


OperatorsOpt = Annotated[str | None, typer.Option("--operators", help=_operator_help())]
PerOperatorOpt = Annotated[int | None, ranged("--per-operator", help="A fixed budget: N mutants per operator, "
                                              "a seeded sample, all run (default with --paper-classes: 3, the "
                                              "paper's N; without: sequential MPE).", lo=1)]
ConfidenceOpt = Annotated[float, ranged("--confidence", help="Confidence level of the laxity's interval (exact "
                                       "Clopper-Pearson).", lo=0.5, hi=1, lo_open=True, hi_open=True)]
MaxMutantsOpt = Annotated[int | None, ranged("--max-mutants", help="Sequential MPE: the most mutants run per "
                                             "test (default 120; at least one per operator).", lo=1)]


def seed_option(help: str = "Seed of every sampler (mutant sample, shown mutants).") -> Any:  # noqa: A002
    return ranged("--seed", help=help, lo=0)


SeedOpt = Annotated[int | None, seed_option()]


def tau_option(help: str = f"Laxity cutoff between Rigorous and Lax (default {MPE_TAU_HELP}).") -> Any:  # noqa: A002
    return ranged("--tau", help=help, lo=0, hi=1)


TauOpt = Annotated[float | None, tau_option()]


PreferExercisedOpt = Annotated[bool, typer.Option("--prefer-exercised", help="With --per-operator: sample first "
                                                  "among mutants that change code the tests run.")]
NoImpliedOpt = Annotated[bool, typer.Option("--no-implied", help="Make every run, also those whose outcome is "
                                            "implied (a test that never enters the functions a mutant changes): "
                                            "the check mode; results must be equal.")]
PaperClassesOpt = Annotated[bool, typer.Option("--paper-classes", help="The paper's rule exactly: N mutants per "
                                                "operator, no early stop, the point laxity against tau, every "
                                                "non-F->P test Misaligned.")]
MutatorOpt = Annotated[str, typer.Option("--mutator", help="Mutant sources: mechanical, llm, or mechanical,llm.")]

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
                            f"(known: {', '.join(known)})")
    return [Operator(name) for name in names]


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

        from coharden.schema.mpe_config import DEFAULT_MAX_MUTANTS, MPEConfig

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
        # a cap the user gave: the flag, or -c mpe.max_mutants / a config file away from its default (the
        # settings' fields are all "set" once copied, so the default is what tells)
        cap = self.max_mutants if self.max_mutants is not None else (
            base.max_mutants if base.max_mutants != DEFAULT_MAX_MUTANTS else None)
        check_estimate(chosen.get("confidence", base.confidence), cap,
                       fixed=not chosen.get("sequential", base.sequential) or chosen.get("paper_classes", False),
                       operators=len(operators))
        try:
            return MPEConfig.model_validate({**base.model_dump(), **chosen})
        except ValidationError as exc:
            raise CoHardenError(f"invalid MPE setting: {validation_message(exc)}") from exc


#: ``--operators`` stays a flag: naming an installed package's operators loads the registry first (a ``-c
#: mpe.operators`` list is read before it, so it takes the built-in ones only).
_MPE_OPTIONS: dict[str, Any] = {"operators": OperatorsOpt, "mutator": MutatorOpt}

#: The MPE flags that set an ``mpe`` key (read for one more release, as ``-c mpe.KEY=VALUE``): a fixed budget
#: (``--per-operator``, ``--paper-classes``) is not sequential, as the flags made it.
MPE_RENAMED = {"per_operator": Renamed("--per-operator", "mpe.per_operator", also=("mpe.sequential=false",)),
               "seed": Renamed("--seed", "mpe.seed"), "tau": Renamed("--tau", "mpe.tau"),
               "paper_classes": Renamed("--paper-classes", "mpe.paper_classes", switch="true",
                                        also=("mpe.sequential=false",)),
               "confidence": Renamed("--confidence", "mpe.confidence"),
               "max_mutants": Renamed("--max-mutants", "mpe.max_mutants"),
               "no_implied": Renamed("--no-implied", "mpe.implied", switch="false"),
               "samples": Renamed("--samples", "mpe.llm_samples")}
#: The report flags of the commands that grade many tests or one (``--cutoffs``) and one (``--show``).
CUTOFFS_RENAMED = Renamed("--cutoffs", "mpe.cutoffs", many=True)
SHOW_RENAMED = Renamed("--show", "mpe.show_mutants")


def mpe_options(*names: str, param: str = "mpe_opts", **aliases: Any) -> Callable[[F], F]:
    """``command`` declares ``<param>: MPEOptions = MPEOptions()`` and gets the MPE flags ``names`` of
    ``operators`` and ``mutator`` (both when none are named) in that place, and reads the group's old flags
    named (per-operator, seed, tau, samples, ...: ``-c mpe.KEY=VALUE`` now; all when none are named);
    ``aliases`` replace a flag's alias
    where the command's help says more."""
    names = names or (*_MPE_OPTIONS, *MPE_RENAMED)
    chosen = {name: _MPE_OPTIONS[name] for name in names if name in _MPE_OPTIONS}
    return option_group(MPEOptions, {**chosen, **aliases}, param, [MPE_RENAMED[n] for n in names if n in MPE_RENAMED])


