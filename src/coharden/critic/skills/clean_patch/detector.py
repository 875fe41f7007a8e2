"""Built-in detector `clean_patch`; the logic lives in :func:`coharden.critic.detectors.clean_patch`."""

from coharden.critic.detectors import clean_patch as detect

__all__ = ["detect"]
