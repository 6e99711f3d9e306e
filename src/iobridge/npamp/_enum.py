"""``Enum`` members hashed by identity, for the state tables looked up on every frame."""

from __future__ import annotations

from enum import Enum

__all__ = ["IdentityEnum"]


class IdentityEnum(Enum):
    """An ``Enum`` whose members hash by identity (C), not by ``hash(name)`` (a Python call).

    Members are singletons compared by identity, so the two hashes agree on what is equal;
    the state machines' transition tables are looked up several times per frame handled.
    """

    __hash__ = object.__hash__
