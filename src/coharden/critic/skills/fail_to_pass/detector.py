"""Built-in detector `fail_to_pass`; the logic lives in :func:`coharden.critic.detectors.fail_to_pass`."""

from coharden.critic.detectors import fail_to_pass as detect

__all__ = ["detect"]
