"""Planted faults in what was served, each flagged without a human looking.

Live faults run through a real gateway against the fault-injecting fake upstream, with the
watchdog as a record sink (works before the lead's wiring). Where the wiring is still missing
(the taps calling the TextSampler) the test feeds the gateway's real output to the same
`Capture` the taps will call; `test_watchdog.py` holds the fully wired variant (skipped until
wired). Eval-side faults drive the runner, statistics and gate directly.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from evals import families
from evals.item import Item, Reply
from evals.result import ItemResult
from evals.runner import Runner, RunSpec
from evals.stats import NoiseFloor, ParamsMismatch, against_floor, pair, summarise
from gateway.config.trust import CHECKS, Threshold, WatchdogConfig
from gateway.ledger import truncation
from gateway.ledger.record import Record
from gateway.trust.capture import Capture
from gateway.trust.gate import decide
from gateway.trust.watchdog import Watchdog, config_findings
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import config_from, running_gateway

MESSAGES = [{"role": "user", "content": "hello"}]
LONG = [{"role": "user", "content": " ".join(f"w{i}" for i in range(100))}]
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a"],
        },
    },
}
LOW = Threshold(rate=0.5, min_samples=3)


class Collect:
    """A record sink that keeps what it is given."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def submit(self, record: Record) -> None:
        self.records.append(record)


def gateway_config(url: str, **kw: Any) -> Any:
    upstream: dict[str, Any] = {
        "name": "up",
        "kind": kw.pop("kind", "vllm"),
        "base_url": url,
        "model": "m",
        **kw.pop("upstream", {}),
    }
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [upstream],
            "models": {"smol": {"upstreams": ["up"], "profile": "smollm2"}},
            **kw,
        }
    )


def serve(cfg: Any, n: int, **request: Any) -> tuple[Watchdog, Collect, list[Any]]:
    wd = Watchdog(
        cfg,
        WatchdogConfig(
            window=50,
            **{c: LOW for c in CHECKS},
        ),
    )
    sink = Collect()
    replies = []
    with running_gateway(cfg, sinks=[sink, wd]) as url:
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        for _ in range(n):
            replies.append(
                c.chat.completions.with_raw_response.create(
                    model="smol", **{"messages": MESSAGES, **request}
                )
            )
    return wd, sink, replies


def test_fault_1_answers_cut_by_a_small_max_tokens(fake: FakeHandle) -> None:
    """A small cap the client chose cuts every answer: each record says so (truncated, cause
    `client_cap`), and the healthy upstream is not demoted for the client's own choice; the
    same answers cut by the server with no cap trip the truncation check."""
    fake.set_default(tokens=64)
    wd, sink, _ = serve(gateway_config(fake.base_url), 3, max_tokens=5)
    assert [(r.truncated, r.finish_reason, r.max_tokens) for r in sink.records] == [
        (True, "length", 5)
    ] * 3
    assert [truncation.cause(r) for r in sink.records] == ["client_cap"] * 3
    assert wd.tripped("up") == []
    fake.set_default(tokens=64, finish_reason="length")
    wd, sink, _ = serve(gateway_config(fake.base_url), 3)
    assert [truncation.cause(r) for r in sink.records] == ["upstream"] * 3
    assert wd.tripped("up") == ["truncation"]


def test_fault_2_think_in_content(fake: FakeHandle) -> None:
    fake.set_default(leak_think=True)
    wd, sink, replies = serve(gateway_config(fake.base_url), 3)
    assert all(r.reasoning_leak for r in sink.records)
    assert "<think>" not in replies[0].parse().choices[0].message.content  # split for the client
    assert wd.tripped("up") == ["reasoning_leak"]


def test_fault_3_greedy_arm_against_the_vendor_recipe(fake: FakeHandle) -> None:
    _, _, replies = serve(gateway_config(fake.base_url), 1)
    _, _, greedy = serve(gateway_config(fake.base_url), 1, temperature=0)
    recipe_hash = replies[0].headers["x-plumbline-params-hash"]
    greedy_hash = greedy[0].headers["x-plumbline-params-hash"]
    assert recipe_hash != greedy_hash

    def arm(target: str, h: str) -> list[ItemResult]:
        return [
            ItemResult(target, f"i{i}", f"d{i}", "math", "correct", params_hash=h)
            for i in range(40)
        ]

    with pytest.raises(ParamsMismatch):
        pair(arm("recipe", recipe_hash), arm("greedy", greedy_hash))
    controls = [pair(arm("c1", recipe_hash), arm("c2", recipe_hash))]
    d = decide(
        "smol",
        {"recipe": arm("recipe", recipe_hash), "greedy": arm("greedy", greedy_hash)},
        controls,
        {"recipe": 1.0, "greedy": 0.1},
        min_items=10,
    )
    assert d.chosen == "recipe"
    why = next(a.why for a in d.arms if a.upstream == "greedy")
    assert why.startswith("refused, not at parity with recipe: greedy was asked otherwise")


