"""Built-in detector `ran_the_test`; the logic lives in :func:`coharden.critic.detectors.ran_the_test`."""

from coharden.critic.detectors import ran_the_test as detect

__all__ = ["detect"]
