"""Routing by task shape through the real gateway: fake upstreams, the real openai client.

Each shape lands where its rule says (`[models.NAME.shapes]`), a prompt never goes to an upstream
whose window it certainly does not fit, and a scheduled quality-gate round re-decides each shape
on its own eval family: one shape's route changes while another's does not."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa

from evals.result import ItemResult
from evals.runner import RunSpec
from gateway.ledger.store import Store
from gateway.trust.schedule import EvalScheduler
from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from tests.harness import ListSink, config_from, running_gateway, serving

HI: Any = [{"role": "user", "content": "hi"}]
LONG: Any = [
    {"role": "user", "content": "word " * 4000}
]  # 3337 to 6671 tokens by the gateway's count
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


@pytest.fixture
def fakes() -> Iterator[dict[str, FakeHandle]]:
    names = ("general", "coder", "wide", "deep")
    with (
        running_fake(tokens=3) as a,
        running_fake(tokens=3) as b,
        running_fake(tokens=3) as c,
        running_fake(tokens=3) as d,
    ):
        yield dict(zip(names, (a, b, c, d), strict=True))


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)


def upstream(name: str, fake: FakeHandle, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "vllm", "base_url": fake.base_url, "model": "m", **extra}


def test_each_shape_lands_on_its_sub_route(fakes: dict[str, FakeHandle]) -> None:
    cfg = config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [
                upstream("general", fakes["general"], context_window=4096),
                upstream("coder", fakes["coder"]),
                upstream("wide", fakes["wide"], context_window=65536),
                upstream("deep", fakes["deep"]),
            ],
            "models": {
                "smart": {
                    "upstreams": ["general"],
                    "shapes": {"tools": ["coder"], "long_context": ["wide"], "reasoning": "think"},
                },
                "think": {"upstreams": ["deep"]},
            },
        }
    )
    sink = ListSink()
    asks: dict[str, dict[str, Any]] = {
        "default": {"messages": HI},
        "tools": {"messages": HI, "tools": [TOOL]},
        # Over general's 4096-token window by the likeliest count: long_context, so wide.
        "long_context": {"messages": LONG},
        "reasoning": {"messages": HI, "reasoning_effort": "high"},
        "structured": {"messages": HI, "response_format": {"type": "json_object"}},
    }
    landed = {}
    with serving(cfg, sinks=[sink], record=True) as (url, _app):
        c = client(url)
        for shape, ask in asks.items():
            raw = c.chat.completions.with_raw_response.create(model="smart", **ask)
            landed[shape] = raw.headers["x-plumbline-upstream"]
        metrics = httpx.get(url.removesuffix("/v1") + "/metrics").text
    assert landed == {
        "default": "general",
        "tools": "coder",
        "long_context": "wide",
        "reasoning": "deep",  # another route's upstreams
        "structured": "general",  # no rule: the route's own
    }
    assert [r.shape for r in sink.records] == list(asks)
    store = Store(cfg.store.url, root=cfg.root)  # the records' rows, as written at the stop
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT shape FROM requests ORDER BY time")).scalars()
            assert list(rows) == list(asks)
    finally:
        store.close()
    assert len(fakes["coder"].requests()) == 1 and len(fakes["deep"].requests()) == 1
    labels = 'lane="client",model="smart",shape="tools",upstream="coder"'
    line = f"gateway_shape_requests_total{{{labels}}} 1.0"
    assert line in metrics


def test_too_small_upstreams_are_skipped_and_none_left_is_a_400_naming_the_sizes(
    fakes: dict[str, FakeHandle],
) -> None:
    cfg = config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0},
            "upstreams": [
                upstream("small", fakes["general"], context_window=2048),
                upstream("mid", fakes["coder"], context_window=4096),
                upstream("wide", fakes["wide"], context_window=8192),
            ],
            "models": {
                "tight": {"upstreams": ["small", "mid"], "policy": "weighted"},
                "shaped": {"upstreams": ["small"], "shapes": {"long_context": ["small", "mid"]}},
                "roomy": {"upstreams": ["small"], "shapes": {"long_context": ["wide"]}},
            },
        }
    )
    sink = ListSink()
    huge: Any = [{"role": "user", "content": "word " * 6000}]  # at least 5004 tokens
    with running_gateway(cfg, sinks=[sink]) as url:
        c = client(url)
        served = [
            c.chat.completions.with_raw_response.create(model="tight", messages=LONG).headers[
                "x-plumbline-upstream"
            ]
            for _ in range(4)
        ]
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(model="shaped", messages=huge)
        roomy = c.chat.completions.with_raw_response.create(model="roomy", messages=huge)
    assert served == ["mid"] * 4
    assert fakes["general"].requests() == []  # never tried, not tried and refused
    assert all([a.upstream for a in r.attempts] == ["mid"] for r in sink.records[:4])
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert "'small' serves 2048, 'mid' serves 4096 tokens" in error["message"]
    assert sink.records[4].shape == "long_context" and sink.records[4].status == 400
    assert roomy.headers["x-plumbline-upstream"] == "wide"


# ---- the quality gate per shape -----------------------------------------------------------


class Rounds(EvalScheduler):
    """The gateway's own scheduler with the eval runner's results given, not run: each round's
    `wrong` says how many of each family's 12 items an upstream gets wrong (none unless said)."""

    wrong: dict[tuple[str, str], int] = {}

    async def evaluate(self, spec: RunSpec) -> list[ItemResult]:
        out = []
        for label in spec.targets:
            upstream = label.split("@", 1)[1].removesuffix("#control")
            for family in ("tools", "math"):
                misses = self.wrong.get((upstream, family), 0)
                out += [
                    ItemResult(
                        target=label,
                        item_id=f"{family}-{i}",
                        item_digest=f"{family}-{i}",
                        family=family,
                        outcome="wrong" if i < misses else "correct",
                        params_hash="p",
                        upstream=upstream,
                    )
                    for i in range(12)
                ]
        return out


