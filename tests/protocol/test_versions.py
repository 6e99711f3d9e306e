"""AG-UI 1.0 versioning: what iobridge declares and what it does with a client's declaration."""

from __future__ import annotations

import logging

import pytest
from ag_ui.core import PROTOCOL_VERSION, RunStartedEvent

from iobridge.errors import InputError
from iobridge.protocol import events as ev
from iobridge.protocol.guard import LifecycleGuard
from iobridge.protocol.run_input import parse_run_input
from iobridge.protocol.versions import (
    SUPPORTED_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
    check_protocol_version,
)


def body(**extra: object) -> dict[str, object]:
    return {"threadId": "t", "runId": "r", "messages": [], **extra}


def test_run_started_declares_the_version_of_the_ag_ui_models() -> None:
    for started in (LifecycleGuard("t", "r").start()[0], ev.run_started("t", "r", "p")):
        assert started["protocolVersion"] == PROTOCOL_VERSION == "1.0"
        parsed = RunStartedEvent.model_validate(started)
        assert parsed.protocol_version == PROTOCOL_VERSION
    assert SUPPORTED_VERSIONS == (PROTOCOL_VERSION,)


@pytest.mark.parametrize("declared", [None, "1.0"])
def test_no_declaration_or_ours_is_served_quietly(
    declared: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    extra = {} if declared is None else {"protocolVersion": declared}
    assert parse_run_input(body(**extra)).protocol_version == declared
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("declared", ["1.1", "1.10", "01.x", "latest"])
def test_a_newer_minor_or_an_unreadable_declaration_is_served_with_a_warning(
    declared: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert check_protocol_version(declared) == declared
    assert any(r.levelno == logging.WARNING and "protocolVersion" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("declared", ["2.0", "0.9", "0.0", "10.0"])
def test_another_major_line_is_refused_naming_the_versions_spoken(declared: str) -> None:
    with pytest.raises(InputError) as info:
        parse_run_input(body(protocolVersion=declared))
    assert info.value.code == UNSUPPORTED_PROTOCOL_VERSION
    assert info.value.status == 400
    assert info.value.details == {"supported": ["1.0"]}
    assert repr(declared) in info.value.message and "1.0" in info.value.message


@pytest.mark.parametrize("declared", [1, 1.0, True, ["1.0"], {"v": "1.0"}])
def test_a_declaration_that_is_not_a_string_is_malformed(declared: object) -> None:
    with pytest.raises(InputError) as info:
        parse_run_input(body(protocolVersion=declared))
    assert info.value.code == "INVALID_REQUEST"
    assert info.value.details == [{"loc": ["protocolVersion"], "message": "must be a string"}]


def test_a_huge_declaration_is_not_echoed_whole(caplog: pytest.LogCaptureFixture) -> None:
    assert check_protocol_version("x" * 100_000) is not None
    assert all(len(r.getMessage()) < 200 for r in caplog.records)


@pytest.mark.parametrize(("declared", "logged"), [
    ("1.1", ("1.1", "1.0")), ("latest", ("latest", "1.0")), ("v" * 40, ("v" * 32, "1.0")),
])
def test_the_warning_names_the_declaration_and_our_version(
    declared: str, logged: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="iobridge.protocol.versions"):
        check_protocol_version(declared)
    [record] = [r for r in caplog.records if r.name == "iobridge.protocol.versions"]
    assert record.args == logged


def test_a_declaration_that_is_not_a_string_is_refused_with_an_example() -> None:
    with pytest.raises(InputError) as info:
        check_protocol_version(1.0)
    assert info.value.message == 'protocolVersion must be a string such as "1.0"'
