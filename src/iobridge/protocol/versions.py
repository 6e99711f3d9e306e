"""The AG-UI protocol versions iobridge speaks, and what it does with a client's declaration.

AG-UI 1.0 negotiates in-band: the client declares the version it speaks on
``RunAgentInput.protocolVersion``, the server its own on ``RUN_STARTED.protocolVersion``
(always its own, never an echo). The rules (AG-UI spec, "Versioning and Compatibility"):

- a declaration of a **major line we do not implement** may be refused before RUN_STARTED:
  iobridge answers 400 ``UNSUPPORTED_PROTOCOL_VERSION`` naming the versions it speaks;
- a **newer minor of a line we implement** must be served (additions are safe): served, and
  logged as a warning;
- a declaration that is **not** ``MAJOR.MINOR`` is handled like a newer one: served, warned;
- **no** declaration is a client from before versions existed: served quietly.

A ``protocolVersion`` that is not a string is a malformed known field: 400.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ag_ui.core import PROTOCOL_VERSION as _AG_UI_VERSION

from iobridge.errors import InputError

__all__ = [
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "check_protocol_version",
]

logger = logging.getLogger(__name__)

#: The version iobridge declares on every RUN_STARTED (that of the ``ag_ui`` models it emits).
PROTOCOL_VERSION: str = _AG_UI_VERSION
#: The versions a client may declare, listed by ``GET /agents`` and in refusals.
SUPPORTED_VERSIONS: tuple[str, ...] = (PROTOCOL_VERSION,)
#: Code of the 400 answering a declaration of another major line.
UNSUPPORTED_PROTOCOL_VERSION = "UNSUPPORTED_PROTOCOL_VERSION"

_VERSION = re.compile(r"^(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})$")
#: Most characters of a declaration echoed into a refusal or a log line.
_ECHO = 32


def _parse(version: str) -> tuple[int, int] | None:
    match = _VERSION.match(version)
    return (int(match[1]), int(match[2])) if match else None


_SPOKEN = [v for v in map(_parse, SUPPORTED_VERSIONS) if v is not None]
_MAJORS = frozenset(major for major, _ in _SPOKEN)


def check_protocol_version(value: Any) -> str | None:
    """The client's declaration if iobridge serves it (``None`` when absent).

    Raises:
        InputError: ``UNSUPPORTED_PROTOCOL_VERSION``, a major line iobridge does not speak
            (``details.supported`` lists the versions it does); ``INVALID_REQUEST``, not a
            string.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(
            "protocolVersion must be a string such as \"1.0\"",
            details=[{"loc": ["protocolVersion"], "message": "must be a string"}],
        )
    parsed = _parse(value)
    spoken = ", ".join(SUPPORTED_VERSIONS)
    if parsed is None:
        logger.warning("protocolVersion %r is not MAJOR.MINOR; serving it as %s",
                       value[:_ECHO], PROTOCOL_VERSION)
        return value
    if parsed[0] not in _MAJORS:
        raise InputError(
            f"protocolVersion {value[:_ECHO]!r} is not spoken here; this server speaks "
            f"AG-UI {spoken}",
            code=UNSUPPORTED_PROTOCOL_VERSION,
            details={"supported": list(SUPPORTED_VERSIONS)},
        )
    if all(parsed > version for version in _SPOKEN if version[0] == parsed[0]):
        logger.warning("protocolVersion %s is newer than this server's %s; serving it",
                       value, spoken)
    return value
