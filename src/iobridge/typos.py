"""'Did you mean ...?' for a misspelt setting, key or variable name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean X?)"`` for the known name closest to ``name``, or ``""`` when none
    is close enough to be a typo of it."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.7)
    return f" (did you mean {close[0]}?)" if close else ""
