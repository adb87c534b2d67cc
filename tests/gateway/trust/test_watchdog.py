"""Watchdogs: sliding windows, trips, demotion, config findings, the sink on a live gateway."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import openai
from prometheus_client import CollectorRegistry, generate_latest

from gateway.config.trust import Threshold, WatchdogConfig
from gateway.ledger.record import Record
from gateway.trust.watchdog import (
    Watchdog,
    Window,
    annotate,
    config_findings,
)
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import config_from, running_gateway

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
MESSAGES = [{"role": "user", "content": "hello"}]


def config(fake_url: str = "http://127.0.0.1:9/v1", **extra: Any) -> Any:
    upstreams = [
        {"name": "a", "kind": "vllm", "base_url": fake_url, "model": "m"},
        {"name": "b", "kind": "vllm", "base_url": fake_url, "model": "m"},
        {
            "name": "or",
            "kind": "openai",
            "base_url": fake_url,
            "model": "m",
            "provider": {"only": ["DeepInfra"], "require_parameters": True},
        },
    ]
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": upstreams,
            "models": {
                "smol": {"upstreams": ["a"]},
                "api": {"upstreams": ["or"]},
                "other": {"upstreams": ["b"]},
            },
            "prices": {"or": {"input": 1.0, "cached_input": 0.1, "output": 2.0}},
            **extra,
        }
    )


def record(upstream: str = "a", **fields: Any) -> Record:
    r = Record(
        request_id=f"req-{id(fields)}-{len(fields)}",
        door="chat",
        model="smol",
        stream=False,
        upstream=upstream,
        status=200,
    )
    for k, v in fields.items():
        setattr(r, k, v)
    return r


# ---- windows, trips, demotion ----------------------------------------------------------------


def test_window_is_bounded_and_counts_what_it_holds() -> None:
    w = Window(4)
    for flag in [True, True, False, False, False, False]:
        w.add(flag)
    assert w.n == 4 and w.hits == 0 and w.rate == 0.0
    w.add(True)
    assert w.hits == 1 and w.rate == 0.25


def _exposed(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def test_truncation_trips_after_min_samples_recovers_and_demotes() -> None:
    cfg = WatchdogConfig(window=10, demote=True, truncation=Threshold(rate=0.5, min_samples=4))
    registry = CollectorRegistry()
    changes: list[tuple[str, bool]] = []
    wd = Watchdog(config(), cfg, registry, on_demote=lambda u, d: changes.append((u, d)))
    for _ in range(3):
        wd.submit(record(truncated=True, finish_reason="length", max_tokens=8))
    assert "truncation" not in wd.tripped("a")  # 3 < min_samples
    wd.submit(record(truncated=True, max_tokens=8))
    assert wd.tripped("a") == ["truncation"] and wd.demoted == {"a"}
    assert _exposed(registry, "gateway_watchdog_tripped", upstream="a", check="truncation") == 1
    assert _exposed(registry, "gateway_watchdog_trips_total", upstream="a", check="truncation") == 1
    assert wd.states[("a", "truncation")].last_max_tokens[-1] == 8
    for _ in range(10):
        wd.submit(record())
    assert wd.tripped("a") == [] and wd.demoted == set()
    assert changes == [("a", True), ("a", False)]
    assert _exposed(registry, "gateway_watchdog_tripped", upstream="a", check="truncation") == 0
    assert "gateway_watchdog_tripped" in generate_latest(registry).decode()


def test_only_relevant_records_count_and_gateway_split_upstreams_do_not_leak() -> None:
    cfg = WatchdogConfig(window=10, reasoning_leak=Threshold(rate=0.5, min_samples=2))
    data = config().model_dump(exclude_none=True)
    data["upstreams"][1]["reasoning"] = "gateway"
    wd = Watchdog(config_from(data), cfg)
    for _ in range(3):
        wd.submit(record("b", reasoning_leak=True))  # the gateway splits b on purpose
        wd.submit(record("a", status=502, error_class="X", truncated=True))  # failed: not counted
        wd.submit(record("nowhere", truncated=True))  # unknown upstream: ignored
    assert ("b", "reasoning_leak") not in wd.states
    assert ("a", "truncation") not in wd.states
    for _ in range(2):
        wd.submit(record("a", reasoning_leak=True))
    assert wd.tripped("a") == ["reasoning_leak"]


def test_annotate_flags_provider_mismatch_and_cost_drift() -> None:
    cfg = config()
    r = record(
        "or",
        provider="Together",
        prompt_tokens=1000,
        cached_tokens=800,
        completion_tokens=10,
        charged_cost_usd=0.00102,
    )  # cached billed at full rate
    annotate(r, cfg)
    assert r.provider_mismatch and r.cost_drift
    fine = record(
        "or",
        provider="deepinfra",
        prompt_tokens=1000,
        cached_tokens=800,
        completion_tokens=10,
        charged_cost_usd=(200 * 1.0 + 800 * 0.1 + 20) / 1e6,
    )
    annotate(fine, cfg)
    assert not fine.provider_mismatch and not fine.cost_drift


def test_config_findings_parity_and_thinking() -> None:
    cfg = config_from(
        {
            "upstreams": [
                {
                    "name": "p",
                    "kind": "openai",
                    "base_url": "http://x/v1",
                    "model": "m",
                    "provider": {
                        "order": ["A"],
                        "allow_fallbacks": False,
                        "require_parameters": False,
                    },
                },
                {"name": "n", "kind": "vllm", "base_url": "http://x/v1", "model": "m"},
            ],
            "profiles": {
                "on": {"chat_template_kwargs": {"enable_thinking": True}},
                "off": {"chat_template_kwargs": {"enable_thinking": False}},
            },
            "models": {
                "api": {"upstreams": ["p"], "profile": "on"},
                "node": {"upstreams": ["n"], "profile": "off"},
            },
            "evals": {"targets": ["api", "node"]},
        }
    )
    found = {(f.check, f.upstream) for f in config_findings(cfg)}
    assert found == {
        ("sampling_parity", "p"),
        ("not_at_parity", "p"),  # its provider may ignore the thinking switch
        ("thinking_mismatch", "n"),
    }
    assert config_findings(config()) == []  # require_parameters set, nothing compared


# ---- end to end: the sink on a running gateway (works before the tap wiring) ------------------


def test_watchdog_sink_on_a_live_gateway_trips_on_truncation(fake: FakeHandle) -> None:
    """Answers the upstream cut short (its window: `length` with no cap, or before the cap)
    trip the check; answers that stopped at the client's own max_tokens never do."""
    fake.set_default(tokens=50)
    cfg = config(fake.base_url)
    wd = Watchdog(cfg, WatchdogConfig(window=20, truncation=Threshold(rate=0.5, min_samples=5)))
    with running_gateway(cfg, sinks=[wd]) as url:
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        for stream in (False, True, False, True, False, True):
            r = c.chat.completions.create(
                model="smol", messages=MESSAGES, max_tokens=4, stream=stream
            )
            finish = [ch.choices[0].finish_reason for ch in r if ch.choices] if stream else None
            assert (finish[-1] if stream else r.choices[0].finish_reason) == "length"
        assert wd.tripped("a") == []  # six answers at the client's cap: a healthy upstream
        assert wd.states[("a", "truncation")].window.n == 6
        fake.set_default(tokens=5, finish_reason="length")  # the served window ran out
        for stream in (False, True, False, True, False, True, False):
            r = c.chat.completions.create(
                model="smol", messages=MESSAGES, max_tokens=64, stream=stream
            )
            if stream:
                list(r)
    assert wd.tripped("a") == ["truncation"]  # 7 of the last 13
    assert wd.states[("a", "truncation")].last_max_tokens[-1] == 64


