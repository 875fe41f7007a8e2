"""One LLM client over many providers (litellm model names), with retries, cost, truncation check,
budgets and record / replay.

The only network path is ``litellm.completion`` (which talks HTTP through httpx). litellm's own retries and
the OpenAI SDK's hidden retries are switched off (``num_retries=0, max_retries=0``) so that the retry policy
here is the only one and the number of requests a provider sees is exactly what the config says.

Retry policy (after mini-swe-agent's abort list):

* retried with exponential backoff: HTTP 408 / 409 / 429 / 5xx, connection errors, timeouts;
* never retried: 401 / 403 and a missing key (:class:`LLMAuthError`, :class:`MissingAPIKey`), context window
  (:class:`ContextWindowExceeded`), unsupported parameters (:class:`UnsupportedParameter`), other 4xx such as
  400 / 404 (:class:`LLMRequestError`).

litellm reports a missing key as an HTTP 500 raised before any request is sent; it is recognised by its
message and classified as auth, not retried as a server error. Each error carries its kind
(:class:`~coharden.llm.errors.ErrorKind`), which the ledger counts and loop runs record.

litellm is imported lazily on the first provider call: replay needs neither litellm nor the network.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from coharden.llm.accounting import Budget, Ledger
from coharden.llm.cache import CacheMode, CallStore, build_request, canonical_json, request_hash
from coharden.llm.config import LLMConfig
from coharden.llm.errors import (
    ContextWindowExceeded,
    LLMAuthError,
    LLMConfigError,
    LLMError,
    LLMRequestError,
    MissingAPIKey,
    ReplayMiss,
    RetriesExhausted,
    TruncatedReply,
    UnsupportedParameter,
    UnusableReply,
)
from coharden.llm.types import Completion

#: finish_reason values that mean "the reply was cut by the token limit".
TRUNCATED_FINISH_REASONS = frozenset({"length", "max_tokens"})
#: finish_reason values that mean "the provider withheld (part of) the reply".
FILTERED_FINISH_REASONS = frozenset({"content_filter", "refusal", "safety"})

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_AUTH_STATUS = frozenset({401, 403})
#: What provider libraries say when no key reached them (litellm raises these as HTTP 500 without a request).
_MISSING_KEY = re.compile(r"missing credentials|api_key client option must be set|no api key|api key not (found|set)"
                          r"|must provide an api key|api_key (is|was) not (set|provided)", re.IGNORECASE)
#: What providers say when a model rejects a parameter (OpenAI: code ``unsupported_parameter`` /
#: ``unsupported_value``; litellm: ``UnsupportedParamsError``, "doesn't support temperature").
_BAD_PARAMETER = re.compile(r"unsupported[ _](parameter|value|param)|(does ?n[o']t|not) support(ed)?\b"
                            r"|is not supported with this model|unrecognized request argument", re.IGNORECASE)

_litellm_module: ModuleType | None = None
_litellm_lock = threading.Lock()


def _litellm() -> ModuleType:
    """Import litellm once, configured for offline, quiet, reproducible use.

    ``LITELLM_LOCAL_MODEL_COST_MAP`` makes litellm use the price table shipped with the installed version
    instead of downloading the latest one at import: costs are then a function of the pinned version (and
    import does not stall on a machine without internet). Set the variable to ``False`` to opt out.
    """
    global _litellm_module
    with _litellm_lock:
        if _litellm_module is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            try:
                import litellm
            except ImportError as exc:  # pragma: no cover - depends on the installed extras
                raise LLMConfigError(
                    "litellm is not installed; install the LLM extra: pip install 'coharden[llm]'"
                ) from exc
            litellm.suppress_debug_info = True
            litellm.telemetry = False
            _litellm_module = litellm
        return _litellm_module


def _normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Plain JSON data (what is hashed is exactly what is sent); every message needs a role and content."""
    if not messages:
        raise LLMRequestError("no messages to send")
    for i, message in enumerate(messages):
        if "role" not in message or "content" not in message:
            raise LLMRequestError(f"message {i} needs `role` and `content`, got keys {sorted(message)}")
    try:
        return json.loads(canonical_json([dict(m) for m in messages]))
    except (TypeError, ValueError) as exc:
        raise LLMRequestError(f"messages are not JSON-serializable: {exc}") from exc


