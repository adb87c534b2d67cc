"""Shadow evaluation: budget, the mirror against real fake upstreams, the report."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import sqlalchemy as sa

from gateway.config import Price
from gateway.config.trust import ShadowConfig
from gateway.ledger.record import Record
from gateway.ledger.rows import SHADOW_USAGE
from gateway.ledger.store import Store, record_row
from gateway.reports.shadow import report_shadow
from gateway.serving.semantics import Semantics
from gateway.serving.wire import Wire
from gateway.trust.capture import Capture
from gateway.trust.shadow import DailyBudget, ShadowMirror, most_it_can_cost
from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from tests.harness import config_from, running_gateway, wait_for

MESSAGES = [{"role": "user", "content": "hello"}]


def test_daily_budget_resets_each_utc_day() -> None:
    b = DailyBudget(usd=0.01, requests=2)
    assert b.allows(86_400 * 5 + 10)
    b.sent = 2
    assert not b.allows(86_400 * 5 + 20)
    assert b.allows(86_400 * 6 + 1)  # next day
    b.spent_usd = 0.02
    assert not b.allows(86_400 * 6 + 2)


def test_the_most_a_request_can_cost_is_held_against_the_usd_limit() -> None:
    price = Price(input=1.0, cached_input=0.5, output=2.0)
    body = {"messages": MESSAGES, "n": 2}
    bound = (len(json.dumps(body, separators=(",", ":"))) * 1.0 + 2 * 100 * 2.0) / 1e6
    assert most_it_can_cost(body, 100, price) == pytest.approx(bound)
    # Nothing bounds it, or nothing prices it: nothing held.
    assert most_it_can_cost(body, None, price) == 0 == most_it_can_cost(body, 100, None)
    b = DailyBudget(usd=0.01, requests=None)
    assert b.allows(5.0, 0.004)
    b.spent_usd = 0.008  # two such requests in flight
    assert not b.allows(5.0, 0.004) and b.allows(5.0, 0.002)
    assert b.allows(5.0)  # unbounded requests: under the limit is enough


@pytest.fixture
def shadow_fake() -> Iterator[FakeHandle]:
    with running_fake() as handle:
        yield handle


def _config(primary: str, shadow: str) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [
                {"name": "main", "kind": "vllm", "base_url": primary, "model": "m"},
                {"name": "shadow", "kind": "openai", "base_url": shadow, "model": "m"},
            ],
            "models": {"smol": {"upstreams": ["main"]}},
            "prices": {"shadow": {"input": 1.0, "output": 2.0}},
        }
    )


def _primary(text: str, status: int = 200) -> tuple[Record, Capture]:
    r = Record(
        request_id="req-1",
        door="chat",
        model="smol",
        stream=True,
        status=status,
        upstream="main",
        params_hash="abc",
    )
    cap = Capture(r, None, keep_text=True)
    cap.message(0, {"content": text})
    cap.finish()
    return r, cap


async def _mirror(cfg: Any, shadow: ShadowConfig, out: list[Record]) -> tuple[ShadowMirror, Any]:
    wire = Wire(5.0)
    return ShadowMirror(cfg, {"smol": shadow}, wire, out.append), wire


async def test_mirror_pairs_shadow_with_primary_and_records_agreement(
    fake: FakeHandle, shadow_fake: FakeHandle
) -> None:
    shadow_fake.set_default(text="Hello there, friend!", provider="X")
    cfg = _config(fake.base_url, shadow_fake.base_url)
    out: list[Record] = []
    mirror, wire = await _mirror(
        cfg, ShadowConfig(upstream="shadow", fraction=1.0, budget_requests_per_day=10), out
    )
    try:
        body = {
            "model": "smol",
            "messages": MESSAGES,
            "stream": True,
            "temperature": 0.3,
            "top_k": 20,  # vLLM's: an `openai` shadow does not take it (gateway/serving/adapt.py)
            "stream_options": {"include_usage": True},
        }
        record, capture = _primary("hello there friend")
        pending = mirror.consider("smol", "/chat/completions", body, record)
        assert pending is not None and pending.shadow is None  # launched, not awaited
        mirror.primary_done(pending, record, capture)
        await mirror.drain()
    finally:
        await wire.close()
    [shadow] = out
    assert shadow.lane == "shadow" and shadow.shadow_of == "req-1" and shadow.time == record.time
    assert shadow.upstream == "shadow" and shadow.status == 200
    # Hashed as what it was asked, with what the shadow could not be told; named and marked.
    asked = Semantics.of(body, profiled=False)
    assert shadow.params_hash == asked.digest("openai", unsent=["top_k"])
    assert shadow.unsent == "shadow cannot be sent top_k=20 (kind openai)"
    assert shadow.dropped == "top_k"
    assert shadow.agreement == "normalised"
    assert shadow.completion_tokens == 3 and shadow.cost_usd is not None
    [sent] = shadow_fake.requests()
    assert sent["body"]["stream"] is False and "stream_options" not in sent["body"]
    assert sent["body"]["temperature"] == 0.3 and "top_k" not in sent["body"]


async def test_mirror_skips_when_cap_is_full_or_budget_spent(
    fake: FakeHandle, shadow_fake: FakeHandle
) -> None:
    shadow_fake.set_default(hang_before_first_byte=30)
    cfg = _config(fake.base_url, shadow_fake.base_url)
    out: list[Record] = []
    mirror, wire = await _mirror(
        cfg,
        ShadowConfig(
            upstream="shadow",
            fraction=1.0,
            max_concurrency=1,
            budget_requests_per_day=2,
            timeout_s=0.3,
        ),
        out,
    )
    body = {"model": "smol", "messages": MESSAGES}
    try:
        first = mirror.consider("smol", "/chat/completions", body, _primary("a")[0])
        assert first is not None
        assert mirror.consider("smol", "/chat/completions", body, _primary("a")[0]) is None
        await mirror.drain()  # the shadow times out; the slot frees
        second = mirror.consider("smol", "/chat/completions", body, _primary("a")[0])
        assert second is not None
        await mirror.drain()
        assert mirror.consider("smol", "/chat/completions", body, _primary("a")[0]) is None
        # Other lanes and unshadowed models are never mirrored.
        eval_rec = _primary("a")[0]
        eval_rec.lane = "eval"
        assert mirror.consider("smol", "/chat/completions", body, eval_rec) is None
        for p in (first, second):
            r, c = _primary("a")
            mirror.primary_done(p, r, c)
    finally:
        await wire.close()
    counts = {
        s.labels["outcome"]: s.value
        for m in mirror.requests.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert counts == {"mirrored": 2, "skipped_cap": 1, "skipped_budget": 1, "failed": 2}
    assert [r.agreement for r in out] == ["shadow_failed", "shadow_failed"]
    assert out[0].error_class == "ShadowTimeout"


def test_report_shadow_joins_pairs(tmp_path: Path) -> None:
    cfg = _config("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1")
    rows = []
    for i, agree in enumerate(["exact", "normalised", "different", "tools_same"]):
        p = Record(
            request_id=f"p{i}",
            door="chat",
            model="smol",
            stream=False,
            time=100.0 + i,
            upstream="main",
            status=200,
            e2e_s=1.0,
            completion_tokens=10,
        )
        s = Record(
            request_id=f"p{i}-shadow",
            door="chat",
            model="smol",
            stream=False,
            time=100.0 + i,
            upstream="shadow",
            lane="shadow",
            shadow_of=f"p{i}",
            agreement=agree,
            status=200,
            e2e_s=2.0,
            completion_tokens=12,
            cost_usd=0.01,
        )
        rows += [record_row(p), record_row(s)]
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.write(rows)
    try:
        doc = json.loads(report_shadow(cfg, "1h", "json", store=store, now=200.0))
        table = report_shadow(cfg, "1h", "table", store=store, now=200.0)
    finally:
        store.close()
    [row] = doc["rows"]
    assert row["pairs"] == 4 and row["agree_rate"] == pytest.approx(0.75)
    assert row["primary_e2e_s"] == pytest.approx(1.0) and row["shadow_e2e_s"] == pytest.approx(2.0)
    assert row["shadow_tokens"] == 48 and row["shadow_cost_usd"] == pytest.approx(0.04)
    assert "main → shadow" in table


def test_wired_shadow_run_end_to_end(
    fake: FakeHandle, shadow_fake: FakeHandle, tmp_path: Path
) -> None:
    """A live route with a shadow: the client sees the primary only; the store gets the pairs."""
    fake.set_default(text="The capital is Paris.")
    shadow_fake.set_default(text="the capital is paris", cost=0.0001)
    data = _config(fake.base_url, shadow_fake.base_url).model_dump(exclude_none=True)
    data["models"]["smol"]["shadow"] = {
        "upstream": "shadow",
        "fraction": 1.0,
        "budget_requests_per_day": 100,
    }
    data["store"] = {"url": f"sqlite:///{tmp_path / 'w.db'}"}
    cfg = config_from(data)
    with running_gateway(cfg, record=True) as url:
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        for stream in (False, True):
            resp = c.chat.completions.create(model="smol", messages=MESSAGES, stream=stream)
            text = (
                "".join(ch.choices[0].delta.content or "" for ch in resp if ch.choices)
                if stream
                else resp.choices[0].message.content
            )
            assert text.strip() == "The capital is Paris."
        wait_for(lambda: len(shadow_fake.requests()) == 2)
    # Gateway.stop drains the mirror before it closes the record queue.
    store = Store(cfg.store.url)
    try:
        doc = json.loads(report_shadow(cfg, "1h", "json", store=store))
    finally:
        store.close()
    [row] = doc["rows"]
    assert row["pairs"] == 2 and row["agreements"] == {"normalised": 2}


async def test_mirrors_on_one_store_share_the_daily_budget(
    fake: FakeHandle, shadow_fake: FakeHandle, tmp_path: Path
) -> None:
    """Two gateways (or one restarted) mirror against one store: the day's request budget is
    theirs together, not each one's; a refused mirror sends nothing and writes no record."""
    cfg = _config(fake.base_url, shadow_fake.base_url)
    shadow = ShadowConfig(upstream="shadow", fraction=1.0, budget_requests_per_day=3)
    store = Store("sqlite:///var/records.db", root=tmp_path)
    out: list[Record] = []
    wire = Wire(5.0)
    mirrors = [ShadowMirror(cfg, {"smol": shadow}, wire, out.append, store=store) for _ in "ab"]
    body = {"model": "smol", "messages": MESSAGES}
    try:
        for i in range(3):
            for mirror in mirrors:
                record, capture = _primary("hello")
                record.request_id = f"req-{i}-{id(mirror)}"
                pending = mirror.consider("smol", "/chat/completions", body, record)
                assert pending is not None  # each process alone is still under 3 a day
                await mirror.drain()
                mirror.primary_done(pending, record, capture)
    finally:
        await wire.close()
        store.close()
    counts: dict[str, float] = {}
    for mirror in mirrors:
        for metric in mirror.requests.collect():
            for s in metric.samples:
                if s.name.endswith("_total"):
                    counts[s.labels["outcome"]] = counts.get(s.labels["outcome"], 0) + s.value
    assert counts == {"mirrored": 3, "skipped_budget": 3}
    assert len(shadow_fake.requests()) == 3 and len(out) == 3


