"""``multitaskStrategy`` / ``multitask_strategy`` parsing: per run, per agent definition."""

from __future__ import annotations

import pytest

from iobridge.agents.definitions import load_agents
from iobridge.config import Settings
from iobridge.errors import InputError
from iobridge.protocol.options import parse_run_options

SLOW = "tests.branches.slow_agents:agent"


@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_each_strategy_parses(strategy: str) -> None:
    assert parse_run_options({"multitaskStrategy": strategy}).multitask_strategy == strategy


@pytest.mark.parametrize("bad", ["supersede", "", 1, True, ["enqueue"], "Enqueue"])
def test_anything_else_names_the_four(bad: object) -> None:
    with pytest.raises(InputError) as refused:
        parse_run_options({"multitaskStrategy": bad})
    assert refused.value.code == "INVALID_MULTITASK_STRATEGY"
    assert "'reject', 'enqueue', 'interrupt', 'rollback'" in refused.value.message


def test_absent_leaves_it_to_the_agent_and_the_server() -> None:
    assert parse_run_options({}).multitask_strategy is None
    assert Settings().multitask_strategy == "reject"
    assert Settings().max_queued_runs_per_thread == 8


def test_an_agent_definition_declares_its_strategy() -> None:
    agents, errors = load_agents([
        {"id": "a", "pydantic_ai": SLOW, "multitask_strategy": "enqueue"},
        {"id": "b", "pydantic_ai": SLOW, "multitask_strategy": "later"},
        {"id": "c", "agui_url": "http://127.0.0.1:9/agui", "multitask_strategy": "interrupt"},
    ])
    assert {a.id: a.multitask_strategy for a in agents} == {"a": "enqueue", "c": "interrupt"}
    assert "multitask_strategy must be one of" in errors["b"]