def test_client_caps_are_not_truncation_but_cuts_short_of_the_cap_are() -> None:
    cfg = WatchdogConfig(window=10, truncation=Threshold(rate=0.5, min_samples=4))
    wd = Watchdog(config(), cfg)
    for _ in range(10):
        wd.submit(record(truncated=True, max_tokens=8, completion_tokens=8))
    assert wd.tripped("a") == [] and wd.states[("a", "truncation")].window.hits == 0
    for _ in range(5):
        wd.submit(record(truncated=True, max_tokens=8, completion_tokens=3))
    assert wd.tripped("a") == ["truncation"]


def test_streams_the_upstream_cut_before_they_finished_are_truncation() -> None:
    """A stream ended before its finish reason (`UpstreamCut`) is a 502, and the upstream's
    truncation all the same: it counts, even under the client's cap."""
    cfg = WatchdogConfig(window=10, truncation=Threshold(rate=0.5, min_samples=4))
    wd = Watchdog(config(), cfg)
    for _ in range(4):
        cut = record(status=502, error_class="UpstreamCut", truncated=True, max_tokens=8)
        wd.submit(cut)
    assert wd.tripped("a") == ["truncation"]


def test_wired_gateway_samples_text_flags_degenerate_and_serves_health(fake: FakeHandle) -> None:
    """End to end once wired: [watchdog] config, the taps' TextSampler, /health snapshot."""
    fake.set_default(degenerate=True, tokens=24)
    data = config(fake.base_url).model_dump(exclude_none=True)
    data["watchdog"] = {
        "sample_rate": 1.0,
        "demote": True,
        "degenerate": {"rate": 0.5, "min_samples": 3},
    }
    cfg = config_from(data)
    with running_gateway(cfg) as url:
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        for stream in (False, True, False):
            resp = c.chat.completions.create(model="smol", messages=MESSAGES, stream=stream)
            if stream:
                list(resp)
        health = httpx.get(url.removesuffix("/v1") + "/health").json()
    assert health["watchdog"]["a"]["checks"]["degenerate"]["tripped"] is True
    assert health["watchdog"]["a"]["demoted"] is True