def _classify(exc: Exception) -> str | None:
    """``auth`` / ``context_window`` / ``bad_parameter`` / ``request`` (fail at once), ``retryable``, or None (not
    a provider error)."""
    litellm = _litellm()
    if isinstance(exc, litellm.ContextWindowExceededError):
        return "context_window"
    if not isinstance(exc, tuple(litellm.LITELLM_EXCEPTION_TYPES)):
        return None  # not a provider error (a bug, KeyboardInterrupt, ...): let it through unchanged
    text = f"{getattr(exc, 'message', '')} {exc}"
    if isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError) or _MISSING_KEY.search(text):
        return "auth"
    if isinstance(exc, litellm.Timeout | litellm.APIConnectionError):
        return "retryable"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        if status in _AUTH_STATUS:
            return "auth"
        if status in _RETRYABLE_STATUS or status >= 500:
            return "retryable"
    if isinstance(exc, litellm.UnsupportedParamsError) or (status in (400, 422) and _BAD_PARAMETER.search(text)):
        return "bad_parameter"
    return "request"


def _provider_key_vars(model: str) -> str:
    """The key variable(s) litellm reads for ``model`` (``$OPENAI_API_KEY``), for error messages."""
    try:
        missing = _litellm().validate_environment(model).get("missing_keys") or []
    except Exception:  # a hint only; never fail over it
        missing = []
    return " or ".join(f"${name}" for name in missing) or "the provider's key variable"


def _provider_message(exc: Exception) -> str:
    text = str(getattr(exc, "message", "") or exc).strip()
    return text if len(text) <= 600 else text[:600] + " ..."


