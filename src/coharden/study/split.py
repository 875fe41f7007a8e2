"""The development / held-out split of the study instances (docs/laxity_estimate.md).

The estimator, its confidence, the cap of sequential MPE and tau are chosen on the development split; the
validity figure is computed once on the held-out split. The rule is a pure function of the instance id, so it
is the same on every machine and for every repository, it splits every repository (the hash ignores the
repository), and no result can move an instance from one side to the other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import get_args

from coharden.config import Split

SPLITS: tuple[Split, ...] = get_args(Split)
SALT = "coharden-split-v1"


def split_of(instance_id: str) -> str:
    """``"dev"`` or ``"heldout"``: the parity of the first 8 hex digits of sha256(SALT + ":" + instance id)."""
    digest = hashlib.sha256(f"{SALT}:{instance_id}".encode()).hexdigest()
    return "dev" if int(digest[:8], 16) % 2 == 0 else "heldout"


def split_rule() -> str:
    """The rule, as the report states it."""
    return f'dev when int(sha256("{SALT}:" + instance_id)[:8], 16) is even, else heldout'


def in_split(instance_id: str, split: str) -> bool:
    """Whether ``instance_id`` belongs to ``split`` (``all``: every instance)."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} (known: {', '.join(SPLITS)})")
    return split == "all" or split_of(instance_id) == split


def select(ids: Iterable[str], split: str) -> list[str]:
    return [i for i in ids if in_split(i, split)]
