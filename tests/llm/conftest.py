"""Fixtures for the LLM layer: a mock OpenAI-compatible server on loopback.

Everything goes through the real client path (coharden -> litellm -> OpenAI SDK -> httpx -> TCP); only the
provider itself is replaced, by :class:`MockLLMServer`.
"""

from __future__ import annotations

import pytest

from ._helpers import KEY_VAR


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_VAR, "sk-test-123")
    return "sk-test-123"


@pytest.fixture
def serve(mock_llm):  # type: ignore[no-untyped-def]
    """Start a mock server with the given rules; every server started is stopped at teardown."""
    return mock_llm
