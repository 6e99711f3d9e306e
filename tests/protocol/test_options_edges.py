"""forwardedProps edges: the structured-output schema's bounds (at and one past), the
multitask strategy, ``replaceFrom`` and ``messagesSnapshot``, as ``parse_run_options`` reads
them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from iobridge.errors import InputError, PayloadTooLarge
from iobridge.protocol.options import (
    parse_model_settings,
    parse_multitask_strategy,
    parse_run_options,
    parse_structured_output,
)

#: Three objects (the schema, ``properties``, the property's subschema).
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}
STRATEGY_NAMES = "'reject', 'enqueue', 'interrupt', 'rollback'"


def too_large(message: str) -> tuple[str, str, list[dict[str, str]]]:
    return ("STRUCTURED_OUTPUT_TOO_LARGE", f"structuredOutput is too large: {message}",
            [{"field": "forwardedProps.structuredOutput.schema", "message": message}])


def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str, Any]:
    with pytest.raises(InputError) as refused:
        call(*args, **kwargs)
    return refused.value.code, refused.value.message, refused.value.details


def test_a_schema_of_exactly_max_bytes_is_accepted_one_byte_less_is_not() -> None:
    size = len(orjson.dumps(SCHEMA))
    assert parse_structured_output({"schema": SCHEMA}, max_bytes=size) is not None
    with pytest.raises(PayloadTooLarge) as refused:
        parse_structured_output({"schema": SCHEMA}, max_bytes=size - 1)
    error = refused.value
    assert (error.code, error.message, error.details) == too_large(
        f"the schema exceeds {size - 1} bytes of JSON")


def test_a_schema_of_exactly_max_objects_is_accepted_one_less_is_not() -> None:
    assert parse_structured_output({"schema": SCHEMA}, max_objects=3) is not None
    with pytest.raises(PayloadTooLarge) as refused:
        parse_structured_output({"schema": SCHEMA}, max_objects=2)
    error = refused.value
    assert (error.code, error.message, error.details) == too_large(
        "the schema has more than 2 objects")


def test_objects_inside_lists_count_toward_the_bound() -> None:
    schema = {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}
    assert parse_structured_output({"schema": schema}, max_objects=3) is not None
    with pytest.raises(PayloadTooLarge):
        parse_structured_output({"schema": schema}, max_objects=2)


def test_a_schema_that_is_not_json_is_refused() -> None:
    assert refusal(parse_structured_output, {"schema": {"type": "object", "x": {1}}}) == (
        "INVALID_STRUCTURED_OUTPUT", "invalid structuredOutput: 'schema' must be JSON",
        [{"field": "forwardedProps.structuredOutput", "message": "'schema' must be JSON"}])


def test_a_metaschema_error_at_the_top_of_the_schema_says_root() -> None:
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
              "exclusiveMaximum": True}
    message = ("not a valid JSON Schema at (root): "
               "'maximum' is a dependency of 'exclusiveMaximum'")
    assert refusal(parse_structured_output, {"schema": schema}) == (
        "INVALID_STRUCTURED_OUTPUT", f"invalid structuredOutput: {message}",
        [{"field": "forwardedProps.structuredOutput", "message": message}])


def test_run_options_pass_the_schema_bounds_on() -> None:
    props = {"structuredOutput": {"schema": SCHEMA}}
    size = len(orjson.dumps(SCHEMA))
    assert parse_run_options(props, max_schema_bytes=size, max_schema_objects=3).structured_output
    with pytest.raises(PayloadTooLarge):
        parse_run_options(props, max_schema_bytes=size - 1)
    with pytest.raises(PayloadTooLarge):
        parse_run_options(props, max_schema_objects=2)


def test_an_unknown_model_setting_before_known_ones_does_not_hide_them() -> None:
    assert parse_model_settings({"vendorThing": 1, "temperature": 1, "max_tokens": 5}) == {
        "temperature": 1, "max_tokens": 5}


def test_each_multitask_strategy_is_its_own() -> None:
    for strategy in ("reject", "enqueue", "interrupt", "rollback"):
        assert parse_multitask_strategy(strategy) == strategy
    assert parse_multitask_strategy(None) is None


def test_a_bad_multitask_strategy_names_the_four() -> None:
    assert refusal(parse_multitask_strategy, "queue") == (
        "INVALID_MULTITASK_STRATEGY",
        f"forwardedProps.multitaskStrategy must be one of {STRATEGY_NAMES}",
        [{"field": "forwardedProps.multitaskStrategy",
          "message": f"must be one of {STRATEGY_NAMES}"}])
    assert refusal(parse_multitask_strategy, 1, where="agent.multitask")[1] == (
        f"agent.multitask must be one of {STRATEGY_NAMES}")


def test_run_options_read_the_multitask_strategy_replace_from_and_snapshot() -> None:
    options = parse_run_options({"multitaskStrategy": "rollback", "replaceFrom": "msg 7",
                                 "messagesSnapshot": True})
    assert (options.multitask_strategy, options.replace_from, options.messages_snapshot) == (
        "rollback", "msg 7", True)
    defaults = parse_run_options({})
    assert (defaults.multitask_strategy, defaults.replace_from, defaults.messages_snapshot) == (
        None, None, False)
    assert refusal(parse_run_options, {"multitaskStrategy": "later"})[0] == (
        "INVALID_MULTITASK_STRATEGY")


@pytest.mark.parametrize(("replace_from", "message"), [
    ("", "forwardedProps.replaceFrom must be a non-empty string"),
    (7, "forwardedProps.replaceFrom must be a non-empty string"),
    ("a\nb", "forwardedProps.replaceFrom contains non-printable characters"),
])
def test_a_bad_replace_from_is_its_own_error(replace_from: Any, message: str) -> None:
    assert refusal(parse_run_options, {"replaceFrom": replace_from}) == (
        "INVALID_REPLACE_FROM", message, None)


@pytest.mark.parametrize("snapshot", ["yes", 1, None])
def test_messages_snapshot_must_be_a_boolean(snapshot: Any) -> None:
    assert refusal(parse_run_options, {"messagesSnapshot": snapshot}) == (
        "INVALID_FORWARDED_PROPS", "forwardedProps.messagesSnapshot must be a boolean", None)
