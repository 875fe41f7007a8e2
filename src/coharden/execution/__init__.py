"""Execution layer: git workspaces, sandboxed pytest runs, verdicts, and the SQLite result store."""