def test_fault_4_provider_ignores_top_k(fake: FakeHandle) -> None:
    """A provider may ignore top_k only where the config says require_parameters = false (the
    gateway sends it true otherwise): both the config check and the parity gap say so."""
    fake.set_default(provider="Together", ignore_params=["top_k"])
    routing = {"order": ["DeepInfra"], "allow_fallbacks": False, "require_parameters": False}
    cfg = gateway_config(fake.base_url, kind="openai", upstream={"provider": routing})
    wd, sink, replies = serve(cfg, 3, extra_body={"top_k": 20})
    assert ("sampling_parity", "up") in {(f.check, f.upstream) for f in wd.findings}
    assert all(r.provider_mismatch for r in sink.records)
    assert set(wd.tripped("up")) == {"provider_mismatch", "sampling_parity", "not_at_parity"}
    assert fake.requests()[0]["ignored_params"] == ["top_k"]  # what the flags stand for
    assert "up cannot be sent require_parameters=" in replies[0].headers["x-plumbline-unsent"]
    fake.reset()
    unsaid = {"order": ["DeepInfra"], "allow_fallbacks": False}
    told = gateway_config(fake.base_url, kind="openai", upstream={"provider": unsaid})
    serve(told, 1, extra_body={"top_k": 20})
    assert fake.requests()[0]["body"]["provider"]["require_parameters"] is True
    assert config_findings(told) == []
    pinned = gateway_config(
        fake.base_url,
        kind="openai",
        upstream={"provider": {"only": ["Together"], "require_parameters": True}},
    )
    assert config_findings(pinned) == []


def test_fault_5_degenerate_output(fake: FakeHandle) -> None:
    fake.set_default(degenerate=True, tokens=24)
    cfg = gateway_config(fake.base_url)
    wd = Watchdog(cfg, WatchdogConfig(degenerate=LOW))
    with running_gateway(cfg) as url:
        for _ in range(3):
            record = Record(
                request_id="r", door="chat", model="smol", stream=True, upstream="up", status=200
            )
            capture = Capture(record, None, keep_text=True)  # what the stream tap will feed
            with httpx.stream(
                "POST",
                url + "/chat/completions",
                timeout=30,
                json={"model": "smol", "messages": MESSAGES, "stream": True},
            ) as resp:
                for line in resp.iter_lines():
                    if line.startswith("data: {"):
                        for ch in json.loads(line[6:]).get("choices") or ():
                            capture.delta(ch.get("index", 0), ch.get("delta") or {})
            capture.finish()
            assert record.sampled and record.degenerate, capture.answer
            wd.submit(record)
    assert wd.tripped("up") == ["degenerate"]


def test_fault_6_thinking_on_for_one_arm_off_for_the_other(fake: FakeHandle) -> None:
    cfg = config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [
                {"name": "x", "kind": "vllm", "base_url": fake.base_url, "model": "m"},
                {"name": "y", "kind": "vllm", "base_url": fake.base_url, "model": "m"},
            ],
            "profiles": {
                "on": {"chat_template_kwargs": {"enable_thinking": True}},
                "off": {"chat_template_kwargs": {"enable_thinking": False}},
            },
            "models": {
                "thinks": {"upstreams": ["x"], "profile": "on"},
                "quick": {"upstreams": ["y"], "profile": "off"},
            },
            "evals": {"targets": ["thinks", "quick"]},
        }
    )
    assert [(f.check, f.upstream) for f in config_findings(cfg)] == [("thinking_mismatch", "y")]
    with running_gateway(cfg) as url:
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        hashes = [
            c.chat.completions.with_raw_response.create(model=m, messages=MESSAGES).headers[
                "x-plumbline-params-hash"
            ]
            for m in ("thinks", "quick")
        ]
    assert hashes[0] != hashes[1]  # so no eval pair of the two is ever formed
    with pytest.raises(ParamsMismatch):
        pair(
            [ItemResult("thinks", "i", "d", "math", "correct", params_hash=hashes[0])],
            [ItemResult("quick", "i", "d", "math", "correct", params_hash=hashes[1])],
        )


