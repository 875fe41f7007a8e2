"""Built-in detector `structural_validity`; the logic lives in :func:`coharden.critic.detectors.structural_validity`."""

from coharden.critic.detectors import structural_validity as detect

__all__ = ["detect"]
