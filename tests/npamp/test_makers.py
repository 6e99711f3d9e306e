"""The per-event paths' positional makers build the objects the constructors do."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from iobridge.npamp import _makers
from iobridge.npamp._makers import positional_maker
from iobridge.npamp.association.events import FrameReceived
from iobridge.npamp.bridge.events import StreamDataReceived
from iobridge.npamp_server.client import AgUiEvent

#: Both implementations: the compiled Maker (when installed) and the reference (the constructor).
BOTH = pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "reference"])


@BOTH
def test_makers_give_equal_and_equally_frozen_objects(compiled: bool) -> None:
    built = FrameReceived(channel=13, frame_type=0x31, payload=b"p", seq=7, urgent=True)
    frame = positional_maker(FrameReceived, compiled=compiled)(13, 0x31, b"p", 7, True)
    assert type(frame) is FrameReceived
    assert frame == built and hash(frame) == hash(built) and repr(frame) == repr(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        frame.seq = 8  # type: ignore[misc]
    data = positional_maker(StreamDataReceived, compiled=compiled)(b"c1", 3, b"{}", False)
    assert data == StreamDataReceived(correlation_id=b"c1", event_id=3, data=b"{}", resumable=False)
    event = positional_maker(AgUiEvent, compiled=compiled)(3, b'{"type":"X"}', {"type": "X"})
    assert event == AgUiEvent(event_id=3, raw=b'{"type":"X"}', data={"type": "X"})
    assert event.type == "X"


@BOTH
def test_makers_take_every_field_and_only_slotted_dataclasses(compiled: bool) -> None:
    make = positional_maker(FrameReceived, compiled=compiled)
    with pytest.raises(TypeError):
        make(13, 0x31)
    with pytest.raises(TypeError):
        make(13, 0x31, b"p", 7, True, "extra")
    with pytest.raises(TypeError):
        make(13, 0x31, b"p", 7, urgent=True)

    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int

    with pytest.raises(TypeError, match="not a slotted dataclass"):
        positional_maker(Plain, compiled=compiled)


def test_the_compiled_maker_is_used_when_installed() -> None:
    assert _makers._speedups is not None, "the C extension is built by the dev install"
    assert isinstance(positional_maker(FrameReceived), _makers._speedups.Maker)
    assert not isinstance(positional_maker(FrameReceived, compiled=False), _makers._speedups.Maker)


def test_the_compiled_maker_stores_through_any_slot_and_holds_one_reference_each() -> None:
    """Plain slots are written in place, more than eight go through their descriptors; both
    give the constructor's object, and each value is referenced once, however built."""
    speedups = _makers._speedups
    assert speedups is not None
    fields = [(f"f{i}", object) for i in range(9)]
    wide = dataclasses.make_dataclass("Wide", fields, frozen=True, slots=True)
    values = [object() for _ in range(9)]
    for cls, count in ((wide, 9), (FrameReceived, 5)):
        before = [sys.getrefcount(v) for v in values[:count]]
        built = positional_maker(cls)(*values[:count])
        assert [getattr(built, f.name) for f in dataclasses.fields(cls)] == values[:count]
        assert [sys.getrefcount(v) for v in values[:count]] == [n + 1 for n in before]
        del built
        assert [sys.getrefcount(v) for v in values[:count]] == before
    slot = FrameReceived.__dict__["payload"]  # the same slot twice: the second value stays
    first, second = object(), object()
    twice = speedups.Maker(FrameReceived, (slot, slot))(first, second)
    assert twice.payload is second and sys.getrefcount(first) == 2
    del twice


def test_a_failed_reinit_leaves_the_compiled_maker_as_it_was() -> None:
    """``__init__`` again with a bad slot list (its last entry foreign) changes nothing."""
    speedups = _makers._speedups
    assert speedups is not None
    names = [f.name for f in dataclasses.fields(FrameReceived)]
    make = speedups.Maker(FrameReceived, tuple(FrameReceived.__dict__[n] for n in names))
    bad = (FrameReceived.__dict__["payload"], StreamDataReceived.__dict__["data"])
    with pytest.raises(TypeError, match="slot descriptors"):
        make.__init__(FrameReceived, bad)
    built = FrameReceived(channel=13, frame_type=0x31, payload=b"p", seq=7, urgent=True)
    assert make(13, 0x31, b"p", 7, True) == built


def test_the_compiled_maker_refuses_what_it_cannot_build() -> None:
    speedups = _makers._speedups
    assert speedups is not None
    with pytest.raises(TypeError, match="slot descriptors"):
        speedups.Maker(FrameReceived, (FrameReceived.__dict__["channel"], "payload"))
    with pytest.raises(TypeError, match="slot descriptors"):  # another class's slot
        speedups.Maker(FrameReceived, (StreamDataReceived.__dict__["data"],))

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithNew:
        x: int

        def __new__(cls, x: int) -> WithNew:
            return super().__new__(cls)

    with pytest.raises(TypeError, match="__new__"):
        speedups.Maker(WithNew, (WithNew.__dict__["x"],))
    with pytest.raises(TypeError, match="uninitialised"):
        speedups.Maker.__new__(speedups.Maker)()