def test_fault_7_cached_input_billed_at_the_full_rate(fake: FakeHandle) -> None:
    prices = {"up": {"input": 1.0, "cached_input": 0.1, "output": 2.0}}
    cfg = gateway_config(fake.base_url, kind="openai", prices=prices)
    fake.set_default(tokens=10, cached_tokens=80)
    _, probe, _ = serve(cfg, 1, messages=LONG)
    prompt = probe.records[0].prompt_tokens
    full_rate = (prompt * 1.0 + 10 * 2.0) / 1e6  # the 80 cached tokens billed as input
    fair = ((prompt - 80) * 1.0 + 80 * 0.1 + 10 * 2.0) / 1e6
    fake.set_default(tokens=10, cached_tokens=80, cost=full_rate)
    wd, sink, _ = serve(cfg, 3, messages=LONG)
    r = sink.records[0]
    assert r.cached_tokens == 80 and r.cost_usd == pytest.approx(fair) and r.cost_drift
    assert wd.tripped("up") == ["cost_drift"]
    fake.set_default(tokens=10, cached_tokens=80, cost=fair)  # billed correctly: no drift
    wd, sink, _ = serve(cfg, 3, messages=LONG)
    assert not any(r.cost_drift for r in sink.records) and wd.tripped("up") == []


async def test_fault_8_timed_out_items_stay_in_the_denominator(fake: FakeHandle, tmp_path) -> None:
    item = Item("q1", "math", ({"role": "user", "content": "1+1?"},), "2", "math_integer")
    runner = Runner(
        RunSpec(base_url=fake.base_url, targets=["m"], timeout_s=0.5, runs_dir=tmp_path)
    )
    fake.script({"hang_before_first_byte": 3})
    timed_out = await runner.run_item("m", item)
    fake.set_default(text="Final answer: 2")
    answered = await runner.run_item("m", item)
    await runner.client.close()
    assert timed_out.outcome == "timeout" and answered.outcome != "timeout"
    s = summarise([timed_out, answered])
    assert s.n == 2 and s.rates["timeout"] == 0.5 and s.accuracy <= 0.5
    p = pair([timed_out], [answered])  # a timeout is the model's failure, paired, not dropped
    assert p.n == 1 and p.errored == 0


def test_fault_9_a_difference_inside_the_noise_floor_is_not_real() -> None:
    def arm(t: str, wrong: set[int]) -> list[ItemResult]:
        return [
            ItemResult(t, f"i{i}", f"d{i}", "math", "wrong" if i in wrong else "correct")
            for i in range(100)
        ]

    control = pair(
        arm("c1", set(range(20)) | {50, 51, 52}), arm("c2", set(range(20)) | {60, 61, 62})
    )
    a, b = arm("api", set(range(20))), arm("node", set(range(20)) | {70, 71, 72, 73})
    p = pair(a, b)
    assert p.gap == pytest.approx(-0.04)
    assert not against_floor(p, NoiseFloor.from_controls([control])).exceeds
    results, prices = {"api": a, "node": b}, {"api": 1.0, "node": 0.2}
    # 100 items can tell apart a gap of about 8 points here: a gate that asks for 10 moves.
    d = decide("smol", results, [control], prices, min_items=50, detect_gap=0.1)
    assert d.chosen == "node" and "within the floor" in d.reason
    # One that asks for 5 cannot take 100 items as proof of parity, and says so.
    strict = decide("smol", results, [control], prices, min_items=50)
    assert strict.chosen == "api" and "a 5-point gap needs" in strict.resolution


def test_fault_10_malformed_edit_blocks_and_tool_calls_counted_apart(fake: FakeHandle) -> None:
    edit = families.build("editformat", 0, 1)[0]
    tool_item = Item(
        "t1",
        "tools",
        ({"role": "user", "content": "add 2"},),
        {"calls": [{"name": "add", "arguments": {"a": [2]}}]},
        "bfcl_ast",
        tools=(ADD,),
    )
    bad_call = {"id": "c", "type": "function", "function": {"name": "add", "arguments": "{a:"}}
    outcomes = [
        families.score(edit, Reply(content="I would rewrite the loop.")).outcome,
        families.score(tool_item, Reply(content=None, tool_calls=(bad_call,))).outcome,
        families.score(tool_item, Reply(content="The answer is 2.")).outcome,
    ]
    assert outcomes == ["malformed", "malformed", "wrong"]
    rates = summarise(
        [ItemResult("x", f"i{i}", f"d{i}", "f", o) for i, o in enumerate(outcomes)]
    ).rates
    assert rates["malformed"] == pytest.approx(2 / 3) and rates["wrong"] == pytest.approx(1 / 3)
    # Live: the gateway-side check flags the same malformed call on the record.
    fake.set_default(tool_call={"name": "add", "arguments": "{a:"})
    _, _, replies = serve(gateway_config(fake.base_url), 1, tools=[ADD])
    message = replies[0].parse().choices[0].message.model_dump()
    record = Record(request_id="r", door="chat", model="smol", stream=False)
    capture = Capture(record, [ADD], keep_text=False)  # what tap_body will feed
    capture.message(0, message)
    capture.finish()
    assert record.tool_call_error == "invalid_json"