async def test_shadows_in_flight_cannot_pass_the_usd_limit(
    fake: FakeHandle, shadow_fake: FakeHandle
) -> None:
    """Each mirrored request holds the most it can cost until its cost is known: with shadows
    that have not answered yet, the day's USD limit still holds; what they did not spend is
    given back."""
    shadow_fake.set_default(hang_before_first_byte=30)
    cfg = _config(fake.base_url, shadow_fake.base_url)
    out: list[Record] = []
    shadow = ShadowConfig(
        upstream="shadow", fraction=1.0, max_concurrency=8, budget_usd_per_day=0.005, timeout_s=0.5
    )
    mirror, wire = await _mirror(cfg, shadow, out)
    body = {"model": "smol", "messages": MESSAGES, "max_tokens": 1000}  # ~$0.0021 at most
    try:
        primaries = [_primary("a")[0] for _ in "abcd"]
        for primary in primaries:
            primary.max_tokens = 1000  # as the door sets it from the body
        taken = [mirror.consider("smol", "/chat/completions", body, p) for p in primaries]
        assert [p is not None for p in taken] == [True, True, False, False]
        assert mirror.budgets["smol"].spent_usd == pytest.approx(
            2 * most_it_can_cost(body, 1000, cfg.prices["shadow"])
        )
        await mirror.drain()  # both time out having spent nothing: their holds come back
        assert mirror.budgets["smol"].spent_usd == pytest.approx(0.0)
        assert mirror.consider("smol", "/chat/completions", body, _primary("a")[0]) is not None
        await mirror.drain()
    finally:
        await wire.close()


