"""A local OpenAI-compatible chat-completions server driven by rules, for tests and offline demos.

It speaks just enough of the OpenAI API for litellm's ``openai/`` and ``hosted_vllm/`` providers: ``POST
/v1/chat/completions`` (and ``/chat/completions``), non-streaming. Each request is matched against the rules
in order; the first rule that matches and still has uses left (``times``) answers it, either with a reply or
with an HTTP error carrying an OpenAI-style error body. Scripting "429, then success" is two rules with the
same match, the first with ``status: 429, times: 1``. A request no rule matches gets HTTP 404 with an error
saying so (so a test fails loudly instead of getting a made-up reply).

Rules file (YAML or JSON), either a list of rules or ``{"rules": [...]}``::

    rules:
      - match: {contains: "fix the bug", last_user: true}   # or just  match: "fix the bug"
        status: 429
        times: 1
      - match: {regex: "fix\\s+the\\s+bug", role: user}
        reply: "diff --git ..."
        usage: {prompt_tokens: 120, completion_tokens: 40}
        finish_reason: stop        # default; "length" scripts a truncated reply
        delay_s: 0.01
      - reply: "catch-all"         # no match = every request

A rule answering an error, as OpenAI does for a parameter the model rejects::

      - status: 400
        error_message: "Unsupported parameter: 'temperature' is not supported with this model."
        error_code: unsupported_parameter
        error_param: temperature

``MockLLMServer(rules, api_key="sk-...")`` also checks the ``Authorization: Bearer`` header of every request
first and answers HTTP 401 (``invalid_api_key``) when it is missing or different, as a real provider does.

Every request received is kept in :attr:`MockLLMServer.requests` so tests can assert what the model saw.
The module uses only the standard library and pydantic / PyYAML (no litellm).
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from coharden.llm.mockrules import MatchSpec, Rule, UsageSpec, load_rules, parse_rules

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass
class ReceivedRequest:
    """One HTTP request as the mock saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    rule_index: int | None
    """Index of the rule that answered, None if none matched (or the request was not a chat completion)."""
    status: int
    received_at: float = field(default_factory=time.time)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []


