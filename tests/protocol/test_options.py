"""Parsing of forwardedProps.modelSettings and structuredOutput (before the stream)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from iobridge.errors import InputError
from iobridge.protocol.options import (
    MODEL_SETTINGS,
    MemoryOptions,
    RunOptions,
    parse_memory_options,
    parse_model_settings,
    parse_run_options,
    parse_structured_output,
    parse_tool_result_mode,
)

ALL = {"temperature": 0.5, "maxTokens": 100, "topP": 1, "topK": 3, "seed": -7,
       "stopSequences": ["\n\n", "END"], "presencePenalty": -2, "frequencyPenalty": 2,
       "maxRetries": 0}


def test_every_key_maps_to_pydantic_ai_names() -> None:
    assert parse_model_settings(ALL) == {
        "temperature": 0.5, "max_tokens": 100, "top_p": 1, "top_k": 3, "seed": -7,
        "stop_sequences": ["\n\n", "END"], "presence_penalty": -2, "frequency_penalty": 2,
        "max_retries": 0,
    }
    assert set(MODEL_SETTINGS) == set(ALL)


def test_snake_case_spelling_is_accepted() -> None:
    assert parse_model_settings({"max_tokens": 5, "top_p": 0.5}) == {"max_tokens": 5, "top_p": 0.5}


def test_none_means_no_overrides() -> None:
    assert parse_model_settings(None) == {}


def test_unknown_keys_are_ignored_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="iobridge.protocol.options"):
        assert parse_model_settings({"temperature": 1, "reasoningEffort": "high"}) == {
            "temperature": 1}
    assert "reasoningEffort" in caplog.text


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("temperature", "hot", "must be a number between 0 and 2"),
        ("temperature", 2.5, "must be a number between 0 and 2"),
        ("temperature", True, "must be a number"),
        ("temperature", float("nan"), "must be a number"),
        ("maxTokens", 0, "must be at least 1"),
        ("maxTokens", 1.5, "must be an integer"),
        ("topP", -0.1, "between 0 and 1"),
        ("topK", 0, "at least 1"),
        ("seed", "42", "must be an integer"),
        ("stopSequences", "END", "list of 1 to 16 non-empty strings"),
        ("stopSequences", [], "list of 1 to 16"),
        ("stopSequences", [""], "non-empty strings"),
        ("stopSequences", ["x"] * 17, "list of 1 to 16"),
        ("presencePenalty", 3, "between -2 and 2"),
        ("frequencyPenalty", None, "must be a number"),
        ("maxRetries", -1, "at least 0"),
        ("maxRetries", 11, "at most 10"),
    ],
)
def test_wrong_type_or_range_is_a_400_with_details(key: str, value: Any, message: str) -> None:
    raw = {key: value, "otherKey": 1}
    with pytest.raises(InputError) as info:
        parse_model_settings(raw)
    err = info.value
    assert err.status == 400 and err.code == "INVALID_MODEL_SETTINGS"
    (detail,) = err.details
    assert detail["field"] == f"forwardedProps.modelSettings.{key}"
    assert message in detail["message"]
    assert raw == {key: value, "otherKey": 1}  # input untouched


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(InputError) as info:
        parse_model_settings({"temperature": -1, "topK": "a"})
    assert [d["field"] for d in info.value.details] == [
        "forwardedProps.modelSettings.temperature", "forwardedProps.modelSettings.topK"]


def test_model_settings_must_be_an_object() -> None:
    with pytest.raises(InputError, match="must be an object"):
        parse_model_settings([1, 2])


def test_stop_sequences_are_copied() -> None:
    stops = ["a"]
    parsed = parse_model_settings({"stopSequences": stops})
    stops.append("b")
    assert parsed["stop_sequences"] == ["a"]


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}},
          "required": ["n"], "title": "counter"}


def test_structured_output_defaults_name_from_title() -> None:
    spec = parse_structured_output({"schema": SCHEMA})
    assert spec is not None
    assert (spec.name, spec.description) == ("counter", None)
    assert spec.errors({"n": 1}) == []
    assert spec.errors({"n": -1}) == ["n: -1 is less than the minimum of 0"]
    assert spec.errors({}) == ["(root): 'n' is a required property"]


def test_structured_output_name_and_description() -> None:
    spec = parse_structured_output({"schema": SCHEMA, "name": "count_v2", "description": "A count"})
    assert spec is not None and (spec.name, spec.description) == ("count_v2", "A count")


def test_structured_output_honours_declared_draft() -> None:
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"a": {"type": "string"}}}
    spec = parse_structured_output({"schema": schema})
    assert spec is not None and spec.errors({"a": 1}) == ["a: 1 is not of type 'string'"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("a string", "must be an object with a 'schema'"),
        ({}, "'schema' must be a JSON Schema object"),
        ({"schema": [1]}, "'schema' must be a JSON Schema object"),
        ({"schema": {"type": "object", "properties": 3}}, "not a valid JSON Schema at properties"),
        ({"schema": {"type": "objekt"}}, "not a valid JSON Schema"),
        ({"schema": {"type": "object", "required": "n"}}, "not a valid JSON Schema at required"),
        ({"schema": {"type": "string"}}, "\"type\": \"object\" at the top level"),
        ({"schema": SCHEMA, "name": "has space"}, "'name' must be 1-64"),
        ({"schema": SCHEMA, "description": 5}, "'description' must be a string"),
    ],
)
def test_invalid_structured_output_is_a_400(raw: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        parse_structured_output(raw)
    assert info.value.code == "INVALID_STRUCTURED_OUTPUT"
    assert message in info.value.message
    assert info.value.details[0]["field"] == "forwardedProps.structuredOutput"


def test_run_options_from_forwarded_props() -> None:
    options = parse_run_options({"agentId": "x", "modelSettings": {"seed": 3},
                                 "structuredOutput": {"schema": SCHEMA}})
    assert options.model_settings == {"seed": 3}
    assert options.structured_output is not None
    empty = parse_run_options(None)
    assert empty.model_settings == {} and empty.structured_output is None


def test_run_options_carry_each_known_key_and_keep_the_rest() -> None:
    props = {"agentId": "helper", "resourceId": 7, "toolResultMode": "next-run",
             "memoryOptions": {"lastMessages": 5}, "custom": {"x": 1}}
    options = parse_run_options(props)
    assert (options.agent_id, options.resource_id, options.tool_result_mode) == (
        "helper", 7, "next-run")
    assert options.memory == MemoryOptions(last_messages=5)
    assert options.props == props
    assert parse_run_options(None) == RunOptions()
    assert RunOptions().memory == MemoryOptions(last_messages=40)


@pytest.mark.parametrize("agent_id", ["", 5, ["a"]])
def test_a_bad_agent_id_is_a_400(agent_id: Any) -> None:
    with pytest.raises(InputError) as info:
        parse_run_options({"agentId": agent_id})
    assert (info.value.message, info.value.code) == (
        "forwardedProps.agentId must be a non-empty string", "INVALID_ID")


@pytest.mark.parametrize("mode", ["in-run", "next-run"])
def test_tool_result_modes(mode: str) -> None:
    assert parse_tool_result_mode(mode) == mode
    assert parse_tool_result_mode(None) is None


@pytest.mark.parametrize("mode", ["in_run", "", 1, ["in-run"]])
def test_a_bad_tool_result_mode_is_a_400(mode: Any) -> None:
    with pytest.raises(InputError) as info:
        parse_run_options({"toolResultMode": mode})
    assert info.value.message == "forwardedProps.toolResultMode must be 'in-run' or 'next-run'"
    assert info.value.code == "INVALID_FORWARDED_PROPS"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, MemoryOptions(last_messages=40, read_only=False, generate_title=False)),
        ({}, MemoryOptions(last_messages=40)),
        ({"lastMessages": None}, MemoryOptions(last_messages=40)),
        ({"lastMessages": False}, MemoryOptions(last_messages=40)),
        ({"lastMessages": 0}, MemoryOptions(last_messages=0)),
        ({"lastMessages": 3, "readOnly": True}, MemoryOptions(last_messages=3, read_only=True)),
        ({"generateTitle": True, "other": 1}, MemoryOptions(generate_title=True)),
        ({"readOnly": False, "generateTitle": False}, MemoryOptions()),
    ],
)
def test_memory_options(raw: Any, expected: MemoryOptions) -> None:
    assert parse_memory_options(raw) == expected
    assert parse_run_options({"memoryOptions": raw}).memory == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "forwardedProps.memoryOptions must be an object"),
        ("all", "forwardedProps.memoryOptions must be an object"),
        ({"lastMessages": -1}, "memoryOptions.lastMessages must be a non-negative integer"),
        ({"lastMessages": True}, "memoryOptions.lastMessages must be a non-negative integer"),
        ({"lastMessages": 2.0}, "memoryOptions.lastMessages must be a non-negative integer"),
        ({"lastMessages": "5"}, "memoryOptions.lastMessages must be a non-negative integer"),
        ({"readOnly": 1}, "memoryOptions.readOnly must be a boolean"),
        ({"generateTitle": "yes"}, "memoryOptions.generateTitle must be a boolean"),
        ({"readOnly": None}, "memoryOptions.readOnly must be a boolean"),
    ],
)
def test_bad_memory_options_are_a_400(raw: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        parse_run_options({"memoryOptions": raw})
    assert (info.value.message, info.value.code) == (message, "INVALID_FORWARDED_PROPS")


@pytest.mark.parametrize(
    ("key", "value"),
    [("temperature", 0), ("temperature", 2), ("topP", 0), ("topP", 1), ("maxTokens", 1),
     ("topK", 1), ("maxRetries", 10), ("presencePenalty", 2), ("frequencyPenalty", -2),
     ("seed", 0), ("stopSequences", ["s"] * 16)],
)
def test_values_at_the_limits_are_accepted(key: str, value: Any) -> None:
    snake = MODEL_SETTINGS[key][0]
    assert parse_model_settings({key: value}) == {snake: value}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("temperature", "hot", "must be a number between 0 and 2"),
        ("temperature", -0.01, "must be a number between 0 and 2"),
        ("topP", 1.01, "must be a number between 0 and 1"),
        ("maxTokens", "5", "must be an integer"),
        ("maxTokens", 0, "must be at least 1"),
        ("maxRetries", 11, "must be at most 10"),
        ("seed", 1.5, "must be an integer"),
    ],
)
def test_each_problem_has_its_exact_message(key: str, value: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        parse_model_settings({key: value})
    field = f"forwardedProps.modelSettings.{key}"
    assert info.value.message == f"invalid model settings: {field}"
    assert info.value.details == [{"field": field, "message": message}]


def test_the_error_names_every_bad_field_and_where_they_came_from() -> None:
    with pytest.raises(InputError) as info:
        parse_model_settings({"temperature": -1, "topK": "a"}, where="agents.x.model_settings")
    assert info.value.message == (
        "invalid model settings: agents.x.model_settings.temperature, "
        "agents.x.model_settings.topK")
    with pytest.raises(InputError) as not_object:
        parse_model_settings([1], where="here")
    assert (not_object.value.message, not_object.value.code, not_object.value.details) == (
        "here must be an object", "INVALID_MODEL_SETTINGS",
        [{"field": "here", "message": "must be an object"}])


def test_unknown_setting_log_names_the_key_and_the_source(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="iobridge.protocol.options"):
        parse_model_settings({"reasoningEffort": "high", "seed": 1}, where="agents.x")
    assert caplog.messages == ["ignoring unknown model setting 'reasoningEffort' in agents.x"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("a string", "must be an object with a 'schema'"),
        ({}, "'schema' must be a JSON Schema object"),
        ({"schema": {"type": "object", "properties": {"a": {"type": 3}}}},
         "not a valid JSON Schema at properties/a/type: 3 is not valid under any of the given "
         "schemas"),
        ({"schema": {"type": 3}}, "not a valid JSON Schema at type: 3 is not valid under any of "
         "the given schemas"),
        ({"schema": {"type": "string"}},
         "the schema must have \"type\": \"object\" at the top level"),
        ({"schema": SCHEMA, "name": ""}, "'name' must be 1-64 letters, digits, '_' or '-'"),
        ({"schema": SCHEMA, "description": 5}, "'description' must be a string"),
    ],
)
def test_structured_output_errors_are_exact(raw: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        parse_structured_output(raw)
    assert info.value.message == f"invalid structuredOutput: {message}"
    assert info.value.details == [{"field": "forwardedProps.structuredOutput", "message": message}]


def test_structured_output_keeps_the_schema_and_its_description() -> None:
    schema = {**SCHEMA, "description": "from the schema"}
    spec = parse_structured_output({"schema": schema})
    assert spec is not None
    assert (spec.schema, spec.name, spec.description) == (schema, "counter", "from the schema")
    assert parse_structured_output({"schema": {"type": "object"}}) is not None
    assert parse_structured_output(None) is None


def test_structured_output_reports_nested_paths_and_at_most_ten_errors() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "string"}}}}, "additionalProperties": {"type": "string"}}
    spec = parse_structured_output({"schema": schema})
    assert spec is not None
    assert spec.errors({"a": {"b": 1}}) == ["a/b: 1 is not of type 'string'"]
    many = spec.errors({f"k{i}": i for i in range(12)})
    assert len(many) == 10
    assert all(e.endswith(" is not of type 'string'") for e in many)