# ---- demotions shared through the store ------------------------------------------------------


async def test_a_demotion_by_one_gateway_is_routed_around_by_the_others(tmp_path: Path) -> None:
    """Two gateways on one store: the one whose watchdog trips demotes the upstream at once and
    tells the store; the other routes around it from its next refresh (each minute), says who
    demoted it, and restores it when the first one does, or when the first stops refreshing."""
    from gateway.edge.app import Gateway
    from gateway.edge.housekeeping import DEMOTION_TTL_S
    from gateway.ledger.store import Store

    cfg = config_from(
        {
            **config().model_dump(exclude_none=True),
            "watchdog": {
                "window": 10,
                "demote": True,
                "truncation": {"rate": 0.5, "min_samples": 5},
            },
        }
    )
    stores = [Store("sqlite:///var/records.db", root=tmp_path) for _ in "ab"]
    here, there = (Gateway(cfg, store=s) for s in stores)
    try:
        for _ in range(10):
            here.watchdog.submit(record("a", truncated=True, finish_reason="length"))
        assert here.pool.states["a"].demoted and here.watchdog.demotions() == {"a": ["truncation"]}
        await here.demotions.drain()  # told the store as it happened
        assert not there.pool.states["a"].demoted
        await there.demotions.share()
        assert there.pool.states["a"].demoted and not there.pool.states["b"].demoted
        assert there.demotions.elsewhere == {"a": {here.id: ["truncation"]}}
        assert there.watchdog.demotions() == {}  # its own watchdog saw nothing

        for _ in range(10):
            here.watchdog.submit(record("a"))  # recovered
        await here.demotions.drain()
        await there.demotions.share()
        assert not here.pool.states["a"].demoted and not there.pool.states["a"].demoted

        for _ in range(10):
            here.watchdog.submit(record("a", truncated=True, finish_reason="length"))
        await here.demotions.drain()
        await there.demotions.share()
        assert there.pool.states["a"].demoted
        # `here` stops (or dies) without restoring it: its rows lapse after the window.
        await there.demotions.share(now=time.time() + DEMOTION_TTL_S + 1)
        assert not there.pool.states["a"].demoted
    finally:
        for s in stores:
            s.close()
