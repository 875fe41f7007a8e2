"""coharden: measure and harden the rigor of bug reproduction tests.

Layers (each calls only downward): cli -> loop -> agent/critic -> mpe -> mutation -> execution -> llm.
Shared plain data types live in :mod:`coharden.schema`.
"""

__version__ = "0.1.0"
