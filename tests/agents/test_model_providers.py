"""Model strings to provider models, settings fitted to the endpoint, and the exact error a
client reads when the provider fails (the local OpenAI-compatible server answers)."""

from __future__ import annotations

from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, drive, error, make_context, text

from iobridge.agents.model import ModelAgent
from iobridge.agents.providers import adapt_settings, build_model
from iobridge.errors import AgentError


def agent_for(base_url: str, **settings: Any) -> ModelAgent:
    model = build_model("openai:fake", base_url=base_url, environ={})
    return ModelAgent(id="m", model=model, model_settings={"max_retries": 0, **settings})


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (401, "MODEL_AUTH", "the model provider rejected the credentials (HTTP 401)"),
        (403, "MODEL_AUTH", "the model provider rejected the credentials (HTTP 403)"),
        (429, "MODEL_RATE_LIMIT", "the model provider is rate limiting requests (HTTP 429)"),
        (500, "MODEL_UNAVAILABLE", "the model provider is unavailable (HTTP 500)"),
        (400, "MODEL_ERROR", "the model request failed (HTTP 400)"),
        # Next to the statuses that mean something else: a plain failure.
        (402, "MODEL_ERROR", "the model request failed (HTTP 402)"),
        (404, "MODEL_ERROR", "the model request failed (HTTP 404)"),
        (430, "MODEL_ERROR", "the model request failed (HTTP 430)"),
    ],
)
async def test_a_provider_status_is_a_stable_code_and_message(
    fake_openai: FakeOpenAI, status: int, code: str, message: str
) -> None:
    fake_openai.push(error(status, retry_after_ms=1))
    agent = agent_for(fake_openai.base_url)
    with pytest.raises(AgentError) as info:
        await drive(agent, make_context(agent))
    assert (info.value.code, info.value.message) == (code, message)


async def test_a_provider_timeout_says_the_request_timed_out(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(Reply(text=("late",), delay=1.0))
    agent = agent_for(fake_openai.base_url, timeout=0.2)
    with pytest.raises(AgentError) as info:
        await drive(agent, make_context(agent))
    assert (info.value.code, info.value.message) == (
        "MODEL_UNAVAILABLE", "the model request timed out")


async def test_top_k_joins_the_extra_body_fields_already_set(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(text("ok"))
    agent = agent_for(fake_openai.base_url, top_k=7, extra_body={"min_p": 0.1})
    await drive(agent, make_context(agent))
    [body] = fake_openai.requests
    assert (body["top_k"], body["min_p"]) == (7, 0.1)


def test_top_k_stays_a_setting_for_api_openai_com() -> None:
    """api.openai.com has no top_k: pydantic-ai drops it, no extra field is made up."""
    model = build_model("openai:gpt-4o", environ={"OPENAI_API_KEY": "k"})
    assert adapt_settings(model, {"top_k": 3}) == {"top_k": 3}


@pytest.mark.parametrize(
    ("model_id", "key_env"),
    [("anthropic:claude-x", "ANTHROPIC_API_KEY"), ("google:gemini-x", "GOOGLE_API_KEY")],
)
def test_sdk_models_get_the_name_and_the_base_url(model_id: str, key_env: str) -> None:
    model = build_model(model_id, base_url="http://127.0.0.1:9/v1", environ={key_env: "k"})
    assert model.model_name == model_id.partition(":")[2]
    assert model.base_url is not None and model.base_url.startswith("http://127.0.0.1:9/v1")
