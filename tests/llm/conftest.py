"""Fixtures for the LLM layer: a mock OpenAI-compatible server on loopback.

Everything goes through the real client path (coharden -> litellm -> OpenAI SDK -> httpx -> TCP); only the
provider itself is replaced, by :class:`MockLLMServer`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coharden.llm import MockLLMServer

from ._helpers import KEY_VAR, Serve


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_VAR, "sk-test-123")
    return "sk-test-123"


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start a mock server with the given rules; every server started is stopped at teardown."""
    servers: list[MockLLMServer] = []

    def start(rules: list[dict[str, Any]]) -> MockLLMServer:
        server = MockLLMServer(rules)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
