"""Every door's fields, sent with odd JSON types, never reach the ledger raw: each answered
request is a row, and nothing is spooled or quarantined (hypothesis picks the door, the field
and the value; a real gateway on loopback with a SQLite store answers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.edge.app import create_app
from gateway.ledger.quarantine import quarantined
from plumbline_kit.fakes.upstream import running_fake
from tests.harness import config_from, serving_app

HI = [{"role": "user", "content": "hi"}]
DOORS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "smol", "messages": HI, "max_tokens": 3},
    "/v1/completions": {"model": "smol", "prompt": "hi", "max_tokens": 3},
    "/v1/embeddings": {"model": "smol", "input": "hi"},
    "/v1/responses": {"model": "smol", "input": "hi", "max_output_tokens": 16},
    "/v1/messages": {"model": "smol", "max_tokens": 16, "messages": HI},
}
FIELDS = [
    "model", "stream", "max_tokens", "max_completion_tokens", "max_output_tokens", "n",
    "temperature", "top_p", "seed", "stop", "user", "stream_options", "metadata", "input",
    "prompt", "messages", "tools", "tool_choice", "dimensions", "encoding_format",
    "reasoning_effort", "thinking", "x_unknown",
]  # fmt: skip
ODD = st.one_of(
    st.just([]),
    st.just({}),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.integers(min_value=2**31, max_value=2**70),
    st.integers(max_value=-1, min_value=-(2**70)),
    st.sampled_from([0, 1, 1.5, 1e308, -0.0, 5e-324, True, False, None]),
    st.sampled_from(["", "64", "1e3", "NaN", "true", "x" * 300, "\x00", "smol\x00"]),
)


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[httpx.Client, Any]]:
    with running_fake() as fake:
        config = config_from(
            {
                "server": {"health_interval_s": 0},
                "store": {"url": "sqlite:///var/plumbline.db"},
                "upstreams": [
                    {"name": "a", "kind": "vllm", "base_url": fake.base_url, "model": "m"}
                ],
                "models": {"smol": {"upstreams": ["a"]}},
            }
        )
        app = create_app(config)
        with serving_app(app) as root, httpx.Client(base_url=root, timeout=30) as client:
            yield client, app.state.gateway


ANSWERED: list[str] = []


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(door=st.sampled_from(sorted(DOORS)), field=st.sampled_from(FIELDS), value=ODD)
def test_odd_field_types_never_reach_the_ledger_raw(
    gateway: tuple[httpx.Client, Any], door: str, field: str, value: Any
) -> None:
    client, _ = gateway
    resp = client.post(door, json={**DOORS[door], field: value})
    # The fake upstream may fail on what it is sent (a 502 then); the gateway never does.
    assert resp.status_code != 500, (door, field, value, resp.text[:300])
    if "x-plumbline-request-id" in resp.headers:
        ANSWERED.append(resp.headers["x-plumbline-request-id"])


def test_every_answered_odd_request_is_a_row(gateway: tuple[httpx.Client, Any]) -> None:
    _, gw = gateway
    assert len(ANSWERED) > 50  # the fuzz above ran first, and many odd values were answered
    assert gw.queue.flush()
    for request_id in ANSWERED:
        assert gw.store.get(request_id) is not None, request_id
    assert gw.queue.stats.spooled == 0 and gw.queue.stats.quarantined == 0
    assert quarantined(gw.store) == 0
