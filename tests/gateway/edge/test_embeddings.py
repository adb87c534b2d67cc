"""The embeddings door end to end: the real `openai` client -> gateway -> fake upstream."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from plumbline_kit.fakes.upstream import FakeHandle
from tests.gateway.edge.test_api import client, gateway_config
from tests.harness import ListSink, running_gateway


def test_single_and_batch_inputs_pass_through(fake: FakeHandle) -> None:
    sink = ListSink()
    with running_gateway(gateway_config(("a", fake.base_url)), sinks=[sink]) as url:
        c = client(url)
        one = c.embeddings.create(model="smol", input="hello world")
        batch = c.embeddings.create(model="smol", input=["a b", "c", "d e f"], dimensions=4)
    assert len(one.data) == 1 and len(one.data[0].embedding) == 8
    assert [d.index for d in batch.data] == [0, 1, 2]
    assert all(len(d.embedding) == 4 for d in batch.data)
    assert batch.data[0].embedding != batch.data[1].embedding
    assert one.usage.prompt_tokens == 2
    sent = [r["body"] for r in fake.requests()]
    assert [r["path"] for r in fake.requests()] == ["/v1/embeddings"] * 2
    assert sent[0]["model"] == "fake-model"  # the upstream's own model id
    assert "temperature" not in sent[0]  # profiles fill sampling only where there is sampling
    assert sent[1]["dimensions"] == 4
    assert [r.door for r in sink.records] == ["embeddings", "embeddings"]
    assert all(r.status == 200 and r.upstream == "a" for r in sink.records)


def test_base64_encoding_is_relayed_untouched(fake: FakeHandle) -> None:
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        direct = httpx.post(
            f"{fake.base_url}/embeddings",
            json={"model": "fake-model", "input": "x y", "encoding_format": "base64"},
        ).json()
        fake.reset()
        via = httpx.post(
            f"{url}/embeddings", json={"model": "smol", "input": "x y", "encoding_format": "base64"}
        ).json()
        decoded = client(url).embeddings.create(model="smol", input="x y")  # SDK asks base64
    assert via["data"][0]["embedding"] == direct["data"][0]["embedding"]
    assert isinstance(via["data"][0]["embedding"], str)
    assert decoded.data[0].embedding == pytest.approx(
        client(fake.base_url).embeddings.create(model="fake-model", input="x y").data[0].embedding
    )


def test_retry_then_answer(fake: FakeHandle) -> None:
    fake.script({"status": 503})
    with running_gateway(gateway_config(("a", fake.base_url), retries=1)) as url:
        reply = client(url).embeddings.create(model="smol", input="again")
    assert len(reply.data) == 1 and len(fake.requests()) == 2


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        ({"model": "smol"}, 400, "input"),
        ({"model": "smol", "input": []}, 400, "input"),
        ({"model": "smol", "input": "x", "encoding_format": "hex"}, 400, "encoding_format"),
        ({"model": "smol", "input": "x", "dimensions": 0}, 400, "dimensions"),
        ({"model": "nope", "input": "x"}, 404, "does not exist"),
    ],
)
def test_bad_input_gets_an_openai_error(
    fake: FakeHandle, body: dict[str, Any], status: int, fragment: str
) -> None:
    with running_gateway(gateway_config(("a", fake.base_url))) as url:
        r = httpx.post(f"{url}/embeddings", json=body)
    assert r.status_code == status
    assert fragment in r.json()["error"]["message"]
    assert fake.requests() == []


def test_upstream_errors(fake: FakeHandle) -> None:
    fake.script({"status": 400, "message": "this model does not embed"}, {"status": 500})
    with running_gateway(gateway_config(("a", fake.base_url), retries=0)) as url:
        c = client(url)
        with pytest.raises(openai.BadRequestError) as refused:
            c.embeddings.create(model="smol", input="x")
        with pytest.raises(openai.InternalServerError) as failed:
            c.embeddings.create(model="smol", input="x")
    assert "does not embed" in str(refused.value)
    assert failed.value.status_code == 502
