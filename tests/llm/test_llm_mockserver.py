"""The mock server on its own, over plain HTTP: matching, fall-through, errors, request log, rules files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from coharden.llm import MockLLMServer, RulesError, load_rules

from ._helpers import Serve


def chat(
    base_url: str, messages: list[dict[str, Any]], model: str = "gpt-4o-mini", path: str = "/chat/completions"
) -> httpx.Response:
    return httpx.post(base_url + path, json={"model": model, "messages": messages}, timeout=5)


def msgs(system: str, *users: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, *({"role": "user", "content": u} for u in users)]


def test_reply_shape_is_openai_compatible(serve: Serve) -> None:
    server = serve([{"match": "hi", "reply": "hello", "usage": {"prompt_tokens": 4, "completion_tokens": 1}}])
    body = chat(server.base_url, msgs("sys", "hi")).json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-4o-mini"
    assert body["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
    ]
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}


def test_default_usage_is_word_counts(serve: Serve) -> None:
    server = serve([{"reply": "three word reply"}])
    usage = chat(server.base_url, msgs("be brief", "say something")).json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (4, 3)


def test_both_paths_are_served(serve: Serve) -> None:
    server = serve([{"reply": "ok"}])
    root = server.base_url.removesuffix("/v1")
    assert chat(root, msgs("s", "u")).json()["choices"][0]["message"]["content"] == "ok"
    assert chat(server.base_url, msgs("s", "u")).status_code == 200
    assert [r.path for r in server.requests] == ["/chat/completions", "/v1/chat/completions"]


@pytest.mark.parametrize(
    ("match", "messages", "hit"),
    [
        ("needle", msgs("sys", "hay needle hay"), True),
        ("needle", msgs("needle in the system prompt", "hay"), True),
        ({"regex": r"fix\s+issue\s+#\d+"}, msgs("sys", "please fix  issue #42"), True),
        ({"regex": r"^line two$"}, msgs("sys", "line one\nline two"), False),  # no MULTILINE: ^ is text start
        ({"regex": r"one.line"}, msgs("sys", "one\nline"), True),  # DOTALL
        ({"contains": "needle", "role": "system"}, msgs("sys", "needle"), False),
        ({"contains": "needle", "role": "system"}, msgs("a needle", "x"), True),
        ({"contains": "first", "last_user": True}, msgs("sys", "first", "second"), False),
        ({"contains": "second", "last_user": True}, msgs("sys", "first", "second"), True),
        ({"role": "tool"}, msgs("sys", "x"), False),
        ({"model": "other-model"}, msgs("sys", "x"), False),
        ({"model": "gpt-4o-mini", "contains": "x"}, msgs("sys", "x"), True),
        (None, msgs("sys", "anything"), True),
    ],
)
def test_matching(serve: Serve, match: Any, messages: list[dict[str, str]], hit: bool) -> None:
    server = serve([{"match": match, "reply": "matched"}])
    response = chat(server.base_url, messages)
    assert (response.status_code == 200) is hit
    assert server.requests[0].rule_index == (0 if hit else None)


def test_content_parts_are_matched_as_text(serve: Serve) -> None:
    server = serve([{"match": "needle", "reply": "matched"}])
    messages = [{"role": "user", "content": [{"type": "text", "text": "a needle"}, {"type": "image_url"}]}]
    assert chat(server.base_url, messages).status_code == 200


def test_times_makes_a_rule_fall_through(serve: Serve) -> None:
    server = serve(
        [
            {"match": "go", "status": 429, "times": 2, "headers": {"retry-after": "0"}},
            {"match": "go", "reply": "finally"},
        ]
    )
    responses = [chat(server.base_url, msgs("s", "go")) for _ in range(3)]
    assert [r.status_code for r in responses] == [429, 429, 200]
    assert responses[0].headers["retry-after"] == "0"
    assert responses[0].json()["error"]["type"] == "rate_limit_error"
    assert (server.uses(0), server.uses(1)) == (2, 1)


def test_error_rule_has_an_openai_error_body(serve: Serve) -> None:
    server = serve([{"status": 400, "error_message": "too long", "error_code": "context_length_exceeded"}])
    response = chat(server.base_url, msgs("s", "u"))
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "too long",
            "type": "invalid_request_error",
            "param": None,
            "code": "context_length_exceeded",
        }
    }


def test_unmatched_request_gets_a_404_saying_so(serve: Serve) -> None:
    server = serve([{"match": "something else", "reply": "x"}])
    response = chat(server.base_url, msgs("s", "what I asked"))
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "no_rule_matched"
    assert "no rule matched" in error["message"]
    assert "what I asked" in error["message"]


def test_bad_requests_are_rejected_and_logged(serve: Serve) -> None:
    server = serve([{"reply": "x"}])
    assert httpx.post(server.base_url + "/embeddings", json={}, timeout=5).status_code == 404
    assert httpx.post(server.base_url + "/chat/completions", content=b"{not json", timeout=5).status_code == 400
    streamed = httpx.post(
        server.base_url + "/chat/completions", json={"model": "m", "messages": [], "stream": True}, timeout=5
    )
    assert streamed.status_code == 400
    assert "streaming" in streamed.json()["error"]["message"]
    assert httpx.get(server.base_url + "/models", timeout=5).status_code == 404
    assert [r.status for r in server.requests] == [404, 400, 400, 404]


def test_request_log_keeps_what_the_model_saw(serve: Serve) -> None:
    server = serve([{"reply": "x"}])
    chat(server.base_url, msgs("sys", "one"))
    chat(server.base_url, msgs("sys", "two"))
    assert [r.messages[-1]["content"] for r in server.requests] == ["one", "two"]
    server.clear_requests()
    assert server.requests == []


def test_delay(serve: Serve) -> None:
    server = serve([{"reply": "slow", "delay_s": 0.05}])
    started = time.monotonic()
    chat(server.base_url, msgs("s", "u"))
    assert time.monotonic() - started >= 0.05


def test_context_manager_stops_the_server() -> None:
    with MockLLMServer([{"reply": "x"}]) as server:
        url = server.base_url
        assert chat(url, msgs("s", "u")).status_code == 200
    with pytest.raises(httpx.ConnectError):
        chat(url, msgs("s", "u"))


def test_rules_from_yaml_and_json_files(tmp_path: Path) -> None:
    yaml_file = tmp_path / "rules.yaml"
    yaml_file.write_text(
        "rules:\n  - match: {regex: 'a+b', last_user: true}\n    reply: 'yes'\n    times: 1\n  - reply: fallback\n"
    )
    json_file = tmp_path / "rules.json"
    json_file.write_text(json.dumps([{"match": "x", "status": 503}]))
    rules = load_rules(yaml_file)
    assert [r.reply for r in rules] == ["yes", "fallback"]
    assert rules[0].match.regex == "a+b"
    assert load_rules(json_file)[0].status == 503
    with MockLLMServer(yaml_file) as server:
        assert chat(server.base_url, msgs("s", "aab")).json()["choices"][0]["message"]["content"] == "yes"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("- match: {regex: '(unclosed'}\n  reply: x\n", "rules[0].match.regex"),
        ("- reply: ok\n- match: x\n  reploy: typo\n", "rules[1].reploy"),
        ("- match: x\n", "rules[0]: Value error, a rule needs `reply`"),
        ("rules:\n  - reply: x\n    status: 200\n", "rules[0].status"),
        ("- reply: x\n  times: 0\n", "rules[0].times"),
        ("- reply: x\n  usage: {prompt_tokens: 3}\n", "rules[0].usage.completion_tokens"),
        ("- reply: x\n  match: {contain: y}\n", "rules[0].match.contain"),
        ("rulez: []\n", "rulez"),
        ("just a string\n", "expected a list of rules"),
        ("- reply: [unclosed\n", "not valid YAML/JSON"),
    ],
)
def test_malformed_rules_file_names_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad-rules.yaml"
    path.write_text(text)
    with pytest.raises(RulesError) as info:
        load_rules(path)
    message = str(info.value)
    assert str(path) in message
    assert field in message


def test_missing_rules_file(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="nope.yaml: cannot read rules file"):
        MockLLMServer(tmp_path / "nope.yaml")


def test_rules_given_in_code_are_validated_too() -> None:
    with pytest.raises(RulesError, match=r"<rules>: invalid rules: rules\[0\]\.delay_s"):
        MockLLMServer([{"reply": "x", "delay_s": -1}])


def test_error_rule_names_the_parameter_at_fault(serve: Serve) -> None:
    server = serve([{"status": 400, "error_message": "Unsupported parameter: 'temperature'",
                     "error_code": "unsupported_parameter", "error_param": "temperature"}])
    error = chat(server.base_url, msgs("s", "u")).json()["error"]
    assert (error["param"], error["code"], error["type"]) == ("temperature", "unsupported_parameter",
                                                              "invalid_request_error")


def test_key_checking_server_answers_401_without_or_with_a_wrong_key() -> None:
    with MockLLMServer([{"reply": "ok"}], api_key="sk-right") as server:
        url = server.base_url + "/chat/completions"
        body = {"model": "m", "messages": msgs("s", "u")}
        missing = httpx.post(url, json=body, timeout=5)
        wrong = httpx.post(url, json=body, headers={"Authorization": "Bearer sk-wrong"}, timeout=5)
        right = httpx.post(url, json=body, headers={"Authorization": "Bearer sk-right"}, timeout=5)
        assert [r.status for r in server.requests] == [401, 401, 200]
        assert server.uses(0) == 1  # a refused request uses no rule
    assert (missing.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
    assert missing.json()["error"]["message"] == "You didn't provide an API key."
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert wrong.json()["error"]["type"] == "authentication_error"


def test_a_reply_can_make_tool_calls(serve: Serve) -> None:
    server = serve([{"tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}}]}])
    choice = chat(server.base_url, msgs("s", "u")).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["id"].startswith("call_mock_")
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("terminal", {"command": "ls"})
