"""What replicas send each other about runs, and the one codec they cross in (JSON).

A request for a run another replica drives (a frontend tool's result, a cancel, a follower
asking for room, attaching or detaching, a follower asking for the log's mirror) goes to
that replica as a :class:`Request` holding one :data:`RunCommand`; the owner acts on its run
(``Runtime.act``) and, when asked to, answers with a :class:`Reply` holding an
:class:`Answer`: a value, or an error as its kind and code (``errors.ERROR_KINDS``), raised
again on the asking side as it was raised on the owner.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from iobridge.errors import IobridgeError, error_kind, error_of_kind
from iobridge.protocol.tool_results import ToolResult

__all__ = [
    "Answer",
    "AttachFollower",
    "CancelRun",
    "DetachFollower",
    "Failure",
    "MalformedMessage",
    "MirrorLog",
    "Reply",
    "Request",
    "RoomForFollower",
    "RunCommand",
    "StopRun",
    "SubmitToolResult",
    "TakeOver",
    "decode_reply",
    "decode_request",
    "encode",
]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _ForRun(_Message):
    #: The run's key on its owner: the principal that started it, and its runId.
    owner: str
    run: str
    #: The resources the asking caller may act for (``None``: any); a run of another
    #: resource is answered as missing.
    resources: list[str] | None = None


class CancelRun(_ForRun):
    """Stop the run; answered with whether it was still running."""

    op: Literal["cancel"] = "cancel"


class StopRun(_ForRun):
    """A newer run on the thread interrupts this one (``rollback``: and removes what it
    stored); the run stops at once, or as soon as it began if it is still starting."""

    op: Literal["stop"] = "stop"
    rollback: bool = False


class SubmitToolResult(_ForRun):
    """Deliver a frontend tool's result to the run."""

    op: Literal["result"] = "result"
    call: str
    result: ToolResult


class AttachFollower(_ForRun):
    """A client follows the run from another replica (its log is mirrored from now on)."""

    op: Literal["attach"] = "attach"


class RoomForFollower(_ForRun):
    """May one more client follow the run? Answered with an error when it has
    ``max_followers_per_run`` followers already (the owner counts them, wherever they are)."""

    op: Literal["room"] = "room"


class DetachFollower(_ForRun):
    """That follower went away; ``grace`` overrides the detach grace (N-PAMP's resume)."""

    op: Literal["detach"] = "detach"
    grace: float | None = None


class MirrorLog(_ForRun):
    """A follower found no mirrored log: mirror it (its ``attach`` may have been lost)."""

    op: Literal["mirror"] = "mirror"


class TakeOver(_ForRun):
    """A durable run a draining replica let go at a durable point: continue it here (from
    its checkpoint, counted against ``caller``; exactly one replica wins it)."""

    op: Literal["take"] = "take"
    caller: str | None = None


RunCommand = Annotated[
    CancelRun | StopRun | SubmitToolResult | AttachFollower | DetachFollower | MirrorLog
    | RoomForFollower | TakeOver,
    Field(discriminator="op"),
]


class Failure(_Message):
    """An error as it crosses: its kind (the class), stable code and safe message."""

    kind: str
    code: str
    message: str


class Answer(_Message):
    """The owner's answer to a command: a value, or the error it raised."""

    value: bool | None = None
    error: Failure | None = None

    @classmethod
    def failed(cls, exc: IobridgeError) -> Answer:
        return cls(error=Failure(kind=error_kind(exc), code=exc.code, message=exc.message))

    def unwrap(self) -> bool | None:
        """The value, or the owner's error raised again.

        Raises:
            IobridgeError: of the class the owner raised (``errors.ERROR_KINDS``).
        """
        if self.error is not None:
            raise error_of_kind(self.error.kind, self.error.message, self.error.code)
        return self.value


class Request(_Message):
    """A command on the owner's channel; ``sender`` and ``id`` when an answer is wanted."""

    command: RunCommand
    #: The replica to answer (its answer channel), and the id its answer carries.
    sender: str | None = None
    id: str | None = None


class Reply(_Message):
    """An answer on the asking replica's channel."""

    id: str
    answer: Answer


class MalformedMessage(ValueError):
    """A message no replica of this version sends."""


def encode(message: Request | Reply) -> bytes:
    """The message as JSON octets."""
    return message.model_dump_json().encode()


def decode_request(data: bytes | str) -> Request:
    """Raises: MalformedMessage."""
    try:
        return Request.model_validate_json(data)
    except ValidationError as exc:
        raise MalformedMessage(str(exc)) from None


def decode_reply(data: bytes | str) -> Reply:
    """Raises: MalformedMessage."""
    try:
        return Reply.model_validate_json(data)
    except ValidationError as exc:
        raise MalformedMessage(str(exc)) from None
