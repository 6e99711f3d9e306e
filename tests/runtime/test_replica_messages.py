"""What replicas send each other: typed commands and answers, one JSON codec, and errors
that cross as their kind and code and are raised again as they were raised."""

from __future__ import annotations

import pytest

from iobridge.errors import (
    ERROR_KINDS,
    AgentError,
    ConflictError,
    EventsNotRetained,
    GoneError,
    IobridgeError,
    NotFoundError,
    error_kind,
)
from iobridge.protocol.tool_results import ToolResult
from iobridge.runtime.replica_messages import (
    Answer,
    AttachFollower,
    CancelRun,
    DetachFollower,
    MalformedMessage,
    MirrorLog,
    Reply,
    Request,
    SubmitToolResult,
    decode_reply,
    decode_request,
    encode,
)

COMMANDS = [
    CancelRun(owner="alice", run="r1"),
    SubmitToolResult(owner="alice", run="r1", call="c1",
                     result=ToolResult(content='{"a":1}', value={"a": 1}, is_error=True)),
    AttachFollower(owner="alice", run="r1"),
    DetachFollower(owner="alice", run="r1", grace=60.0),
    DetachFollower(owner="alice", run="r1"),
    MirrorLog(owner="alice", run="r1"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_every_command_survives_the_codec_whole(command: object) -> None:
    request = Request(command=command, sender="replica-b", id="7")  # type: ignore[arg-type]
    again = decode_request(encode(request))
    assert again == request and type(again.command) is type(command)


def test_a_tool_result_keeps_its_error_flag_and_value_across() -> None:
    sent = SubmitToolResult(owner="o", run="r", call="c",
                            result=ToolResult(content="no", value="no", is_error=True))
    got = decode_request(encode(Request(command=sent))).command
    assert isinstance(got, SubmitToolResult) and got.result.is_error is True


@pytest.mark.parametrize("data", [
    b"not json",
    b'{"command": {"op": "cancel", "owner": "o"}}',  # no run
    b'{"command": {"op": "reboot", "owner": "o", "run": "r"}}',
    b'{"command": {"op": "cancel", "owner": "o", "run": "r", "extra": 1}}',
    b'{"command": {"op": "detach", "owner": "o", "run": "r", "grace": "soon"}}',
])
def test_a_malformed_request_is_refused(data: bytes) -> None:
    with pytest.raises(MalformedMessage):
        decode_request(data)
    with pytest.raises(MalformedMessage):
        decode_reply(data)


@pytest.mark.parametrize("error", [
    NotFoundError("unknown run", code="RUN_NOT_FOUND"),
    ConflictError("already answered", code="TOOL_RESULT_ALREADY_SUBMITTED"),
    AgentError("no", code="X"),
])
def test_an_error_answer_is_raised_again_as_it_was_raised(error: IobridgeError) -> None:
    answer = decode_reply(encode(Reply(id="1", answer=Answer.failed(error)))).answer
    with pytest.raises(type(error)) as raised:
        answer.unwrap()
    assert type(raised.value) is type(error)
    assert (raised.value.code, raised.value.message) == (error.code, error.message)


def test_every_listed_class_has_one_kind_and_subclasses_cross_as_their_base() -> None:
    assert len(set(ERROR_KINDS.values())) == len(ERROR_KINDS)
    for kind, cls in ERROR_KINDS.items():
        assert error_kind(cls("m")) == kind
    assert ERROR_KINDS[error_kind(EventsNotRetained(3))] is GoneError
    assert error_kind(IobridgeError("m")) == "internal"
    with pytest.raises(IobridgeError) as unknown:
        Answer.failed(IobridgeError("m", code="C")).unwrap()
    assert type(unknown.value) is IobridgeError and unknown.value.status == 500


def test_a_value_answer_unwraps_to_its_value() -> None:
    assert Answer(value=True).unwrap() is True
    assert Answer().unwrap() is None
