from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")
_F = TypeVar("_F")

class Maker:
    def __init__(self, cls: type, slots: tuple[object, ...]) -> None: ...
    def __call__(self, *values: object) -> Any: ...

def stream_data(
    frames: list[tuple[int, bytes]],
    start: int,
    envelope: bytes,
    last_event_id: int,
    correlation_id: bytes,
    make: Callable[[bytes, int, bytes, bool], _T],
    events: list[Any],
) -> tuple[int, int, bool]: ...

def pull_header(
    header_type: type[_T], buf: bytes | bytearray | memoryview, offset: int, cap: int
) -> _T | None: ...

def pull_frame(
    frame_type: type[_F], header_type: type[_T], buf: bytes | bytearray | memoryview, cap: int
) -> _F | None: ...

def stream_frames(
    envelope: bytes,
    last_event_id: int,
    resumable: bool,
    frame_type: _T,
    datas: list[bytes],
    start: int,
) -> list[tuple[_T, bytes]]: ...
