"""Tests for the N-PAMP error tree and the exception-mapping boundary."""

from __future__ import annotations

import struct

import pytest
from cryptography.exceptions import InvalidTag

from iobridge.npamp import errors
from iobridge.npamp.errors import (
    AeadFailure,
    ErrorCode,
    FrameDecodeError,
    LocalProtocolError,
    NpampError,
    RemoteProtocolError,
    Reply,
    TlvDecodeError,
    map_exceptions,
)


def _error_classes() -> list[type[NpampError]]:
    return [
        obj
        for name in errors.__all__
        if isinstance(obj := getattr(errors, name), type) and issubclass(obj, NpampError)
    ]


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_every_error_has_code_reply_and_side(cls: type[NpampError]) -> None:
    assert isinstance(cls.code, ErrorCode)
    assert isinstance(cls.reply, Reply)
    if cls not in (NpampError,):
        assert issubclass(cls, LocalProtocolError | RemoteProtocolError)
    exc = cls("boom")
    assert exc.message == "boom"
    assert cls().message  # falls back to the docstring


def test_leaf_codes_are_distinct_where_meaningful() -> None:
    leaves = [c for c in _error_classes() if not c.__subclasses__()]
    codes = [c.code for c in leaves]
    # Only deliberate sharing: none among leaves.
    assert len(codes) == len(set(codes)), sorted(codes)


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (struct.error("short"), TlvDecodeError),
        (IndexError("idx"), TlvDecodeError),
        (ValueError("bad"), TlvDecodeError),
        (b"\xff".decode, TlvDecodeError),  # UnicodeDecodeError is a ValueError
        (InvalidTag(), AeadFailure),
    ],
)
def test_map_exceptions_translates(raised: object, expected: type[NpampError]) -> None:
    with pytest.raises(expected) as info, map_exceptions(TlvDecodeError, "tlv"):
        if callable(raised):
            raised()
        else:
            assert isinstance(raised, BaseException)
            raise raised
    assert info.value.__cause__ is not None


def test_map_exceptions_passes_npamp_errors_and_others_untouched() -> None:
    with pytest.raises(FrameDecodeError), map_exceptions(TlvDecodeError):
        raise FrameDecodeError("x")
    with pytest.raises(KeyError), map_exceptions():
        raise KeyError("a bug stays a bug")


def test_package_exports_are_sorted_and_resolvable() -> None:
    import iobridge.npamp as npamp

    assert npamp.__all__ == sorted(npamp.__all__)
    assert all(hasattr(npamp, name) for name in npamp.__all__)


def test_sans_io_cores_import_no_io_modules() -> None:
    import subprocess
    import sys

    code = (
        "import sys, iobridge.npamp, iobridge.npamp.association.connection;"
        "bad = {'asyncio', 'socket', 'ssl'} & set(sys.modules);"
        "print(*sorted(bad)); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
