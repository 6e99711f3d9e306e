"""Capability declarations refused with the field named: a group that is not an object, an
object where a flag belongs, several unknown keys in one group."""

from __future__ import annotations

from typing import Any

import pytest

from iobridge.agents.capabilities import CapabilityError, validate_capabilities


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tools": 3},
         "capabilities: tools: Input should be a valid dictionary or instance of "
         "ToolsCapabilities"),
        ({"tools": {"supported": {"nested": True}}},
         "capabilities: tools.supported: Input should be a valid boolean"),
        ({"tools": {"itmes": [], "supported": True, "zzz": 1}},
         "capabilities: unknown or malformed key(s) tools.itmes, tools.zzz (AG-UI "
         "AgentCapabilities groups: identity, transport, tools, output, state, multiAgent, "
         "reasoning, multimodal, execution, humanInTheLoop, custom)"),
    ],
)
def test_a_refusal_names_the_field_and_what_it_should_be(data: Any, message: str) -> None:
    with pytest.raises(CapabilityError) as refused:
        validate_capabilities(data)
    assert str(refused.value) == message


def test_only_the_declared_fields_come_back() -> None:
    assert validate_capabilities({"tools": {"clientProvided": True}}) == {
        "tools": {"clientProvided": True}}
