"""How an answer cut short ends on each door, with the real openai and anthropic clients against
the fake upstream: cut by the upstream (its window, its own limit, a cap the gateway clamped to
the window) it ends as OpenAI and Anthropic end it (`incomplete` / `response.incomplete`,
`model_context_window_exceeded`); stopped at the client's own cap it keeps today's ending
(`completed` with `incomplete_details`, `max_tokens`). With them, the smaller door fixes: the
embeddings door's model name, an upstream 4xx's `param`, and `GET /v1/models` in Anthropic's
shape for an Anthropic client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.edge.doors.responses.test_responses import sse_events
from tests.gateway.scripted import error, scripted_upstream
from tests.harness import ListSink, config_from, running_gateway

HI = [{"role": "user", "content": "hello"}]


def config(base_url: str, window: int | None = None) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0},
            "upstreams": [
                {
                    "name": "a",
                    "kind": "vllm",
                    "base_url": base_url,
                    "model": "fake-model",
                    **({"context_window": window} if window else {}),
                }
            ],
            "models": {"m": {"upstreams": ["a"]}},
        }
    )


@pytest.fixture
def served(fake: FakeHandle) -> Iterator[tuple[str, ListSink]]:
    sink = ListSink()
    with running_gateway(config(fake.base_url), sinks=[sink]) as url:
        yield url, sink


def oa(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=30)


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=url.removesuffix("/v1"), api_key="k", max_retries=0, timeout=30
    )


def test_responses_cut_by_the_upstream_is_incomplete(fake: FakeHandle, served: Any) -> None:
    url, _ = served
    # The server stops at 5 of the 100 tokens asked for (its own limit): not the client's cap.
    fake.set_default(tokens=5, finish_reason="length")
    whole = oa(url).responses.create(model="m", input="hi", max_output_tokens=100)
    assert whole.status == "incomplete" and whole.completed_at is None
    assert whole.incomplete_details is not None
    assert whole.incomplete_details.reason == "max_output_tokens"
    events = list(oa(url).responses.create(model="m", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds
    last = events[-1].response  # type: ignore[union-attr]
    assert last.status == "incomplete" and last.usage is not None and last.usage.output_tokens == 5


def test_responses_at_the_clients_cap_stays_completed(fake: FakeHandle, served: Any) -> None:
    url, _ = served
    fake.set_default(tokens=20)
    whole = oa(url).responses.create(model="m", input="hi", max_output_tokens=3)
    assert whole.status == "completed" and whole.incomplete_details is not None
    events = list(oa(url).responses.create(model="m", input="hi", max_output_tokens=3, stream=True))
    assert events[-1].type == "response.completed"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]


def test_messages_stop_reasons_say_who_cut(fake: FakeHandle) -> None:
    """Cut by the server: `model_context_window_exceeded`; at the client's `max_tokens`:
    `max_tokens`; at a cap the gateway clamped to the window (the fake honours it): the window's,
    streamed and not."""
    sink = ListSink()
    with running_gateway(config(fake.base_url, window=300), sinks=[sink]) as url:
        c = claude(url)
        fake.set_default(tokens=5, finish_reason="length")
        cut = c.messages.create(model="m", max_tokens=100, messages=HI)
        fake.set_default(tokens=500, finish_reason=None)
        capped = c.messages.create(model="m", max_tokens=3, messages=HI)
        clamped = c.messages.create(model="m", max_tokens=32000, messages=HI)
        body = {"model": "m", "max_tokens": 32000, "messages": HI, "stream": True}
        streamed = httpx.post(url.removesuffix("/v1") + "/v1/messages", json=body, timeout=30)
    assert cut.stop_reason == "model_context_window_exceeded"
    assert capped.stop_reason == "max_tokens"
    assert clamped.stop_reason == "model_context_window_exceeded"
    assert sink.records[2].clamped is not None
    delta = [e for e in sse_events(streamed.content) if e["type"] == "message_delta"][0]
    assert delta["delta"]["stop_reason"] == "model_context_window_exceeded"


def test_embeddings_answer_with_the_public_name(fake: FakeHandle, served: Any) -> None:
    url, _ = served
    reply = oa(url).embeddings.create(model="m", input="hello world")
    assert reply.model == "m"
    assert fake.requests()[-1]["body"]["model"] == "fake-model"


def test_an_upstream_4xx_keeps_its_param() -> None:
    said = {
        "error": {
            "message": "'temperature' must be at most 2",
            "type": "BadRequestError",
            "param": "temperature",
            "code": 400,
        }
    }
    with scripted_upstream() as up, running_gateway(config(up.base_url)) as url:
        up.script(error(400, orjson.dumps(said)))
        with pytest.raises(openai.BadRequestError) as refused:
            oa(url).chat.completions.create(model="m", messages=HI)  # type: ignore[arg-type]
    body = refused.value.body
    assert isinstance(body, dict) and body["param"] == "temperature"
    assert body["code"] == "upstream_400"


def test_models_in_anthropics_shape_for_an_anthropic_client(fake: FakeHandle) -> None:
    with running_gateway(config(fake.base_url, window=4096)) as url:
        page = claude(url).models.list()
        one = claude(url).models.retrieve("m")
        plain = oa(url).models.list()
        raw = httpx.get(url + "/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert [(m.type, m.id, m.display_name) for m in page.data] == [("model", "m", "m")]
    assert page.data[0].created_at.year == 1970 and one.id == "m"
    assert raw["has_more"] is False and raw["first_id"] == raw["last_id"] == "m"
    assert raw["data"][0]["max_input_tokens"] == 4096
    assert plain.data[0].object == "model"
