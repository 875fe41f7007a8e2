"""The client through litellm and httpx against the mock server: replies, cost, truncation, retries, errors."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from coharden.llm import (
    ContextWindowExceeded,
    LLMAuthError,
    LLMClient,
    LLMConfig,
    LLMConfigError,
    LLMRequestError,
    RetriesExhausted,
    TruncatedReply,
    UnusableReply,
)
from coharden.llm.client import _litellm

from ._helpers import KEY_VAR, MODEL, Serve, make_config, reply_rule, user

pytestmark = pytest.mark.usefixtures("api_key")


class Sleeps(list[float]):
    """Records the backoff waits instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_normal_reply_has_tokens_cost_and_latency(serve: Serve) -> None:
    server = serve([reply_rule("capital of France", "Paris.", prompt_tokens=12, completion_tokens=3)])
    client = LLMClient(make_config(server.base_url, temperature=0.2, max_tokens=64))

    c = client.complete(user("What is the capital of France?"), instance_id="i1")

    assert c.content == "Paris."
    assert c.finish_reason == "stop"
    assert (c.prompt_tokens, c.completion_tokens, c.total_tokens) == (12, 3, 15)
    assert c.cost_usd == pytest.approx(12 * 1e-6 + 3 * 2e-6)
    assert c.cost_note is None
    assert c.latency_s > 0  # measured, not bounded: a loaded machine makes any bound flaky
    assert c.model == MODEL
    assert c.response_model == "gpt-4o-mini"
    assert len(c.request_hash) == 64
    assert c.cached is False
    # what the provider saw: one request, the messages verbatim, params, the key from the named variable
    (req,) = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.body["model"] == "gpt-4o-mini"
    assert req.messages == user("What is the capital of France?")
    assert req.body["temperature"] == 0.2
    assert req.body["max_tokens"] == 64
    assert req.headers["authorization"] == "Bearer sk-test-123"
    run = client.ledger.run_usage()
    assert (run.calls, run.prompt_tokens, run.completion_tokens, run.errors) == (1, 12, 3, 0)
    assert run.cost_usd == pytest.approx(c.cost_usd)
    assert client.ledger.instance_usage("i1").calls == 1


def test_cost_from_litellm_price_table_without_override(serve: Serve) -> None:
    server = serve([reply_rule("hi", "hello", prompt_tokens=1000, completion_tokens=500)])
    client = LLMClient(make_config(server.base_url, cost_overrides={}, max_tokens=1000))

    c = client.complete(user("hi"))

    prompt_cost, completion_cost = _litellm().cost_per_token(model=MODEL, prompt_tokens=1000, completion_tokens=500)
    assert c.cost_usd > 0
    assert c.cost_usd == pytest.approx(prompt_cost + completion_cost)
    assert c.cost_note is None


def test_unknown_local_model_costs_zero_with_a_note(serve: Serve) -> None:
    server = serve([reply_rule("hi", "hello")])
    config = make_config(server.base_url, model="hosted_vllm/my-local-coder", api_key_env=None, cost_overrides={})
    client = LLMClient(config)

    c = client.complete(user("hi"))

    assert c.content == "hello"
    assert c.cost_usd == 0.0
    assert c.cost_note is not None
    assert "hosted_vllm/my-local-coder" in c.cost_note
    assert "cost_overrides" in c.cost_note
    assert client.ledger.run_usage().unpriced_calls == 1
    assert server.requests[0].body["model"] == "my-local-coder"


def test_override_applies_to_a_local_model(serve: Serve) -> None:
    server = serve([reply_rule("hi", "hello", prompt_tokens=100, completion_tokens=10)])
    model = "hosted_vllm/my-local-coder"
    config = make_config(
        server.base_url, model=model, cost_overrides={model: {"input_per_token": 0.5, "output_per_token": 1.0}}
    )
    c = LLMClient(config).complete(user("hi"))
    assert c.cost_usd == pytest.approx(60.0)
    assert c.cost_note is None


def test_truncated_reply_raises_and_is_accounted(serve: Serve) -> None:
    server = serve([reply_rule("essay", "Once upon a", prompt_tokens=20, completion_tokens=3, finish_reason="length")])
    client = LLMClient(make_config(server.base_url))

    with pytest.raises(TruncatedReply, match="truncated") as info:
        client.complete(user("write an essay"), instance_id="i1")

    assert info.value.partial == "Once upon a"
    assert info.value.completion.cost_usd == pytest.approx(20e-6 + 6e-6)
    for usage in (client.ledger.run_usage(), client.ledger.instance_usage("i1")):
        assert (usage.calls, usage.truncations, usage.completion_tokens) == (1, 1, 3)
        assert usage.cost_usd == pytest.approx(26e-6)
    assert len(server.requests) == 1  # not retried: the same request would be cut again