def test_a_round_changes_one_shapes_route_and_not_anothers() -> None:
    with running_fake(tokens=3) as dear, running_fake(tokens=3) as cheap:
        cfg = config_from(
            {
                "server": {"health_interval_s": 0, "retry_backoff_s": 0},
                "upstreams": [upstream("dear", dear), upstream("cheap", cheap)],
                "models": {
                    "smol": {
                        "upstreams": ["dear", "cheap"],
                        "policy": "cheapest_within_floor",
                        # 12 items a family tell apart a 58-point gap at best: a gate that
                        # asks for 60 points lets them decide (docs/rounds.md).
                        "gate": {
                            "min_items": 5,
                            "prices": {"dear": 10.0, "cheap": 1.0},
                            "detect_gap": 0.6,
                        },
                    }
                },
            }
        )
        with serving(cfg) as (url, app):
            gw = app.state.gateway
            rounds = Rounds(gw.config, gw.store, gw.gate_book, url)
            c = client(url)

            def where() -> dict[str, set[str]]:
                asks: dict[str, dict[str, Any]] = {
                    "tools": {"tools": [TOOL]},
                    "reasoning": {"reasoning_effort": "high"},
                    "default": {},
                }
                return {
                    shape: {
                        c.chat.completions.with_raw_response.create(
                            model="smol", messages=HI, **ask
                        ).headers["x-plumbline-upstream"]
                        for _ in range(4)
                    }
                    for shape, ask in asks.items()
                }

            def round_with(wrong: dict[tuple[str, str], int]) -> None:
                rounds.wrong = wrong
                asyncio.run_coroutine_threadsafe(rounds.run_once(), gw.loop).result(timeout=60)

            round_with({("cheap", "tools"): 12, ("cheap", "math"): 12})
            first = where()
            # Cheap catches up on the tools items (one miss: within the floor), not on maths.
            round_with({("cheap", "tools"): 1, ("cheap", "math"): 12})
            second = where()
            book = gw.gate_book.view()  # what GET /admin/gate shows
    assert first == {"tools": {"dear"}, "reasoning": {"dear"}, "default": {"dear"}}
    assert second == {"tools": {"cheap"}, "reasoning": {"dear"}, "default": {"dear"}}
    assert book["smol#tools"]["chosen"] == "cheap" and book["smol#tools"]["shape"] == "tools"
    assert "within the noise floor" in book["smol#tools"]["reason"]
    assert book["smol#reasoning"]["chosen"] == "dear"
    assert book["smol"]["chosen"] == "dear"  # the whole suite: cheap is worse beyond the floor
