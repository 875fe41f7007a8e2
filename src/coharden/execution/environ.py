"""The environment an untrusted process gets: an allow-list of the host's variables, never its secrets.

Test processes and agent commands run code that is not ours. They used to inherit coharden's whole
environment, so a model or cloud key in it reached the test (and from there its output, the stored verdict and,
through the critic, the model). They now get only what a test runner needs to behave as on a developer's
machine (:data:`ALLOWED`, :data:`ALLOWED_PREFIXES`: the search path, locale, time zone, terminal and user names),
plus the variables the caller sets itself (coharden's runner variables, a spec environment's ``test_env``).

A user who needs a variable inside the sandbox names it (``--pass-env NAME``, ``pass_env`` in the config). That
is the only way a name that looks secret (:func:`looks_secret`) gets through: the allow-list never admits one, so
a future addition to it cannot leak a key by accident.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

#: Host variables every untrusted process gets (where set). ``HOME`` and ``TMPDIR`` are replaced by private
#: directories inside a bwrap sandbox; the weaker levels keep the host's.
ALLOWED = frozenset({
    "PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONIOENCODING",
    "PYTHONUTF8", "SOURCE_DATE_EPOCH",
})
ALLOWED_PREFIXES = ("LC_",)

#: Parts of a name that mark a credential, or a provider whose variables carry one (model APIs, clouds, package
#: indexes, code hosts). Matched as whole ``_``-separated words, so ``KEYBOARD`` or ``MONKEY`` are no keys.
_SECRET_WORDS = re.compile(
    r"(^|_)(KEY|KEYS|TOKEN|TOKENS|SECRET|SECRETS|PASSWORD|PASSWD|PASS|PWD|CREDENTIAL|CREDENTIALS|AUTH|COOKIE|"
    r"SESSION|PRIVATE|SIGNATURE|CERT)(_|$)"
    r"|^(AWS|AZURE|GOOGLE|GCP|GCLOUD|CLOUDSDK|OPENAI|ANTHROPIC|LITELLM|HF|HUGGINGFACE|HUGGING_FACE|GEMINI|"
    r"MISTRAL|COHERE|GROQ|TOGETHER|DEEPSEEK|OPENROUTER|XAI|VERTEX|BEDROCK|GITHUB|GH|GITLAB|DOCKER|NPM|PYPI|"
    r"TWINE|PIP|UV|SSH|GPG|DATABASE|DB|REDIS|POSTGRES|PG|MYSQL|SENTRY|SLACK|WANDB|COHARDEN_LLM|MSWEA)(_|$)",
    re.IGNORECASE,
)


def looks_secret(name: str) -> bool:
    """Whether a variable's name marks a credential or a provider's setting (``OPENAI_API_KEY``,
    ``AWS_PROFILE``, ``GITHUB_TOKEN``, ``SSH_AUTH_SOCK``, ``DATABASE_URL``...)."""
    return bool(_SECRET_WORDS.search(name))


def allowed(name: str) -> bool:
    """Whether the host's ``name`` reaches an untrusted process without being asked for."""
    return (name in ALLOWED or name.startswith(ALLOWED_PREFIXES)) and not looks_secret(name)


def untrusted_environment(pass_env: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The host's variables an untrusted process gets: the allow-listed ones, and those named in ``pass_env``
    (the user's explicit choice, whatever the name) where set."""
    source = os.environ if environ is None else environ
    named = set(pass_env)
    return {k: v for k, v in source.items() if allowed(k) or k in named}

