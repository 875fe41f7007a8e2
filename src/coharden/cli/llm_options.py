"""The LLM option group: ``--model`` (:class:`LLMOptions`, declared with :func:`llm_options`), over the config's
``llm`` section (endpoint, record/replay store and mode, cost caps, sampling), and :func:`llm_client`, the one
builder of a client from them and ``$COHARDEN_LLM_*``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, overload

import typer

from coharden.cli.command import Renamed
from coharden.cli.options import F, option_group, ranged
from coharden.errors import CoHardenError, validation_message

if TYPE_CHECKING:
    from coharden.config import Settings
    from coharden.llm import Ledger, LLMClient, LLMConfig


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


#: The LLM group's flags that set an ``llm`` key (read for one more release, as ``-c llm.KEY=VALUE``).
LLM_RENAMED = {"api_base": Renamed("--api-base", "llm.api_base"), "llm_store": Renamed("--llm-store", "llm.store"),
               "llm_mode": Renamed("--llm-mode", "llm.mode"), "budget_usd": Renamed("--budget-usd", "llm.budget_usd"),
               "instance_budget_usd": Renamed("--instance-budget-usd", "llm.instance_budget_usd"),
               "temperature": Renamed("--temperature", "llm.temperature"),
               "max_tokens": Renamed("--max-tokens", "llm.max_tokens")}


@dataclass(frozen=True)
class LLMOptions:
    """The model of a command that may call one (``--model``, declared with :func:`llm_options`); how it is
    reached (endpoint, record/replay store and mode, cost caps, sampling) is the config's ``llm`` section."""

    model: str | None = None

    @property
    def configured(self) -> bool:
        """A model is named (by --model or ``$COHARDEN_LLM_MODEL``)."""
        return bool(self.model or os.environ.get("COHARDEN_LLM_MODEL"))

    @overload
    def client(self, settings: Settings, *, required: Literal[True], what: str = ...,
               ledger: Ledger | None = ..., model: str | None = ...) -> LLMClient: ...

    @overload
    def client(self, settings: Settings, *, required: bool = ..., what: str = ...,
               ledger: Ledger | None = ..., model: str | None = ...) -> LLMClient | None: ...

    def client(self, settings: Settings, *, required: bool = False, what: str = "this command",
               ledger: Ledger | None = None, model: str | None = None) -> LLMClient | None:
        """A client from --model, ``settings.llm`` and ``COHARDEN_LLM_*`` (``model`` instead of --model where
        a command has a second one); None when no model is named (and none is required)."""
        if not (model or self.configured) and not required:
            return None
        return llm_client(settings, model=model or self.model, ledger=ledger, what=what)


def llm_options(model: Any, param: str = "llm_options", *, budget: bool = True, instance_budget: bool = False,
                sampling: bool = False) -> Callable[[F], F]:
    """``command`` declares ``<param>: LLMOptions = LLMOptions()`` and gets ``--model`` in that place
    (``model``: the command's alias, whose help says what the model is for), and reads the old flags of the
    ``llm`` keys it uses: ``budget``, the run's cost cap; ``instance_budget``, a cap per instance;
    ``sampling``, temperature and max_tokens."""
    old = ["api_base", "llm_store", "llm_mode", *(["budget_usd"] if budget else []),
           *(["instance_budget_usd"] if instance_budget else []), *(["temperature", "max_tokens"] if sampling else [])]
    return option_group(LLMOptions, {"model": model}, param, [LLM_RENAMED[name] for name in old])


def llm_client(settings: Settings, *, model: str | None, ledger: Ledger | None = None, what: str = "this command",
               llm_config: LLMConfig | None = None) -> LLMClient:
    """An LLM client for ``model`` reached as ``settings.llm`` says (endpoint, record/replay store - default
    next to the result store -, mode, cost caps, sampling) and ``$COHARDEN_LLM_*``, or with the whole
    ``llm_config`` given. A missing model or a bad mode is a clear error."""
    from pydantic import ValidationError

    from coharden.llm import Budget, CacheMode, CallStore, LLMClient, LLMConfig

    llm = settings.llm
    try:
        mode = CacheMode(llm.mode)
    except ValueError as exc:
        raise CoHardenError(f"--llm-mode: {llm.mode!r} (known: auto, record, replay)") from exc
    try:
        if llm_config is None:
            llm_config = LLMConfig.from_env(model=model, api_base=llm.api_base, temperature=llm.temperature,
                                            max_tokens=llm.max_tokens)  # None: the variable's, or the default
    except ValidationError as exc:
        if any(e["loc"] == ("model",) for e in exc.errors()):
            raise CoHardenError(f"{what} needs --model (or $COHARDEN_LLM_MODEL)") from exc
        raise CoHardenError(f"LLM configuration: {validation_message(exc)}") from exc
    budget = None
    if llm.budget_usd is not None or llm.instance_budget_usd is not None:
        budget = Budget(per_run_usd=llm.budget_usd, per_instance_usd=llm.instance_budget_usd)
    return LLMClient(llm_config, store=CallStore(llm.store or settings.store.with_name("llm-calls.sqlite")),
                     mode=mode, budget=budget, ledger=ledger)


