"""Positional constructors for frozen, slotted event dataclasses on the per-event paths.

A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__``: about a
microsecond per object, and a consumer builds two per AG-UI event (the session's data event,
the client's AG-UI event). The compiled :mod:`iobridge.npamp._speedups` ``Maker`` writes the
slots in one C call: 15 % of the instructions per event of a whole run over N-PAMP and 19 % of
a replay (docs/npamp.md, Performance). It skips ``__post_init__``, so it is only for values
the caller already decoded from a checked header or TLV; the result is an ordinary instance
(same equality, hash, repr and immutability). Without the extension a maker is
:func:`reference_maker`: the class's own constructor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

try:
    from iobridge.npamp import _speedups
except ImportError:  # pragma: no cover - the extension is optional; the reference path remains
    _speedups = None  # type: ignore[assignment]

__all__ = ["positional_maker", "reference_maker"]

T = TypeVar("T")


def _field_names(cls: type) -> list[str]:
    if "__slots__" not in cls.__dict__ or not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    return [f.name for f in dataclasses.fields(cls)]


def reference_maker(cls: type[T]) -> Callable[..., T]:
    """``(*field values in declaration order) -> cls(**fields)``: the pure-Python maker.

    Raises:
        TypeError: ``cls`` is not a slotted dataclass.
    """
    names = _field_names(cls)

    def make(*values: Any) -> T:
        if len(values) != len(names):
            raise TypeError(f"{cls.__name__} maker takes exactly {len(names)} positional arguments")
        return cls(**dict(zip(names, values, strict=True)))

    make.__name__ = make.__qualname__ = f"make_{cls.__name__}"
    return make


def positional_maker(cls: type[T], *, compiled: bool = True) -> Callable[..., T]:
    """A function ``(*field values in declaration order) -> cls`` without validation.

    Args:
        cls: A slotted dataclass.
        compiled: Use the compiled maker when it is installed (``False``: the reference).

    Raises:
        TypeError: ``cls`` is not a slotted dataclass.
    """
    names = _field_names(cls)
    if compiled and _speedups is not None:
        maker: Callable[..., T] = _speedups.Maker(cls, tuple(cls.__dict__[n] for n in names))
        return maker
    return reference_maker(cls)
