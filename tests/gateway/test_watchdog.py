"""Watchdogs: tool-call checks, the text sampler, sliding windows, trips, demotion, the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.config import Config
from gateway.fake_upstream import FakeHandle
from gateway.record import Record
from gateway.store import Store, record_row
from gateway.trust_config import Threshold, WatchdogConfig
from gateway.watchdog import (
    Capture,
    TextSampler,
    ToolCall,
    Watchdog,
    Window,
    annotate,
    check_tool_calls,
    config_findings,
    demote_order,
    report_health,
)
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


# ---- tool calls ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (ToolCall("add", '{"a": 1, "b": 2}'), None),
        (ToolCall("add", '{"a": 1, "b": '), "invalid_json"),
        (ToolCall("add", "[1, 2]"), "invalid_json"),
        (ToolCall("mul", '{"a": 1, "b": 2}'), "unknown_tool"),
        (ToolCall("add", '{"a": "1", "b": 2}'), "schema"),
        (ToolCall("add", '{"a": 1}'), "schema"),
        (ToolCall("add", '{"a": 1, "b": 2, "c": 3}'), "schema"),
        (ToolCall(None, "{}"), "unknown_tool"),
    ],
)
def test_check_tool_calls_names_the_problem(call: ToolCall, kind: str | None) -> None:
    problems = check_tool_calls([ADD], [call])
    assert [p.split(":")[0] for p in problems] == ([kind] if kind else [])


def test_a_broken_client_schema_is_not_the_models_fault() -> None:
    broken = {"type": "function", "function": {"name": "f", "parameters": {"type": 12}}}
    assert check_tool_calls([broken], [ToolCall("f", '{"x": 1}')]) == []


# ---- capture and sampler -------------------------------------------------------------------


def test_capture_assembles_streamed_tool_calls_and_flags_schema_breaks() -> None:
    r = record()
    cap = Capture(r, [ADD], keep_text=False)
    first = {"index": 0, "function": {"name": "add", "arguments": '{"a": 1'}}
    cap.delta(0, {"tool_calls": [first]})
    cap.delta(0, {"tool_calls": [{"index": 0, "function": {"arguments": ', "b": "two"}'}}]})
    cap.delta(1, {"tool_calls": [{"index": 0, "function": {"name": "zzz", "arguments": "{}"}}]})
    cap.finish()
    assert cap.tool_calls() == [ToolCall("add", '{"a": 1, "b": "two"}')]
    assert r.tool_call_error == "schema"
    assert r.sampled is False and cap.answer == ""


def test_capture_flags_degenerate_answers_and_reasoning_only_when_sampled() -> None:
    r = record()
    cap = Capture(r, None, keep_text=True)
    for piece in ["111", "222", "333", "444", "111", "222", "333", "444"]:
        cap.delta(0, {"content": piece + " "})
    cap.finish()
    assert r.sampled and r.degenerate
    healthy = record()
    cap = Capture(healthy, None, keep_text=True)
    cap.message(0, {"content": "Paris is the capital of France.", "reasoning_content": "easy"})
    cap.finish()
    assert healthy.sampled and not healthy.degenerate
    loop = record()
    cap = Capture(loop, None, keep_text=True)
    cap.message(0, {"content": "ok", "reasoning": "wait " * 80})
    cap.finish()
    assert loop.degenerate


def test_capture_keeps_a_bounded_amount_of_text() -> None:
    cap = Capture(record(), None, keep_text=True, max_chars=300)
    for _ in range(100):
        cap.delta(0, {"content": "abcdefghij"})
    assert len(cap.answer) == 300


def test_sampler_is_cheap_when_not_sampling() -> None:
    draws = iter([0.9, 0.01])
    sampler = TextSampler(0.05, rand=lambda: next(draws))
    assert sampler.start(record(), {"messages": MESSAGES}) is None  # 0.9: not sampled
    sampled = sampler.start(record(), {"messages": MESSAGES})
    assert sampled is not None and sampled.keep_text
    never = TextSampler(0.0)
    with_tools = never.start(record(), {"messages": MESSAGES, "tools": [ADD]})
    assert with_tools is not None and not with_tools.keep_text  # tools: always checked
    shadowed = never.start(record(), {"messages": MESSAGES}, always=True)
    assert shadowed is not None and shadowed.keep_text


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
                    "provider": {"order": ["A"], "allow_fallbacks": False},
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
    assert found == {("sampling_parity", "p"), ("thinking_mismatch", "n")}
    assert config_findings(config()) == []  # require_parameters set, nothing compared


def test_demote_order_is_stable() -> None:
    assert demote_order(["a", "b", "c", "d"], {"b", "a"}) == ["c", "d", "a", "b"]
    assert demote_order(["a"], set()) == ["a"]


# ---- the report ------------------------------------------------------------------------------


def test_report_health_reads_flags_back_from_the_store(tmp_path: Path) -> None:
    cfg = config()
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    rows = []
    for i in range(30):
        r = record(
            "a",
            truncated=i < 12,
            max_tokens=16 if i < 6 else None,
            sampled=i < 10,
            degenerate=i < 3,
        )
        r.request_id, r.time = f"req-{i}", 1000.0 + i
        rows.append(record_row(r))
    for i in range(10):
        r = record("or", provider="Other" if i < 2 else "DeepInfra", provider_mismatch=i < 2)
        r.request_id, r.time = f"or-{i}", 1000.0 + i
        rows.append(record_row(r))
    store.write(rows)
    try:
        doc = __import__("json").loads(report_health(cfg, "1h", "json", store=store, now=2000.0))
        table = report_health(cfg, "1h", "table", store=store, now=2000.0)
        csv = report_health(cfg, "1h", "csv", store=store, now=2000.0)
    finally:
        store.close()
    by = {r["upstream"]: r for r in doc["rows"]}
    assert by["a"]["rates"]["truncation"] == pytest.approx(12 / 30)
    assert by["a"]["capped_truncations"] == 6
    assert by["a"]["rates"]["degenerate"] == pytest.approx(0.3)
    assert set(by["a"]["tripped"]) == {"truncation", "degenerate"}
    assert by["or"]["rates"]["provider_mismatch"] == pytest.approx(0.2)
    assert by["or"]["tripped"] == ["provider_mismatch"]
    assert "truncation" in table and csv.splitlines()[0].startswith("upstream,requests")


# ---- end to end: the sink on a running gateway (works before the tap wiring) ------------------


def test_watchdog_sink_on_a_live_gateway_trips_on_truncation(fake: FakeHandle) -> None:
    fake.set_default(tokens=50)
    cfg = config(fake.base_url)
    wd = Watchdog(cfg, WatchdogConfig(window=20, truncation=Threshold(rate=0.5, min_samples=5)))
    with running_gateway(cfg, sinks=[wd]) as url:
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        for _ in range(5):
            c.chat.completions.create(model="smol", messages=MESSAGES, max_tokens=4)
    assert wd.tripped("a") == ["truncation"]
    assert wd.states[("a", "truncation")].last_max_tokens[-1] == 4


WIRED = "watchdog" in Config.model_fields  # the lead wires config, app, taps together


@pytest.mark.skipif(not WIRED, reason="needs the lead's wiring: Gateway.watchdog + tap sampler")
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
