"""The CoHarden loop (test first, then co-generate test and fix, harden the test against mutants of the
current fix) and its baselines, in one framework with the same agent and model."""