def test_reply_reaching_max_tokens_counts_as_truncated_even_with_stop(serve: Serve) -> None:
    server = serve([reply_rule("hi", "a b c d", completion_tokens=8, finish_reason="stop")])
    client = LLMClient(make_config(server.base_url, max_tokens=8))
    with pytest.raises(TruncatedReply, match="completion_tokens=8, max_tokens=8"):
        client.complete(user("hi"))
    assert client.ledger.run_usage().truncations == 1


def test_per_call_max_tokens_override(serve: Serve) -> None:
    server = serve([reply_rule("hi", "a b c d", completion_tokens=8)])
    client = LLMClient(make_config(server.base_url, max_tokens=8))
    assert client.complete(user("hi"), max_tokens=100).content == "a b c d"
    assert server.requests[0].body["max_tokens"] == 100


def test_content_filter_reply_is_unusable(serve: Serve) -> None:
    server = serve([reply_rule("hi", "", finish_reason="content_filter")])
    client = LLMClient(make_config(server.base_url))
    with pytest.raises(UnusableReply, match="withheld") as info:
        client.complete(user("hi"))
    assert not isinstance(info.value, TruncatedReply)
    usage = client.ledger.run_usage()
    assert (usage.calls, usage.errors, usage.errors_by_kind["finish_content_filter"]) == (1, 1, 1)


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_transient_error_then_success_is_retried(serve: Serve, status: int) -> None:
    server = serve([{"match": "hi", "status": status, "times": 1}, reply_rule("hi", "hello")])
    sleeps = Sleeps()
    client = LLMClient(make_config(server.base_url), sleep=sleeps)

    c = client.complete(user("hi"))

    assert c.content == "hello"
    assert [r.status for r in server.requests] == [status, 200]
    assert sleeps == [0.001]
    usage = client.ledger.run_usage()
    assert (usage.calls, usage.retries, usage.errors) == (1, 1, 0)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_fails_at_once_with_clear_message(serve: Serve, status: int) -> None:
    server = serve([{"match": "hi", "status": status, "error_message": "Incorrect API key provided"}])
    sleeps = Sleeps()
    client = LLMClient(make_config(server.base_url), sleep=sleeps)

    with pytest.raises(LLMAuthError) as info:
        client.complete(user("hi"))

    message = str(info.value)
    assert f"HTTP {status}" in message
    assert "not retried" in message
    assert f"${KEY_VAR}" in message
    assert "Incorrect API key provided" in message
    assert len(server.requests) == 1
    assert sleeps == []
    assert client.ledger.run_usage().errors_by_kind == {"auth": 1}


def test_permanent_503_gives_up_after_max_retries(serve: Serve) -> None:
    server = serve([{"match": "hi", "status": 503, "error_message": "overloaded"}])
    sleeps = Sleeps()
    config = make_config(server.base_url, max_retries=3, retry_wait_s=0.001, retry_multiplier=2, retry_max_wait_s=0.003)
    client = LLMClient(config, sleep=sleeps)

    with pytest.raises(RetriesExhausted, match=r"gave up after 4 attempts \(1 \+ max_retries=3\)") as info:
        client.complete(user("hi"))

    assert "HTTP 503" in str(info.value)
    assert "overloaded" in str(info.value)
    assert info.value.attempts == 4
    assert len(server.requests) == 4
    assert sleeps == pytest.approx([0.001, 0.002, 0.003])  # exponential, capped
    usage = client.ledger.run_usage()
    assert (usage.calls, usage.retries, usage.errors_by_kind["retries_exhausted"]) == (0, 3, 1)


def test_zero_retries_means_one_attempt(serve: Serve) -> None:
    server = serve([{"match": "hi", "status": 429}])
    with pytest.raises(RetriesExhausted, match="after 1 attempts"):
        LLMClient(make_config(server.base_url, max_retries=0)).complete(user("hi"))
    assert len(server.requests) == 1


