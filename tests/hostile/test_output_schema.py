"""A ``structuredOutput`` schema is bounded in bytes and objects before it is checked.

On af03d35 a ~4 MB schema of 100,000 properties held the event loop for 33 s (the metaschema
check, on the loop, for any agent): the bounds refuse it with 413 before that check, and the
check of a schema within them runs in a worker thread (``test_responsive`` probes the loop).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from tests.helpers import parse_sse, run_body

from .conftest import Rig

BASE = "/io-bridge"
#: ``Settings()``'s ``max_output_schema_objects`` and ``max_output_schema_bytes``.
MAX_OBJECTS = 1000
MAX_BYTES = 64 * 1024


def schema_with(objects: int) -> dict[str, Any]:
    """An object schema of ``objects`` JSON objects: itself, ``properties``, one per property."""
    return {"type": "object",
            "properties": {f"p{i}": {"type": "string"} for i in range(objects - 2)}}


def schema_of_bytes(size: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "description": ""}
    schema["description"] = "d" * (size - len(orjson.dumps(schema)))
    assert len(orjson.dumps(schema)) == size
    return schema


async def run_with(rig: Rig, schema: dict[str, Any], run_id: str) -> Any:
    body = run_body("hi", run_id=run_id, thread_id=run_id,
                    structuredOutput={"name": "answer", "schema": schema})
    return await rig.client.post(f"{BASE}/run", json=body)


@pytest.mark.parametrize(
    ("schema", "fits"),
    [(schema_with(MAX_OBJECTS), True), (schema_with(MAX_OBJECTS + 1), False),
     (schema_of_bytes(MAX_BYTES), True), (schema_of_bytes(MAX_BYTES + 1), False)],
    ids=["objects-at", "objects-over", "bytes-at", "bytes-over"],
)
async def test_a_schema_at_its_bounds_runs_and_one_more_is_refused(
    rig: Rig, schema: dict[str, Any], fits: bool
) -> None:
    response = await run_with(rig, schema, "r1")
    if fits:
        assert response.status_code == 200, response.text
        assert parse_sse(response.text)[-1]["type"] == "RUN_FINISHED"
    else:
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "STRUCTURED_OUTPUT_TOO_LARGE"
        assert await rig.store.get_thread("r1") is None


async def test_objects_inside_any_keyword_count(rig: Rig) -> None:
    schema = {"type": "object", "anyOf": [{} for _ in range(MAX_OBJECTS)]}
    response = await run_with(rig, schema, "r1")
    assert response.status_code == 413
