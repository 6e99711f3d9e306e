"""Conformance tooling, outside the N-PAMP core.

:mod:`iobridge.conformance.npamp_adapter` answers the public N-PAMP conformance runner over
stdio (``python -m iobridge.conformance.npamp_adapter``). It dispatches into the core, and holds
the corpus-only readings the wire never uses (the ``len(plaintext)`` AAD of ``frame.seal``).
"""

__all__: list[str] = []