def reserved(store: Store) -> int:
    """Shadow requests reserved in the store today, for every model."""
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.sum(SHADOW_USAGE.c.requests))).scalar() or 0)


async def test_a_reservation_the_store_refuses_holds_nothing_in_this_process(
    fake: FakeHandle, shadow_fake: FakeHandle, tmp_path: Path
) -> None:
    """Two gateways on one store, a USD budget with room for two holds: the first takes both;
    the second's mirror is refused by the store and keeps no hold or count of its own, so it
    mirrors again once the first's holds are given back."""
    shadow_fake.set_default(hang_before_first_byte=30)
    cfg = _config(fake.base_url, shadow_fake.base_url)
    shadow = ShadowConfig(
        upstream="shadow", fraction=1.0, max_concurrency=8, budget_usd_per_day=0.005, timeout_s=0.5
    )
    store = Store("sqlite:///var/records.db", root=tmp_path)
    out: list[Record] = []
    wire = Wire(5.0)
    first, second = (
        ShadowMirror(cfg, {"smol": shadow}, wire, out.append, store=store) for _ in "ab"
    )
    body = {"model": "smol", "messages": MESSAGES, "max_tokens": 1000}  # ~$0.0021 at most

    def primary() -> Record:
        record = _primary("a")[0]
        record.max_tokens = 1000
        return record

    try:
        taken = [first.consider("smol", "/chat/completions", body, primary()) for _ in "ab"]
        for _ in range(1000):  # both reserve in the store before the second gateway asks
            if reserved(store) == 2:
                break
            await asyncio.sleep(0.01)
        assert reserved(store) == 2
        refused = second.consider("smol", "/chat/completions", body, primary())
        await second.drain()
        assert refused is not None and refused.done  # passed locally, refused by the store
        assert second.budgets["smol"].spent_usd == 0 and second.budgets["smol"].sent == 0
        await first.drain()  # the two time out, spending nothing: their holds come back
        again = second.consider("smol", "/chat/completions", body, primary())
        await second.drain()
        assert all(p is not None for p in taken) and again is not None and not again.done
    finally:
        await wire.close()
        store.close()
