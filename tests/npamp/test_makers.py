"""The per-event paths' positional makers build the objects the constructors do."""

from __future__ import annotations

import dataclasses

import pytest

from iobridge.npamp._makers import positional_maker
from iobridge.npamp.association.events import FrameReceived
from iobridge.npamp.bridge.events import StreamDataReceived
from iobridge.npamp_server.client import AgUiEvent


def test_makers_give_equal_and_equally_frozen_objects() -> None:
    built = FrameReceived(channel=13, frame_type=0x31, payload=b"p", seq=7, urgent=True)
    frame = positional_maker(FrameReceived)(13, 0x31, b"p", 7, True)
    assert frame == built and hash(frame) == hash(built) and repr(frame) == repr(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        frame.seq = 8  # type: ignore[misc]
    data = positional_maker(StreamDataReceived)(b"c1", 3, b"{}", False)
    assert data == StreamDataReceived(correlation_id=b"c1", event_id=3, data=b"{}", resumable=False)
    event = positional_maker(AgUiEvent)(3, b'{"type":"X"}', {"type": "X"})
    assert event == AgUiEvent(event_id=3, raw=b'{"type":"X"}', data={"type": "X"})
    assert event.type == "X"


def test_makers_take_every_field_and_only_slotted_dataclasses() -> None:
    with pytest.raises(TypeError):
        positional_maker(FrameReceived)(13, 0x31)

    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int

    with pytest.raises(TypeError, match="not a slotted dataclass"):
        positional_maker(Plain)
