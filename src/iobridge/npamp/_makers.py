"""Positional constructors for frozen, slotted event dataclasses on the per-event paths.

A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__`` and runs
``__post_init__``: about a microsecond per object, and the consumer built three per event
(the association's frame, the session's data event, the client's AG-UI event). A maker
writes the slots directly. It skips ``__post_init__``, so it is only for values the caller
already decoded from a checked header or TLV (u16 fields out of ``struct``); everywhere else
the dataclass is built normally. The result is an ordinary instance (same equality, hash,
repr and immutability).

With the compiled :mod:`iobridge.npamp._speedups` installed a maker is its ``Maker`` (one C
call, the same slot setters); the generated Python function below is the reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

try:
    from iobridge.npamp import _speedups
except ImportError:  # pragma: no cover - the extension is optional; the reference path remains
    _speedups = None  # type: ignore[assignment]

__all__ = ["positional_maker"]

T = TypeVar("T")


def positional_maker(cls: type[T], *, compiled: bool = True) -> Callable[..., T]:
    """A function ``(*field values in declaration order) -> cls`` without validation.

    Args:
        cls: A slotted dataclass.
        compiled: Use the compiled maker when it is installed (``False``: the reference).

    Raises:
        TypeError: ``cls`` is not a slotted dataclass.
    """
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    if compiled and _speedups is not None:
        maker: Callable[..., T] = _speedups.Maker(cls, tuple(cls.__dict__[n] for n in names))
        return maker
    # Generated like dataclasses generates ``__init__``: a loop over the setters costs as
    # much as the frozen ``__init__`` it replaces.
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    args = ", ".join(f"v{i}" for i in range(len(names)))
    body = "".join(f"    s{i}(obj, v{i})\n" for i in range(len(names)))
    for i, name in enumerate(names):
        namespace[f"s{i}"] = cls.__dict__[name].__set__
    exec(f"def make({args}):\n    obj = new(cls)\n{body}    return obj\n", namespace)
    make: Callable[..., T] = namespace["make"]
    make.__name__ = make.__qualname__ = f"make_{cls.__name__}"
    return make
