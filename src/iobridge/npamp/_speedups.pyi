from typing import TypeVar

_T = TypeVar("_T")

class Cipher:
    def __init__(self, key: bytes, iv: bytes) -> None: ...
    def seal(
        self, verflags: int, frame_type: int, channel: int, seq: int, plaintext: bytes
    ) -> bytes: ...
    def open(
        self, verflags: int, frame_type: int, channel: int, seq: int, length: int, sealed: bytes
    ) -> bytes | None: ...

def crc32c(data: bytes) -> int: ...

def pull_header(
    header_type: type[_T], buf: bytes | bytearray | memoryview, offset: int, cap: int
) -> _T | None: ...
