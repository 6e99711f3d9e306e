from collections.abc import Callable
from typing import TypeVar

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
        self, verflags: int, channel: int, seq: int, frames: list[tuple[int, bytes]]
    ) -> bytes: ...
    def open_frames(
        self,
        buf: bytes | bytearray,
        pos: int,
        channel: int,
        seq: int,
        cap: int,
        max_sealed: int,
        stop: frozenset[int],
    ) -> tuple[int, int, list[tuple[int, int, bool, bytes]]]: ...
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

def crc32c(data: bytes) -> int: ...

def pull_header(
    header_type: type[_T], buf: bytes | bytearray | memoryview, offset: int, cap: int
) -> _T | None: ...

def pull_frame(
    frame_type: type[_F], header_type: type[_T], buf: bytes | bytearray | memoryview, cap: int
) -> _F | None: ...
