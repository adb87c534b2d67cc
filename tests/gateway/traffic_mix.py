"""A gateway with every kind of traffic an operator must see apart, for the tests of what each
view shows: client requests, shadow copies and eval-lane requests on separate lanes, a route
whose only upstream refuses every connection (`dead`: failing), a fallback onto the shadow's own
upstream (the shadow is skipped), and requests refused before they had a record: an unknown
model, a body that is not JSON, a parameter the door refuses, a wrong key, a key over budget.
Driven with the real openai client and httpx."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from gateway.config import Config
from gateway.edge.access import hash_key
from tests.harness import config_from, free_port, wait_for

ADMIN, CONSOLE, CLIENT, TIGHT = "sk-mix-admin", "sk-mix-console", "sk-mix-client", "sk-mix-tight"
PROMPT: list[Any] = [{"role": "user", "content": "one two three four"}]
# Requests the mix sends, by route and lane.
MIRRORED = 3  # client requests to "mirrored", each shadowed to "alt"
FALLBACK = 2  # client requests to "fallback": "dead" refuses, "good" answers
BROKEN = 2  # client requests to "broken": its only upstream refuses every connection
EVAL = 2  # eval-lane requests to "mirrored" (the lane's own key)


def mixed_config(fake_url: str) -> Config:
    shadow = {"fraction": 1.0, "budget_requests_per_day": 100, "max_concurrency": 8}
    return config_from(
        {
            # No prober: "dead" is never found unhealthy by a probe, only by its failed calls.
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "store": {"url": "sqlite:///var/records.db"},
            "access": {
                "keys": [
                    {"id": "ops", "sha256": hash_key(ADMIN), "role": "admin"},
                    {"id": "wall", "sha256": hash_key(CONSOLE), "role": "console"},
                    {"id": "app", "sha256": hash_key(CLIENT), "role": "client"},
                    {
                        "id": "tight",
                        "sha256": hash_key(TIGHT),
                        "role": "client",
                        "requests_per_window": 1,
                        "window_s": 3600,
                    },
                ],
            },
            "upstreams": [
                {"name": "good", "kind": "vllm", "base_url": fake_url, "model": "m"},
                {"name": "alt", "kind": "openai", "base_url": fake_url, "model": "m"},
                {
                    "name": "dead",
                    "kind": "vllm",
                    "base_url": f"http://127.0.0.1:{free_port()}/v1",
                    "model": "m",
                },
            ],
            "models": {
                "mirrored": {"upstreams": ["good"], "shadow": {"upstream": "alt", **shadow}},
                # After the fallback the primary is answered by the shadow's own upstream.
                "fallback": {
                    "upstreams": ["dead"],
                    "fallback": ["good"],
                    "shadow": {"upstream": "good", **shadow},
                },
                "broken": {"upstreams": ["dead"]},
            },
            "prices": {"alt": {"input": 0.5, "output": 2.0}},
        }
    )


@dataclass
class Sent:
    """What the mix sent: per refusal, the request id its answer carried (`x-request-id`, the
    client's own where it sent one) and the gateway's (`x-plumbline-request-id`)."""

    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)


def _refused(sent: Sent, reason: str, response: httpx.Response) -> None:
    sent.statuses[reason] = response.status_code
    sent.refused[reason] = (
        response.headers["x-request-id"],
        response.headers["x-plumbline-request-id"],
    )


def drive(url: str, app: Any) -> Sent:
    """Send the mix through the gateway at `url` (its /v1) and wait until the store has it."""
    gw = app.state.gateway
    sent = Sent()
    client = openai.OpenAI(base_url=url, api_key=CLIENT, max_retries=0)
    for _ in range(MIRRORED):
        client.chat.completions.create(model="mirrored", messages=PROMPT)
    for _ in range(FALLBACK):
        client.chat.completions.create(model="fallback", messages=PROMPT)
    for _ in range(BROKEN):
        try:
            client.chat.completions.create(model="broken", messages=PROMPT)
        except openai.APIStatusError as e:
            assert e.status_code in (502, 503), e
    lane = openai.OpenAI(
        base_url=url,
        api_key=app.state.access.lane.reveal(),
        max_retries=0,
        default_headers={"x-plumbline-lane": "eval"},
    )
    for _ in range(EVAL):
        lane.chat.completions.create(model="mirrored", messages=PROMPT)
    # The refusals: with the openai client where it can say them, httpx where it cannot.
    try:
        client.chat.completions.create(
            model="no-such-model",
            messages=PROMPT,
            extra_headers={"x-request-id": "client-trace-404"},
        )
    except openai.NotFoundError as e:
        _refused(sent, "unknown_model", e.response)
    try:
        client.chat.completions.create(model="mirrored", messages=PROMPT, temperature="hot")  # type: ignore[arg-type]
    except openai.BadRequestError as e:
        _refused(sent, "bad_request", e.response)
    bad_json = httpx.post(
        url + "/chat/completions",
        content=b'{"model": "mirrored", "messages": [',
        headers={"authorization": f"Bearer {CLIENT}", "content-type": "application/json"},
    )
    _refused(sent, "bad_json", bad_json)
    wrong = openai.OpenAI(base_url=url, api_key="sk-not-a-key", max_retries=0)
    try:
        wrong.chat.completions.create(model="mirrored", messages=PROMPT)
    except openai.AuthenticationError as e:
        _refused(sent, "unauthorized", e.response)
    tight = openai.OpenAI(base_url=url, api_key=TIGHT, max_retries=0)
    tight.chat.completions.create(model="mirrored", messages=PROMPT)  # its one request
    try:
        tight.chat.completions.create(model="mirrored", messages=PROMPT)
    except openai.RateLimitError as e:
        _refused(sent, "over_budget", e.response)
    assert set(sent.refused) == {
        "unknown_model",
        "bad_request",
        "bad_json",
        "unauthorized",
        "over_budget",
    }
    # Client requests + the shadows of "mirrored" (the 4th is the tight key's) + eval.
    records = MIRRORED + 1 + FALLBACK + BROKEN + (MIRRORED + 1) + EVAL
    wait_for(lambda: gw.store.count() == records, timeout=30)
    wait_for(lambda: _rejections(gw) == len(sent.refused), timeout=30)
    return sent


def _rejections(gw: Any) -> int:
    from gateway.ledger.rows import REJECTIONS

    with gw.store.engine.connect() as conn:
        return len(list(conn.execute(REJECTIONS.select())))
