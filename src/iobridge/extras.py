"""Optional parts of the install (``pip install 'iobridge[NAME]'``) and the one-line error a
setting that needs a missing one gets.

The base install is what ``iobridge serve`` needs with its defaults (SQLite, the demo agent,
HTTP). PostgreSQL, N-PAMP and JWT authentication each need an extra; the code that uses one
calls :func:`require_extra` before importing it.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtra", "missing_modules", "require_extra"]

#: Each extra and the modules that tell it is installed.
EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("asyncpg", "greenlet"),
    "npamp": ("cryptography", "google_crc32c"),
    "jwt": ("jwt", "cryptography"),
}


class MissingExtra(ImportError):
    """A setting needs an extra that is not installed; the message names the pip command."""


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported."""
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require_extra(extra: str, needed_by: str) -> None:
    """Raise :class:`MissingExtra` unless ``extra`` is installed.

    Args:
        extra: A key of :data:`EXTRAS`.
        needed_by: What needs it, as the user set it (``"database_url"``, ``"npamp.port"``).
    """
    missing = missing_modules(extra)
    if missing:
        raise MissingExtra(
            f"{needed_by} needs the {extra} extra ({', '.join(missing)} not installed): "
            f"pip install 'iobridge[{extra}]'"
        )
