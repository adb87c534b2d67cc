"""The OpenRouter-shaped fake answers as OpenRouter documents (provider routing, reasoning), and
its ignoring variant does not; the gateway catches and names the ignoring one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.reports.health import report_health
from plumbline_kit.fakes.openrouter import NO_ENDPOINT, FakeOpenRouter, running_openrouter
from tests.harness import config_from, serving, wait_for

HI = [{"role": "user", "content": "hi"}]


def ask(**body: Any) -> dict[str, Any]:
    return {"model": "vendor/fake-model", "messages": HI, **body}


def test_provider_routing_order_only_and_require_parameters() -> None:
    honest = FakeOpenRouter()
    assert honest.route(ask()) == "Alpha"
    assert honest.route(ask(provider={"order": ["Beta"]})) == "Beta"
    assert honest.route(ask(provider={"only": ["Beta"]})) == "Beta"
    assert honest.route(ask(provider={"ignore": ["Alpha"]})) == "Beta"
    # Beta does not take top_k: with require_parameters only Alpha may serve…
    pinned = {"order": ["Beta"], "require_parameters": True}
    assert honest.route(ask(top_k=20, provider=pinned)) == "Alpha"
    # …and with Beta the only one allowed, nobody.
    only = {"only": ["Beta"], "require_parameters": True}
    assert honest.route(ask(top_k=20, provider=only)) is None
    no_fallback = {"order": ["Beta"], "allow_fallbacks": False, "require_parameters": True}
    assert honest.route(ask(top_k=20, provider=no_fallback)) is None
    assert FakeOpenRouter(ignores=True).route(ask(provider={"only": ["Alpha"]})) == "Beta"


@pytest.mark.parametrize(
    ("reasoning", "tokens", "shown"),
    [
        (None, 0, True),
        ({"enabled": False}, 0, True),
        ({"effort": "none"}, 0, True),
        ({"enabled": True}, 16, True),
        ({"effort": "high"}, 32, True),
        ({"max_tokens": 20}, 20, True),
        ({"effort": "low", "exclude": True}, 8, False),
    ],
)
def test_reasoning_is_honoured(reasoning: dict[str, Any] | None, tokens: int, shown: bool) -> None:
    body = ask() if reasoning is None else ask(reasoning=reasoning)
    assert FakeOpenRouter().thinking(body) == (tokens, shown)
    assert FakeOpenRouter(ignores=True).thinking(body)[0] > 0  # thinks whatever was asked


def test_answers_are_shaped_as_openrouter_answers() -> None:
    with running_openrouter() as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            **ask(), extra_body={"reasoning": {"effort": "low"}, "provider": {"only": ["Beta"]}}
        )
        doc = json.loads(raw.content)
        quiet = client.chat.completions.create(
            **ask(), extra_body={"reasoning": {"enabled": False}}
        )
        with pytest.raises(openai.NotFoundError, match=NO_ENDPOINT):
            client.chat.completions.create(
                **ask(),
                extra_body={
                    "top_k": 20,
                    "provider": {"only": ["Beta"], "require_parameters": True},
                },
            )
        chunks = list(
            client.chat.completions.create(
                **ask(), stream=True, extra_body={"reasoning": {"effort": "low"}}
            )
        )
        served = fake.requests()
    assert doc["provider"] == "Beta"
    message = doc["choices"][0]["message"]
    assert message["reasoning"].split() == [f"think{i}" for i in range(8)]
    assert message["reasoning_details"][0]["type"] == "reasoning.text"
    assert doc["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8
    assert doc["usage"]["cost"] > 0
    assert not (quiet.choices[0].message.model_extra or {}).get("reasoning")
    assert all(c.model_extra["provider"] == "Alpha" for c in chunks)
    assert (
        chunks[-1].usage is not None
        and chunks[-1].usage.completion_tokens_details.reasoning_tokens == 8
    )
    assert [s.provider for s in served] == ["Beta", "Alpha", None, "Alpha"]


def gateway_config(base_url: str, root: Path) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 0},
            "store": {"url": f"sqlite:///{root}/store.db"},
            "profiles": {
                "quiet": {
                    "sampling": {"temperature": 0.2},
                    "chat_template_kwargs": {"enable_thinking": False},
                }
            },
            "upstreams": [
                {
                    "name": "api",
                    "kind": "openai",
                    "base_url": base_url,
                    "model": "vendor/fake-model",
                    "provider": {
                        "only": ["Alpha"],
                        "allow_fallbacks": False,
                        "require_parameters": True,
                    },
                }
            ],
            "models": {"quiet": {"profile": "quiet", "upstreams": ["api"]}},
            "watchdog": {
                "provider_mismatch": {"rate": 0.5, "min_samples": 3},
                "unasked_reasoning": {"rate": 0.5, "min_samples": 3},
            },
        }
    )


@pytest.mark.parametrize("ignores", [False, True])
def test_the_gateway_names_a_provider_that_ignores_routing_and_thinks_anyway(
    ignores: bool, tmp_path: Path
) -> None:
    """Pinned to Alpha, thinking off: the honest fake answers from Alpha without thinking; the
    ignoring one answers from Beta and thinks. The gateway's records, watchdog, /health and
    `report health` name both faults on the ignoring one, and neither on the honest one."""
    with running_openrouter(ignores=ignores, thinks_by_default=True) as fake:
        cfg = gateway_config(fake.base_url, tmp_path)
        with serving(cfg, record=True) as (url, app):
            for _ in range(4):
                r = httpx.post(f"{url}/chat/completions", json={"model": "quiet", "messages": HI})
                assert r.status_code == 200, r.text
            gw = app.state.gateway
            wait_for(lambda: gw.store.count() >= 4)
            health = httpx.get(url.removesuffix("/v1") + "/health").json()
            text = report_health(cfg, "24h", store=gw.store)
            doc = json.loads(report_health(cfg, "24h", "json", store=gw.store))
        sent = fake.requests()
    [row] = [r for r in doc["rows"] if r["upstream"] == "api"]
    checks = health["watchdog"].get("api", {}).get("checks", {})
    # What the gateway asked OpenRouter for: the pin (the thinking switch is the profile's).
    assert all(s.body["provider"]["only"] == ["Alpha"] for s in sent)
    if ignores:
        assert {s.provider for s in sent} == {"Beta"}
        assert checks["provider_mismatch"]["tripped"] and checks["unasked_reasoning"]["tripped"]
        assert row["rates"]["provider_mismatch"] == 1.0 and row["rates"]["unasked_reasoning"] == 1.0
        assert {"provider_mismatch", "unasked_reasoning"} <= set(row["tripped"])
        assert "unasked_reasoning %" in text  # the table's column (its cells may wrap)
    else:
        assert {s.provider for s in sent} == {"Alpha"}
        assert not checks.get("provider_mismatch", {}).get("tripped")
        assert row["rates"]["provider_mismatch"] == 0.0
        assert "provider_mismatch" not in row["tripped"]
