from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")
_F = TypeVar("_F")

class Cipher:
    def __init__(self, key: bytes, iv: bytes) -> None: ...
    def seal(
        self, verflags: int, frame_type: int, channel: int, seq: int, plaintext: bytes
    ) -> bytes: ...
    def open(
        self, verflags: int, frame_type: int, channel: int, seq: int, length: int, sealed: bytes
    ) -> bytes | None: ...
    def seal_many(
        self, verflags: int, channel: int, seq: int, frames: list[tuple[int, bytes]], limit: int
    ) -> bytes | None: ...
    def open_frames(
        self,
        buf: bytes | bytearray,
        pos: int,
        channel: int,
        seq: int,
        cap: int,
        max_sealed: int,
        stop: frozenset[int],
        make: Callable[[int, int, bytes, int, bool], _T],
    ) -> tuple[int, int, list[_T]]: ...
    def seal_with(
        self,
        encrypt_into: Callable[..., int],
        verflags: int,
        frame_type: int,
        channel: int,
        seq: int,
        plaintext: bytes,
    ) -> bytes: ...
    def open_with(
        self,
        decrypt: Callable[[bytes, bytes, bytes], bytes],
        verflags: int,
        frame_type: int,
        channel: int,
        seq: int,
        length: int,
        sealed: bytes,
    ) -> bytes: ...

class Maker:
    def __init__(self, cls: type, slots: tuple[object, ...]) -> None: ...
    def __call__(self, *values: object) -> Any: ...

def crc32c(data: bytes, portable: bool = False, /) -> int: ...
def hmac_digest(key: bytes, msg: bytes, digest: str, /) -> bytes: ...

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

def decode_run(
    events: list[Any],
    start: int,
    event_type: type,
    correlation_id: bytes,
    make: Callable[[int, bytes, Any], _T],
    loads: Callable[[bytes], Any],
    refused: type[BaseException],
) -> tuple[int, list[_T], bool]: ...

def stream_frames(
    envelope: bytes,
    last_event_id: int,
    resumable: bool,
    frame_type: _T,
    datas: list[bytes],
    start: int,
) -> list[tuple[_T, bytes]]: ...

def sendable(
    frames: list[tuple[int, bytes]], refused: frozenset[int], max_plaintext: int
) -> int: ...
