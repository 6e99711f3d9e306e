"""Transport-neutral errors of iobridge.

Raised before a run's stream starts, they become an HTTP status with the JSON error envelope
``{"error": {"code", "message", "details"?}}`` (or a BRIDGE_ERROR over N-PAMP). Raised by an
agent while a run streams, ``AgentError`` becomes ``RUN_ERROR {message, code}``; any other
exception inside a run becomes a generic ``RUN_ERROR`` with no internals.

    IobridgeError
    ├── InputError          400  bad body, bad id, bad forwardedProps
    ├── AuthenticationError 401  missing or bad credentials
    ├── NotFoundError       404  unknown or not-yours (ownership never leaks existence)
    ├── ConflictError       409  run already running, thread busy, result already posted
    ├── GoneError           410  what was asked for is no longer kept
    │   └── EventsNotRetained      events after a follower's cursor are no longer retained
    ├── PayloadTooLarge     413  body over the configured limit
    ├── TooManyRequests     429  over an admission limit (``retry_after`` seconds)
    ├── ServiceUnavailable  503  shutting down, or the agent cannot run (``AGENT_UNAVAILABLE``)
    └── AgentError          ---  in-stream failure with a stable code and a safe message
"""

from __future__ import annotations

from typing import Any


class IobridgeError(Exception):
    """Base error: carries a stable ``code``, a safe ``message`` and optional ``details``."""

    status: int = 500
    default_code: str = "INTERNAL_ERROR"

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details = details

    def to_body(self) -> dict[str, Any]:
        """The JSON error envelope, without ``details`` when there are none."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}


class InputError(IobridgeError):
    """The request is malformed or names something invalid."""

    status = 400
    default_code = "INVALID_REQUEST"


class AuthenticationError(IobridgeError):
    """Credentials are missing or wrong.

    ``message`` is what the client sees (generic: it must not tell a prober which check
    failed); ``reason`` (also ``str(exc)``) says which check failed, for logs and tests.
    """

    status = 401
    default_code = "UNAUTHORIZED"

    def __init__(self, message: str, *, reason: str | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.reason = reason or message

    def __str__(self) -> str:
        return self.reason


class NotFoundError(IobridgeError):
    """The resource does not exist or belongs to someone else."""

    status = 404
    default_code = "NOT_FOUND"


class ConflictError(IobridgeError):
    """The request conflicts with the current state (busy thread, duplicate run, ...)."""

    status = 409
    default_code = "CONFLICT"


class GoneError(IobridgeError):
    """What was asked for existed but is no longer kept."""

    status = 410
    default_code = "GONE"


class TooManyRequests(IobridgeError):
    """An admission limit is reached; the client may retry after ``retry_after`` seconds."""

    status = 429
    default_code = "TOO_MANY_REQUESTS"

    def __init__(self, message: str, *, code: str | None = None, retry_after: float = 1.0) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class ServiceUnavailable(IobridgeError):
    """The server cannot take the request now: shutting down (retry after ``retry_after``
    seconds), or the agent cannot run (a configuration problem: ``retry_after`` is ``None``
    and no ``Retry-After`` is sent)."""

    status = 503
    default_code = "UNAVAILABLE"

    def __init__(
        self, message: str, *, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class EventsNotRetained(GoneError):
    """A follower asked for events the run's replay window (``max_run_log_bytes``) no longer
    holds: a resume answers 410, a stream already started ends without its terminal event."""

    default_code = "EVENTS_NOT_RETAINED"

    def __init__(self, first_retained: int) -> None:
        super().__init__(f"events before {first_retained} are no longer retained")
        #: The sequence number of the oldest event still retained.
        self.first_retained = first_retained


class PayloadTooLarge(IobridgeError):
    """The request body exceeds the configured limit."""

    status = 413
    default_code = "PAYLOAD_TOO_LARGE"


class AgentError(IobridgeError):
    """An agent failure to report in-stream as RUN_ERROR with this code and message."""

    default_code = "AGENT_ERROR"


#: Each error class by the kind it crosses process boundaries as (a replica's answer to
#: another): the one table both ends read, so an error is raised again as it was raised.
ERROR_KINDS: dict[str, type[IobridgeError]] = {
    "input": InputError,
    "authentication": AuthenticationError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "gone": GoneError,
    "too_large": PayloadTooLarge,
    "too_many": TooManyRequests,
    "unavailable": ServiceUnavailable,
    "agent": AgentError,
}
_KIND_OF = {cls: kind for kind, cls in ERROR_KINDS.items()}


def error_kind(exc: IobridgeError) -> str:
    """The kind ``exc`` crosses as: its class's, or its nearest listed base's."""
    for cls in type(exc).__mro__:
        kind = _KIND_OF.get(cls)
        if kind is not None:
            return kind
    return "internal"


def error_of_kind(kind: str, message: str, code: str) -> IobridgeError:
    """The error an answer of ``kind`` stands for (an unknown kind: a plain 500)."""
    return ERROR_KINDS.get(kind, IobridgeError)(message, code=code)
