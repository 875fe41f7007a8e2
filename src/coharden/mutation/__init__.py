"""Mutant operators: mechanical (diff-driven, no LLM) and LLM-prompted, plus the admission filter."""