def test_timeout_is_retried(serve: Serve) -> None:
    server = serve([{"match": "hi", "reply": "late", "delay_s": 2.0, "times": 1}, reply_rule("hi", "on time")])
    client = LLMClient(make_config(server.base_url, timeout=0.25))
    assert client.complete(user("hi")).content == "on time"
    assert len(server.requests) == 2
    assert client.ledger.run_usage().retries == 1


def test_connection_refused_is_retried_then_gives_up() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleeps = Sleeps()
    client = LLMClient(make_config(f"http://127.0.0.1:{port}/v1", max_retries=2), sleep=sleeps)
    with pytest.raises(RetriesExhausted, match="after 3 attempts") as info:
        client.complete(user("hi"))
    assert "Connection" in str(info.value)
    assert len(sleeps) == 2


def test_concurrency_queues_calls_before_their_timeout_starts(serve: Serve) -> None:
    # a local server answers one request at a time: with concurrency 1 the client sends one call at a time, so
    # a queued call does not spend its timeout waiting behind the others (each reply takes 0.4 s of 1.0 s)
    server = serve([reply_rule("hi", "one at a time", delay_s=0.4)])
    client = LLMClient(make_config(server.base_url, timeout=1.0, max_retries=0, concurrency=1))
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        replies = list(pool.map(lambda _: client.complete(user("hi")).content, range(4)))
    assert replies == ["one at a time"] * 4
    assert time.monotonic() - started >= 4 * 0.4  # serialised
    assert client.ledger.run_usage().errors == 0


def test_concurrency_is_read_from_the_environment() -> None:
    config = LLMConfig.from_env({"COHARDEN_LLM_MODEL": "openai/local", "COHARDEN_LLM_CONCURRENCY": "1"})
    assert config.concurrency == 1
    assert LLMConfig(model="openai/local").concurrency is None


def test_context_window_error_fails_at_once(serve: Serve) -> None:
    server = serve(
        [
            {
                "match": "hi",
                "status": 400,
                "error_code": "context_length_exceeded",
                "error_message": "This model's maximum context length is 8192 tokens. However, you requested 9000.",
            }
        ]
    )
    with pytest.raises(ContextWindowExceeded, match="context window.*not retried"):
        LLMClient(make_config(server.base_url)).complete(user("hi"))
    assert len(server.requests) == 1


def test_no_matching_rule_is_a_non_retryable_request_error(serve: Serve) -> None:
    server = serve([reply_rule("something else", "x")])
    with pytest.raises(LLMRequestError, match="no rule matched"):
        LLMClient(make_config(server.base_url)).complete(user("hi"))
    assert len(server.requests) == 1


def test_missing_api_key_variable_fails_before_any_request(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_VAR)
    server = serve([reply_rule("hi", "hello")])
    with pytest.raises(LLMConfigError, match=f"\\${KEY_VAR}, but it is not set"):
        LLMClient(make_config(server.base_url)).complete(user("hi"))
    assert server.requests == []


def test_messages_need_role_and_content(serve: Serve) -> None:
    server = serve([reply_rule("hi", "hello")])
    with pytest.raises(LLMRequestError, match="message 0 needs `role` and `content`"):
        LLMClient(make_config(server.base_url)).complete([{"content": "hi"}])
    assert server.requests == []


def test_extra_params_are_sent(serve: Serve) -> None:
    server = serve([reply_rule("hi", "hello")])
    LLMClient(make_config(server.base_url, extra_params={"seed": 7, "top_p": 0.5})).complete(user("hi"))
    body = server.requests[0].body
    assert (body["seed"], body["top_p"]) == (7, 0.5)


def test_config_from_env_and_overrides() -> None:
    env = {
        "COHARDEN_LLM_MODEL": "hosted_vllm/qwen",
        "COHARDEN_LLM_API_BASE": "http://127.0.0.1:9/v1",
        "COHARDEN_LLM_MAX_TOKENS": "512",
        "COHARDEN_LLM_TEMPERATURE": "0.7",
        "COHARDEN_LLM_MAX_RETRIES": "1",
    }
    config = LLMConfig.from_env(env, temperature=0.0, api_key_env=None)
    assert (config.model, config.api_base, config.max_tokens, config.max_retries) == (
        "hosted_vllm/qwen",
        "http://127.0.0.1:9/v1",
        512,
        1,
    )
    assert config.temperature == 0.0  # explicit override beats the environment


