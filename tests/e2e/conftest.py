"""Fixtures of the e2e tests (the machinery is in ``harness.py``)."""

from harness import server

__all__ = ["server"]