def _error_body(message: str, status: int, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _word_count(text: str) -> int:
    return len(text.split())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    mock: MockLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client hangs up early (e.g. it timed out during a scripted delay)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # HTTP/1.0: one request per connection, so stop() leaves no keep-alive connection served by a stray thread.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib names it `format`
        pass

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.mock._log(self, None, None, 404)
        self._send_json(404, _error_body(f"mock LLM: unknown path GET {self.path}", 404))

    def do_POST(self) -> None:
        mock = self.server.mock
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            mock._log(self, raw.decode("utf-8", "replace"), None, 400)
            self._send_json(400, _error_body("mock LLM: request body is not JSON", 400))
            return
        if path not in CHAT_PATHS:
            mock._log(self, body, None, 404)
            self._send_json(404, _error_body(f"mock LLM: unknown path POST {path}", 404))
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            mock._log(self, body, None, 400)
            self._send_json(400, _error_body("mock LLM: body needs a `messages` list", 400))
            return
        if body.get("stream"):
            mock._log(self, body, None, 400)
            self._send_json(400, _error_body("mock LLM: streaming is not supported", 400))
            return
        if mock.api_key is not None and self.headers.get("Authorization") != f"Bearer {mock.api_key}":
            mock._log(self, body, None, 401)
            given = self.headers.get("Authorization", "")
            message = ("You didn't provide an API key." if not given.strip()
                       else "Incorrect API key provided. You can find your API key in your account settings.")
            self._send_json(401, _error_body(message, 401, "invalid_api_key"))
            return
        index, rule = mock._select(body)
        if rule is None:
            mock._log(self, body, None, 404)
            last_user = MatchSpec(last_user=True).haystack(body["messages"])
            self._send_json(
                404,
                _error_body(
                    f"mock LLM: no rule matched the request ({len(mock.rules)} rules; "
                    f"last user message starts {last_user[:120]!r})",
                    404,
                    "no_rule_matched",
                ),
            )
            return
        mock._log(self, body, index, rule.status or 200)
        if rule.delay_s:
            mock._stopping.wait(rule.delay_s)
        if rule.status is not None:
            message = rule.error_message or f"mock LLM: scripted HTTP {rule.status} ({HTTPStatus(rule.status).phrase})"
            body_out = _error_body(message, rule.status, rule.error_code, rule.error_param)
            self._send_json(rule.status, body_out, rule.headers)
            return
        reply = rule.reply or ""
        answer: dict[str, Any] = {"role": "assistant", "content": reply}
        if rule.tool_calls:
            answer["content"] = rule.reply  # None when the reply is only calls, as OpenAI sends it
            answer["tool_calls"] = [
                {"id": f"call_mock_{next(mock._ids)}", "type": "function",
                 "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
                for call in rule.tool_calls
            ]
        usage = rule.usage or UsageSpec(
            prompt_tokens=_word_count(MatchSpec().haystack(body["messages"])), completion_tokens=_word_count(reply)
        )
        payload = {
            "id": f"chatcmpl-mock-{next(mock._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "mock"),
            "choices": [
                {"index": 0, "message": answer, "finish_reason": rule.finish_reason}
            ],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            },
        }
        self._send_json(200, payload, rule.headers)


class MockLLMServer:
    """Rule-driven OpenAI-compatible server on loopback, in a background thread.

    >>> with MockLLMServer([{"reply": "hi"}]) as server:
    ...     base_url = server.base_url   # "http://127.0.0.1:<port>/v1", the api_base for litellm
    """

    def __init__(
        self,
        rules: Sequence[Rule | Mapping[str, Any]] | str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        on_request: Callable[[ReceivedRequest], None] | None = None,
        api_key: str | None = None,
    ) -> None:
        """``rules``: a rules file path, or a list of rules / rule dicts. ``on_request`` is called (in the
        handler thread) with each request as it is logged, e.g. to print a line per request. ``api_key``: when
        set, a request without ``Authorization: Bearer <api_key>`` gets HTTP 401 before any rule is tried."""
        self.on_request = on_request
        self.api_key = api_key
        if isinstance(rules, str | Path):
            self.rules = load_rules(rules)
        else:
            self.rules = parse_rules([r.model_dump() if isinstance(r, Rule) else r for r in rules])
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._uses = [0] * len(self.rules)
        self._requests: list[ReceivedRequest] = []
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> str:
        """Bind, serve in a daemon thread, and return the base URL (``http://host:port/v1``)."""
        if self._server is not None:
            return self.base_url
        self._stopping.clear()
        server = _Server((self.host, self.port), _Handler)
        server.mock = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="mock-llm", daemon=True
        )
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        """Stop serving and close the socket; pending delays are cut short."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("mock LLM server is not running")
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> MockLLMServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- introspection -----------------------------------------------------------------------------------
    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def uses(self, index: int) -> int:
        """How many requests rule ``index`` has answered."""
        with self._lock:
            return self._uses[index]

    # -- used by the handler -------------------------------------------------------------------------------
    def _select(self, body: Mapping[str, Any]) -> tuple[int | None, Rule | None]:
        with self._lock:
            for index, rule in enumerate(self.rules):
                if rule.times is not None and self._uses[index] >= rule.times:
                    continue
                if rule.match.matches(body):
                    self._uses[index] += 1
                    return index, rule
        return None, None

    def _log(self, handler: _Handler, body: Any, rule_index: int | None, status: int) -> None:
        entry = ReceivedRequest(
            method=handler.command,
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
            rule_index=rule_index,
            status=status,
        )
        with self._lock:
            self._requests.append(entry)
        if self.on_request is not None:
            self.on_request(entry)
