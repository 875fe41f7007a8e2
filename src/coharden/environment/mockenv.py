"""Mock model services: the provider variables that send an agent repository's own model calls to the local
mock server (:class:`coharden.llm.MockLLMServer`), so its code runs without a network and without edits.

The mock speaks the OpenAI chat-completions API. Clients of that API (the ``openai`` SDK, litellm's
``openai/`` and ``hosted_vllm/`` models, most OpenAI-compatible wrappers) get scripted replies. Other
providers' variables (Anthropic, Azure, Ollama, ...) point at the same server too: their requests reach the
mock and fail loudly there (HTTP 404 naming the path) instead of reaching the internet. API keys are dummy
values, so a client that insists on a key constructs, and a real key in the caller's environment never reaches
test code.

Reaching an in-process server needs the host's loopback, so test processes that use the mock cannot run in
a fresh network namespace; :func:`loopback_only_settings` switches to coharden's Python-level guard instead,
which refuses every connection except to loopback addresses.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.execution import sandbox
from coharden.llm.mockrules import Rule
from coharden.llm.mockserver import MockLLMServer

MOCK_KEY = "sk-coharden-mock"
#: Reply of the default rule: every request gets it (a test can also script its own rules).
DEFAULT_REPLY = "coharden mock reply"

#: name -> "v1" (the OpenAI-style base URL, ending in /v1), "root" (the server root), or a fixed value.
PROVIDER_VARIABLES: dict[str, str] = {
    "OPENAI_BASE_URL": "v1",
    "OPENAI_API_BASE": "v1",
    "OPENAI_API_KEY": MOCK_KEY,
    "ANTHROPIC_BASE_URL": "root",
    "ANTHROPIC_API_BASE": "root",
    "ANTHROPIC_API_KEY": MOCK_KEY,
    "AZURE_OPENAI_ENDPOINT": "root",
    "AZURE_OPENAI_API_KEY": MOCK_KEY,
    "AZURE_API_BASE": "root",
    "AZURE_API_KEY": MOCK_KEY,
    "OPENAI_API_VERSION": "2024-06-01",
    "GROQ_BASE_URL": "root",
    "GROQ_API_KEY": MOCK_KEY,
    "MISTRAL_API_BASE": "v1",
    "MISTRAL_API_KEY": MOCK_KEY,
    "DEEPSEEK_API_BASE": "v1",
    "DEEPSEEK_API_KEY": MOCK_KEY,
    "OPENROUTER_API_BASE": "v1",
    "OPENROUTER_API_KEY": MOCK_KEY,
    "TOGETHER_API_BASE": "v1",
    "TOGETHERAI_API_KEY": MOCK_KEY,
    "HOSTED_VLLM_API_BASE": "v1",
    "OLLAMA_HOST": "root",
    "OLLAMA_API_BASE": "root",
    "COHARDEN_MOCK_LLM_URL": "v1",
    # no downloads at import time / no hub lookups from libraries that would try
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def mock_environment(base_url: str) -> dict[str, str]:
    """The provider variables for a mock server at ``base_url`` (``http://host:port/v1``)."""
    v1 = base_url.rstrip("/")
    root = v1.removesuffix("/v1")
    values = {"v1": v1, "root": root}
    return {name: values.get(kind, kind) for name, kind in PROVIDER_VARIABLES.items()}


def loopback_only_settings(settings: Settings) -> Settings:
    """Settings whose test processes can reach the host's loopback (the mock) and nothing else.

    A network namespace would hide the in-process mock server, so the namespace is off and coharden's
    Python-level guard (a ``sitecustomize`` first on PYTHONPATH; see :mod:`coharden.execution.sandbox`) refuses
    connections to non-loopback addresses. The guard does not stop native code; that is the cost of reaching
    an in-process mock. Settings that already allow the network are returned unchanged.
    """
    return settings if settings.sandbox.network else settings.with_overrides(network=True)


def guard_environment() -> dict[str, str]:
    """PYTHONPATH with the loopback-only guard first (see :func:`loopback_only_settings`)."""
    guard = sandbox.network_guard_dir()  # the sandbox's own guard, so there is one definition of "offline"
    current = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(p for p in (guard, current) if p)}


@contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block, then restore it exactly.

    Test processes get the variables of ``os.environ`` that the settings' ``pass_env`` names (see
    :func:`coharden.execution.pytest_runner.test_environment`), so this with those names is how variables reach
    runs made through :class:`~coharden.execution.executor.InstanceExecutor`.
    Not thread-safe: use it around single-threaded execution only.
    """
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


class MockServices:
    """A running mock server and the environment that points clients at it.

    >>> with MockServices() as mock:            # doctest: +SKIP
    ...     run_pytest(root, ids, settings, ProcessOptions(python=python, env=mock.env))
    """

    def __init__(self, rules: Sequence[Rule | Mapping[str, Any]] | str | Path | None = None) -> None:
        self.server = MockLLMServer(rules if rules is not None else [{"reply": DEFAULT_REPLY}])
        self.env: dict[str, str] = {}

    def __enter__(self) -> MockServices:
        base_url = self.server.start()
        self.env = {**mock_environment(base_url), **guard_environment()}
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self.env = {}