def test_config_rejects_reserved_extra_params_and_unknown_fields() -> None:
    with pytest.raises(ValueError, match="extra_params must not set api_key"):
        LLMConfig(model=MODEL, extra_params={"api_key": "sk-leak"})
    with pytest.raises(ValueError, match="max_token"):
        LLMConfig.model_validate({"model": MODEL, "max_token": 5})


def test_config_rejects_extra_params_without_a_json_form() -> None:
    with pytest.raises(ValueError, match="plain JSON data"):
        LLMConfig(model=MODEL, extra_params={"seed": object()})


def test_free_local_model_priced_zero_by_litellm_gets_a_note() -> None:
    """litellm prices ``ollama/`` models at 0 (no error): still flagged, since budgets cannot see them."""
    client = LLMClient(LLMConfig(model="ollama/llama3"))
    response = _litellm().ModelResponse(
        model="llama3",
        choices=[{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
        usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    )
    cost, note = client._cost(response, 10, 2)
    assert cost == 0.0
    assert note is not None
    assert "0 USD (local or free model)" in note


# --- error kinds (issue 21) ---------------------------------------------------------------------------------


def test_wrong_key_against_a_key_checking_server_is_auth_and_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    from coharden.llm import MockLLMServer

    monkeypatch.setenv(KEY_VAR, "sk-wrong")
    sleeps = Sleeps()
    with MockLLMServer([reply_rule("hi", "hello")], api_key="sk-right") as server:
        with pytest.raises(LLMAuthError) as info:
            LLMClient(make_config(server.base_url), sleep=sleeps).complete(user("hi"))
        assert [r.status for r in server.requests] == [401]
    assert info.value.kind == "auth"
    assert "Incorrect API key provided" in str(info.value)
    assert sleeps == []


def test_missing_key_is_auth_before_any_request(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm reports a missing key as HTTP 500 without sending a request; it must not be retried as one."""
    from coharden.llm import MissingAPIKey

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve([reply_rule("hi", "hello")])
    sleeps = Sleeps()
    client = LLMClient(make_config(server.base_url, api_key_env=None), sleep=sleeps)
    with pytest.raises(MissingAPIKey, match=r"\$OPENAI_API_KEY") as info:
        client.complete(user("hi"))
    assert info.value.kind == "auth"
    assert (server.requests, sleeps) == ([], [])
    assert client.ledger.run_usage().errors_by_kind == {"auth": 1}


def test_unset_key_variable_is_kind_auth(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_VAR)
    server = serve([reply_rule("hi", "hello")])
    with pytest.raises(LLMConfigError, match=f"\\${KEY_VAR}") as info:
        LLMClient(make_config(server.base_url)).complete(user("hi"))
    assert info.value.kind == "auth"


def test_unsupported_parameter_400_is_bad_parameter_and_not_retried(serve: Serve) -> None:
    from coharden.llm import UnsupportedParameter

    server = serve([{"match": "hi", "status": 400, "error_code": "unsupported_parameter", "error_param": "temperature",
                     "error_message": "Unsupported parameter: 'temperature' is not supported with this model."}])
    sleeps = Sleeps()
    client = LLMClient(make_config(server.base_url), sleep=sleeps)
    with pytest.raises(UnsupportedParameter, match="not retried") as info:
        client.complete(user("hi"))
    assert info.value.kind == "bad_parameter"
    assert "'temperature' is not supported" in str(info.value)
    assert len(server.requests) == 1
    assert sleeps == []
    assert server.requests[0].status == 400
    assert client.ledger.run_usage().errors_by_kind == {"bad_parameter": 1}


def test_other_400_stays_a_bad_request(serve: Serve) -> None:
    serve_ = serve([{"match": "hi", "status": 400, "error_message": "messages[0].content: bad shape"}])
    with pytest.raises(LLMRequestError) as info:
        LLMClient(make_config(serve_.base_url)).complete(user("hi"))
    assert info.value.kind == "bad_request"


def test_kind_of_maps_agent_exit_statuses() -> None:
    from coharden.llm import kind_of

    assert kind_of("LLMAuthError") == "auth"
    assert kind_of("MissingAPIKey") == "auth"
    assert kind_of("UnsupportedParameter") == "bad_parameter"
    assert kind_of("RetriesExhausted") == "provider_down"
    assert kind_of("BudgetExceeded") == "cost_cap"
    assert kind_of("TruncatedReply") == "truncated"
    assert kind_of("Submitted") is None
    assert kind_of("LimitsExceeded") is None
