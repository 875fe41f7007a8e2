"""Mutation Patch Evaluation: mutant pool -> matrix -> laxity -> class."""
