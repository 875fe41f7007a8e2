"""The agent's event stream as plain JSON dicts: what a critic's ``evaluate`` and a detector's ``detect`` read.

Every event has ``kind`` and ``source`` (as in the OpenHands SDK: ``agent``, ``user``, ``environment``; plus
``harness`` for what coharden itself records). Kinds and their fields:

``message``      ``role`` (system / user / assistant), ``content``
``action``       ``command``: a shell command the agent ran (or the external agent's command line)
``observation``  ``output``, ``returncode``: what that command printed and returned
``finish``       ``exit_status``, ``submission``: the agent said it is done (or stopped for another reason)
``critic``       ``score``, ``message``, ``metadata``, ``accepted``, ``followup`` (None when none is sent),
                 ``iteration`` (follow-ups sent so far, including the one this evaluation triggered)
``error``        ``error``, ``exit_status``: a failure that stopped the run (truncated reply, budget, ...)
``start``/``end`` trajectory header and footer

Unknown keys are allowed everywhere; detectors should read with ``.get``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

#: One event: a JSON-serializable dict with at least ``kind`` and ``source``.
Event = dict[str, Any]


def make_event(kind: str, source: str, **fields: Any) -> Event:
    return {"kind": kind, "source": source, "timestamp": time.time(), **fields}


def message(role: str, content: str, **fields: Any) -> Event:
    source = {"assistant": "agent", "system": "harness"}.get(role, "user")
    return make_event("message", source, role=role, content=content, **fields)


def action(command: str, **fields: Any) -> Event:
    return make_event("action", "agent", command=command, **fields)


def observation(output: str, returncode: int | None, **fields: Any) -> Event:
    return make_event("observation", "environment", output=output, returncode=returncode, **fields)


def commands(events: Iterable[Event]) -> list[str]:
    """The shell commands the agent ran, in order."""
    return [str(e.get("command", "")) for e in events if e.get("kind") == "action"]