class LLMClient:
    """Chat completions for one :class:`LLMConfig`, accounted in a :class:`Ledger`, capped by a :class:`Budget`,
    recorded in / replayed from a :class:`CallStore`.

    Thread-safe: the ledger and the store are locked; the client holds no other mutable state but the
    semaphore of ``config.concurrency``, which makes calls beyond it wait before their attempt starts.
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        store: CallStore | None = None,
        mode: CacheMode | str = CacheMode.AUTO,
        ledger: Ledger | None = None,
        budget: Budget | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.store = store
        self.mode = CacheMode(mode)
        self.ledger = ledger if ledger is not None else Ledger()
        self.budget = budget
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(config.concurrency) if config.concurrency else None
        if self.mode is CacheMode.REPLAY and store is None:
            raise LLMConfigError("replay mode needs a CallStore to replay from")

    # -- public -------------------------------------------------------------------------------------------
    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        instance_id: str | None = None,
        sample_index: int = 0,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """One reply to ``messages``.

        ``sample_index`` distinguishes the N samples of the same request (each is stored separately).
        ``temperature`` / ``max_tokens`` override the config for this call.

        Raises :class:`BudgetExceeded` before the call if a cap is reached; :class:`TruncatedReply` /
        :class:`UnusableReply` if the reply is cut or withheld (it is still accounted and stored);
        :class:`ReplayMiss` in replay mode without a stored reply; :class:`LLMAuthError`,
        :class:`ContextWindowExceeded`, :class:`LLMRequestError`, :class:`RetriesExhausted` for provider errors.
        """
        model = self.config.model
        if self.budget is not None:
            # Before the cache lookup too: a replayed run must stop exactly where the recorded run stopped.
            self.budget.check(self.ledger, model=model, instance_id=instance_id)
        msgs = _normalize_messages(messages)
        max_tok = self.config.max_tokens if max_tokens is None else max_tokens
        params: dict[str, Any] = {
            "temperature": self.config.temperature if temperature is None else float(temperature),
            "max_tokens": max_tok,
            **self.config.extra_params,
        }
        request = build_request(model, msgs, params, sample_index)
        key = request_hash(request)

        response: dict[str, Any] | None = None
        cached = False
        if self.store is not None and self.mode is not CacheMode.RECORD:
            stored = self.store.get(key)
            if stored is not None:
                response, cached = stored.response, True
            elif self.mode is CacheMode.REPLAY:
                self.ledger.record_error("replay_miss", model=model, instance_id=instance_id)
                raise ReplayMiss(
                    f"replay: no stored reply for request {key} (model {model}, sample {sample_index}) in "
                    f"{self.store.path}; record it first (mode 'record' or 'auto')",
                    request_hash=key,
                )
        if response is None:
            if self._slots is None:
                response, raw = self._call_provider(msgs, params, instance_id=instance_id)
            else:
                with self._slots:
                    response, raw = self._call_provider(msgs, params, instance_id=instance_id)
            if self.store is not None:
                stored = self.store.put(key, request, response, raw_response=raw, replace=self.mode is CacheMode.RECORD)
                response = stored.response  # the canonical (first-stored) reply; see cache module docs

        completion = Completion(
            content=response["content"],
            finish_reason=response["finish_reason"],
            model=model,
            response_model=response.get("response_model", ""),
            prompt_tokens=response["prompt_tokens"],
            completion_tokens=response["completion_tokens"],
            cost_usd=response["cost_usd"],
            cost_note=response.get("cost_note"),
            latency_s=response["latency_s"],
            request_hash=key,
            sample_index=sample_index,
            cached=cached,
        )
        self._accept_or_raise(completion, max_tok, instance_id=instance_id)
        return completion

    # -- internals ----------------------------------------------------------------------------------------
    def _accept_or_raise(self, completion: Completion, max_tokens: int, *, instance_id: str | None) -> None:
        """Account the reply; fail closed on a truncated or withheld reply (paid for, never returned)."""
        reason = completion.finish_reason
        if reason in TRUNCATED_FINISH_REASONS or completion.completion_tokens >= max_tokens:
            self.ledger.record_completion(completion, instance_id=instance_id, truncated=True)
            raise TruncatedReply(
                f"{completion.model}: reply truncated (finish_reason={reason!r}, completion_tokens="
                f"{completion.completion_tokens}, max_tokens={max_tokens}); not used. Raise max_tokens or shorten "
                f"the prompt. request {completion.request_hash}",
                completion=completion,
            )
        if reason in FILTERED_FINISH_REASONS:
            self.ledger.record_completion(completion, instance_id=instance_id, unusable_kind=f"finish_{reason}")
            raise UnusableReply(
                f"{completion.model}: provider withheld the reply (finish_reason={reason!r}); not used. "
                f"request {completion.request_hash}",
                completion=completion,
            )
        self.ledger.record_completion(completion, instance_id=instance_id)

    def _wait(self, retry: int) -> float:
        cfg = self.config
        return min(cfg.retry_max_wait_s, cfg.retry_wait_s * cfg.retry_multiplier**retry)

    def _call_provider(
        self, messages: list[dict[str, Any]], params: dict[str, Any], *, instance_id: str | None
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Call the provider with retries; return (stored response fields, raw provider JSON)."""
        cfg = self.config
        model = cfg.model
        try:
            api_key = cfg.resolve_api_key()
        except LLMConfigError as exc:
            self.ledger.record_error(exc.kind, model=model, instance_id=instance_id)
            raise
        litellm = _litellm()
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "timeout": cfg.timeout,
            "num_retries": 0,  # litellm's retries: off, ours are the only ones
            "max_retries": 0,  # the OpenAI SDK's hidden retries: off
            **params,
        }
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if api_key is not None:
            kwargs["api_key"] = api_key
        if cfg.drop_params:
            kwargs["drop_params"] = True
        where = cfg.api_base or "the provider's default endpoint"
        attempts = 1 + cfg.max_retries
        for attempt in range(attempts):
            started = time.monotonic()
            try:
                raw_response = litellm.completion(**kwargs)
            except Exception as exc:
                kind = _classify(exc)
                if kind is None:
                    raise
                status = getattr(exc, "status_code", None)
                what = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "")
                if kind == "retryable" and attempt + 1 < attempts:
                    self.ledger.record_retry(model=model, instance_id=instance_id)
                    self._sleep(self._wait(attempt))
                    continue
                error = self._error(kind, what, exc, where=where, attempts=attempt + 1)
                self.ledger.record_error(
                    "retries_exhausted" if kind == "retryable" else error.kind, model=model, instance_id=instance_id
                )
                raise error from exc
            latency = time.monotonic() - started
            return self._response_fields(raw_response, latency)
        raise AssertionError("unreachable")  # pragma: no cover

    def _error(self, kind: str, what: str, exc: Exception, *, where: str, attempts: int) -> LLMError:
        model = self.config.model
        detail = _provider_message(exc)
        if kind == "auth":
            key_hint = f"${self.config.api_key_env}" if self.config.api_key_env else _provider_key_vars(model)
            if _MISSING_KEY.search(detail):
                return MissingAPIKey(
                    f"{model} at {where}: no API key reached the provider; not retried. Set the key in {key_hint} "
                    f"(any non-empty value for a local endpoint such as `coharden mock-llm`). Provider library said: "
                    f"{detail}"
                )
            return LLMAuthError(
                f"{model} at {where}: authentication/permission refused, {what}; not retried. Check the API key in "
                f"{key_hint} and access to the model. Provider said: {detail}"
            )
        if kind == "context_window":
            return ContextWindowExceeded(
                f"{model}: request exceeds the model's context window, {what}; not retried. Shorten the prompt "
                f"or use a model with a larger context. Provider said: {detail}"
            )
        if kind == "retryable":
            return RetriesExhausted(
                f"{model} at {where}: gave up after {attempts} attempts (1 + max_retries={self.config.max_retries}); "
                f"last error {what}: {detail}",
                attempts=attempts,
            )
        if kind == "bad_parameter":
            return UnsupportedParameter(
                f"{model} at {where}: the model rejects a request parameter, {what}; not retried. Remove it from "
                f"the config (temperature, extra_params) or keep drop_params on. Provider said: {detail}"
            )
        return LLMRequestError(f"{model} at {where}: request rejected, {what}; not retried. Provider said: {detail}")

    def _response_fields(self, raw_response: Any, latency: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Extract what is stored and replayed from a litellm ``ModelResponse``."""
        model = self.config.model
        try:
            choice = raw_response.choices[0]
            content = choice.message.content
            finish_reason = choice.finish_reason
            usage = getattr(raw_response, "usage", None)
            prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
            completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise LLMRequestError(f"{model}: malformed provider reply ({exc}); not used") from exc
        cost, note = self._cost(raw_response, prompt_tokens, completion_tokens)
        try:
            raw = raw_response.model_dump(mode="json")
        except Exception:  # the raw copy is for audits only; never fail a paid call over it
            raw = None
        fields = {
            "content": content if isinstance(content, str) else ("" if content is None else str(content)),
            "finish_reason": str(finish_reason or ""),
            "response_model": str(getattr(raw_response, "model", "") or ""),
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "cost_usd": cost,
            "cost_note": note,
            "latency_s": round(latency, 6),
        }
        return fields, raw

    def _cost(self, raw_response: Any, prompt_tokens: int, completion_tokens: int) -> tuple[float, str | None]:
        """USD cost: the config's override, else litellm's price table; unknown models cost 0 with a note."""
        model = self.config.model
        override = self.config.cost_override()
        if override is not None:
            return prompt_tokens * override.input_per_token + completion_tokens * override.output_per_token, None
        hint = f"set cost_overrides[{model!r}] to account it (budget caps cannot see this model's spend)"
        try:
            cost = float(_litellm().completion_cost(completion_response=raw_response, model=model))
        except Exception as exc:  # litellm raises for models missing from its table (local / new models)
            return 0.0, f"no price for {model} in litellm's table ({type(exc).__name__}); counted as 0 USD; {hint}"
        if cost <= 0 and (prompt_tokens or completion_tokens):
            return 0.0, f"litellm prices {model} at 0 USD (local or free model); {hint}"
        return cost, None
