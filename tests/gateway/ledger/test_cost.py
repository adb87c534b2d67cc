"""Request cost, drift, node cost per million tokens and the API/node ratio."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import Config, Node, Price
from gateway.ledger.cost import (
    Usage,
    active_hour_cost,
    busy_hours,
    drift,
    drifted,
    economics,
    node_cost,
    price_record,
    request_cost,
)
from gateway.ledger.record import Record

PRICE = Price(input=1.0, cached_input=0.1, output=2.0, drift_threshold=0.05)


def rec(
    prompt: int = 0, cached: int = 0, completion: int = 0, reasoning: int = 0, **kw: object
) -> Record:
    return Record(
        request_id="r",
        door="chat",
        model="m",
        stream=False,
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
        reasoning_tokens=reasoning,
        **kw,
    )  # type: ignore[arg-type]


def config() -> Config:
    return Config.model_validate(
        {
            "upstreams": [
                {
                    "name": "box-a",
                    "kind": "vllm",
                    "base_url": "http://127.0.0.1:1/v1",
                    "model": "q",
                    "node": "box",
                },
                {
                    "name": "box-b",
                    "kind": "vllm",
                    "base_url": "http://127.0.0.1:2/v1",
                    "model": "g",
                    "node": "box",
                },
                {
                    "name": "or",
                    "kind": "openai",
                    "base_url": "https://openrouter.ai/api/v1",
                    "model": "q/q",
                },
            ],
            "models": {
                "qwen": {"upstreams": ["box-a"], "fallback": ["or"]},
                "gemma": {"upstreams": ["box-b"]},
            },
            "prices": {"or": {"input": 0.42, "output": 3.00}},
            "nodes": {"box": {"cost_per_hour": 3.08, "basis": "list", "utilisation": 0.7}},
        }
    )


def test_cached_tokens_are_billed_once_at_the_cache_rate() -> None:
    cost = request_cost(rec(1000, 800, 200), PRICE)
    assert cost == pytest.approx((200 * 1.0 + 800 * 0.1 + 200 * 2.0) / 1e6)


def test_without_a_cache_rate_cached_tokens_cost_input() -> None:
    price = Price(input=1.0, output=2.0)
    assert request_cost(rec(1000, 800, 0), price) == pytest.approx(1000 / 1e6)


def test_reasoning_is_part_of_completion_and_not_billed_again() -> None:
    assert request_cost(rec(10, 0, 200, reasoning=150), PRICE) == request_cost(
        rec(10, 0, 200), PRICE
    )


def test_no_price_no_cost() -> None:
    assert request_cost(rec(10, 0, 10), None) is None


def test_charged_cost_reconciliation_and_drift() -> None:
    exact = rec(1000, 800, 200, charged_cost_usd=680 / 1e6)
    assert drift(request_cost(exact, PRICE), exact.charged_cost_usd) == pytest.approx(0)
    assert not drifted(exact, PRICE)
    within = rec(1000, 800, 200, charged_cost_usd=700 / 1e6)  # 2.9% off, threshold 5%
    assert not drifted(within, PRICE)
    double_billed = rec(1000, 800, 200, charged_cost_usd=1480 / 1e6)
    assert drifted(double_billed, PRICE)
    assert not drifted(rec(1000, 800, 200), PRICE)  # no charged cost, nothing to compare


def test_price_record_clamps_then_prices() -> None:
    cfg = Config.model_validate(
        {
            "upstreams": [
                {"name": "or", "kind": "openai", "base_url": "https://x/v1", "model": "m"}
            ],
            "prices": {"or": {"input": 1.0, "output": 2.0}},
        }
    )
    r = rec(10, 50, 5, reasoning=9, upstream="or")
    price_record(r, cfg)
    assert (r.cached_tokens, r.reasoning_tokens, r.usage_estimated) == (10, 5, True)
    assert r.cost_usd == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)


counts = st.integers(min_value=0, max_value=10**7)
rates = st.floats(min_value=0, max_value=100, allow_nan=False)


@given(counts, counts, counts, counts)
def test_invariants_hold_after_check(
    prompt: int, cached: int, completion: int, reasoning: int
) -> None:
    r = rec(prompt, cached, completion, reasoning)
    r.check_invariants()
    assert r.cached_tokens <= r.prompt_tokens
    assert r.reasoning_tokens <= r.completion_tokens


@given(counts, counts, counts, st.integers(0, 1000), rates, rates, rates)
def test_cost_is_monotone_and_never_bills_cache_twice(
    prompt: int, cached: int, completion: int, more: int, inp: float, cache: float, out: float
) -> None:
    cached = min(cached, prompt)
    price = Price(input=inp, cached_input=min(cache, inp), output=out)
    base = request_cost(rec(prompt, cached, completion), price)
    assert base is not None and base >= 0
    assert request_cost(rec(prompt + more, cached, completion), price) >= base
    assert request_cost(rec(prompt, cached, completion + more), price) >= base
    # Caching can only make a request cheaper, never bill it above the uncached price.
    uncached = request_cost(rec(prompt, 0, completion), price)
    assert base <= uncached + 1e-12


def test_busy_hours_is_the_union_of_intervals() -> None:
    assert busy_hours([(0, 1800), (900, 2700), (3600, 5400)]) == pytest.approx((2700 + 1800) / 3600)
    assert busy_hours([]) == 0


def test_node_cost_per_million_splits_by_output_weight_and_conserves_cost() -> None:
    node = Node(cost_per_hour=3.08, utilisation=0.7)
    assert active_hour_cost(node) == pytest.approx(4.40)
    nc = node_cost(node, 1.0, 147_000_000, 18_000_000, output_weight=3.00 / 0.42)
    assert nc.usd_per_m == pytest.approx(4.40 / 165)
    assert nc.usd_per_m_output == pytest.approx(nc.usd_per_m_input * 3.00 / 0.42)
    recovered = nc.usd_per_m_input * 147 + nc.usd_per_m_output * 18  # type: ignore[operator]
    assert recovered == pytest.approx(4.40)


def test_api_node_ratio_matches_the_reference_economics() -> None:
    # Sqwish Labs' "Blackwell inference benchmarks" economics: Qwen3.8-27B NVFP4, 147M in +
    # 18M out per node-hour, API $0.42 / $3.00, Scan list at 70% = $4.40/h -> API bill ~$116
    # for that hour, about 26-27x the node.
    usage = [
        Usage(
            "qwen", "box-a", requests=1000, prompt_tokens=147_000_000, completion_tokens=18_000_000
        )
    ]
    econ = economics(config(), usage, {"box": 1.0})["qwen"]
    assert econ.api_bill_usd == pytest.approx(147 * 0.42 + 18 * 3.00)
    assert econ.node_usd == pytest.approx(4.40)
    assert econ.ratio == pytest.approx((147 * 0.42 + 18 * 3.00) / 4.40)
    assert 26 < econ.ratio < 27
    # With the market split the ratio is the same on input, output and blended.
    assert 0.42 / econ.node_usd_per_m_input == pytest.approx(econ.ratio)  # type: ignore[operator]
    assert 3.00 / econ.node_usd_per_m_output == pytest.approx(econ.ratio)  # type: ignore[operator]


def test_charged_cost_scales_the_api_side() -> None:
    usage = [
        Usage("qwen", "box-a", prompt_tokens=1_000_000, completion_tokens=100_000),
        # API traffic where the provider charged twice the table price.
        Usage(
            "qwen",
            "or",
            prompt_tokens=1000,
            cost_usd=0.01,
            charged_cost_usd=0.02,
            charged_basis_usd=0.01,
        ),
    ]
    plain = economics(config(), usage[:1], {"box": 0.5})["qwen"].ratio
    scaled = economics(config(), usage, {"box": 0.5})["qwen"].ratio
    assert plain is not None and scaled == pytest.approx(2 * plain)


def test_a_shared_node_is_split_between_models_by_weighted_tokens() -> None:
    usage = [
        Usage("qwen", "box-a", prompt_tokens=3_000_000),
        Usage("gemma", "box-b", prompt_tokens=1_000_000),
    ]
    econ = economics(config(), usage, {"box": 1.0})
    assert econ["qwen"].node_usd + econ["gemma"].node_usd == pytest.approx(4.40)
    assert econ["qwen"].node_usd == pytest.approx(3 * econ["gemma"].node_usd)
    assert econ["gemma"].ratio is None  # no API price for gemma
    assert econ["gemma"].node_usd_per_m == pytest.approx(1.10)


def test_api_only_model_reports_its_measured_price() -> None:
    usage = [Usage("qwen", "or", prompt_tokens=1_000_000, completion_tokens=0, cost_usd=0.42)]
    econ = economics(config(), usage, {"box": 0.0})["qwen"]
    assert econ.node_usd_per_m is None and econ.ratio is None
    assert econ.api_usd_per_m == pytest.approx(0.42)
