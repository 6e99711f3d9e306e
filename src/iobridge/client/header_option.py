"""The ``--header NAME:VALUE`` option shared by the client-side commands (``iobridge chat``,
``iobridge check``)."""

from __future__ import annotations

import typer

__all__ = ["parse_headers"]


def parse_headers(values: list[str]) -> dict[str, str]:
    """``--header`` values as a header mapping (names and values stripped).

    Raises:
        typer.BadParameter: a value without ``:`` or with an empty name.
    """
    headers: dict[str, str] = {}
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise typer.BadParameter(f"{value!r} is not 'Name: value'", param_hint="--header")
        headers[name.strip()] = content.strip()
    return headers
