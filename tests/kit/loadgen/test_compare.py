"""The pure parts of rounds and comparison: the schedule, and the paired reducer on hand-made
rows, checked against values computed by hand (t(0.975, 2) = 4.302652729911275)."""

from __future__ import annotations

import math

import pytest

from plumbline_kit.loadgen import Row, Shape, compare, parse_target, schedule, spread
from plumbline_kit.loadgen.compare import cells_of, fmt_spread

T2 = 4.302652729911275  # Student's t, 97.5th percentile, 2 degrees of freedom


def row(target: str, round_: int, tok: float, ttft: float, **kw: object) -> Row:
    values: dict[str, object] = dict(
        timestamp="2026-12-01T00:00:00+00:00",
        target=target,
        base_url="http://127.0.0.1:1/v1",
        model="m",
        shape="router",
        prefix_tokens=0,
        input_tokens=1024,
        output_tokens=128,
        concurrency=1,
        requests=8,
        errors=0,
        duration_s=1.0,
        req_per_s=1.0,
        in_tok_per_s=1.0,
        out_tok_per_s=tok,
        mean_prompt_tokens=1024.0,
        mean_completion_tokens=128.0,
        ttft_p50_ms=ttft,
        ttft_p99_ms=ttft,
        tpot_p50_ms=1.0,
        tpot_p99_ms=1.0,
        itl_p50_ms=1.0,
        itl_p99_ms=1.0,
        e2e_p50_ms=1.0,
        e2e_p99_ms=1.0,
        tokenizer="vllm",
        prompt_fit="exact",
        ignore_eos=True,
        seed=1,
        first_error="",
        round=round_,
    )
    return Row(**(values | kw))  # type: ignore[arg-type]


def test_schedule_interleaves_targets_and_reverses_them_in_even_rounds():
    a, b, c = (parse_target(f"{x}=http://127.0.0.1:1/v1", "m") for x in "abc")
    s1, s2 = Shape("s1", 1, 1), Shape("s2", 1, 1)
    runs = [(s.name, cc, r, t.label) for s, cc, r, t in schedule([a, b, c], [s1, s2], [1, 8], 2)]
    assert runs[:12] == [
        ("s1", 1, 1, "a"),
        ("s1", 1, 1, "b"),
        ("s1", 1, 1, "c"),
        ("s1", 1, 2, "c"),
        ("s1", 1, 2, "b"),
        ("s1", 1, 2, "a"),
        ("s1", 8, 1, "a"),
        ("s1", 8, 1, "b"),
        ("s1", 8, 1, "c"),
        ("s1", 8, 2, "c"),
        ("s1", 8, 2, "b"),
        ("s1", 8, 2, "a"),
    ]
    assert len(runs) == 2 * 2 * 2 * 3 and runs[12][:2] == ("s2", 1)
    one = schedule([a, b], [s1], [1, 8], 1)  # one round: every cell still pairs the targets
    assert [(cc, t.label) for _, cc, _, t in one] == [(1, "a"), (1, "b"), (8, "a"), (8, "b")]


def test_spread_median_range_and_t_interval_by_hand():
    s = spread([0.99, 1.04, 1.01])
    mean = (0.99 + 1.04 + 1.01) / 3
    sd = math.sqrt(((0.99 - mean) ** 2 + (1.04 - mean) ** 2 + (1.01 - mean) ** 2) / 2)
    half = T2 * sd / math.sqrt(3)
    assert (s.n, s.median, s.low, s.high) == (3, 1.01, 0.99, 1.04)
    assert s.ci_low == pytest.approx(0.950817, abs=1e-6) == pytest.approx(mean - half)
    assert s.ci_high == pytest.approx(1.075850, abs=1e-6) == pytest.approx(mean + half)
    two = spread([1.0, 2.0, math.nan])  # NaN dropped; below three values no interval
    assert (two.n, two.median, two.low, two.high) == (2, 1.5, 1.0, 2.0)
    assert math.isnan(two.ci_low) and math.isnan(two.ci_high)
    assert spread([]).n == 0 and math.isnan(spread([]).median)
    assert spread([2.0, 2.0, 2.0]).ci_low == 2.0  # no spread, a zero-width interval
    assert fmt_spread(s, 2) == "1.01 [0.95, 1.08] (0.99–1.04)"
    assert fmt_spread(two, 1, signed=True) == "+1.5 (+1.0–+2.0)"


def test_compare_pairs_rounds_and_judges_against_the_goals():
    direct = [(100, 10.0), (200, 12.0), (50, 11.0)]
    rows: list[Row] = []
    for r, (tok, ttft) in enumerate(direct, start=1):
        rows.append(row("direct", r, tok, ttft, srv_itl_mean_ms=2.0))
    gateway = [(99, 10.5), (208, 13.5), (50.5, 11.0)]  # ratios .99 1.04 1.01, deltas .5 1.5 0
    tight = [(100, 10.2), (200, 12.2), (50, 11.2)]  # ratio 1 and +0.2 ms every round
    slow = [(90, 10.0), (182, 12.0), (46, 11.0)]  # ratios .90 .91 .92
    for label, values in (("gateway", gateway), ("tight", tight), ("slow", slow)):
        for r, (tok, ttft) in enumerate(values, start=1):
            rows.append(row(label, r, tok, ttft, srv_itl_mean_ms=2.2))
    rows.append(row("broken", 1, 100, 10.0, errors=1))
    rows += [row("broken", r, tok, ttft) for r, (tok, ttft) in enumerate(direct, 1) if r > 1]

    got = {c.target: c for c in compare(rows, "direct", 0.99, 1.0)}
    assert list(got) == ["gateway", "tight", "slow", "broken"]  # baseline left out, order kept
    g = got["gateway"]
    assert (g.shape, g.concurrency, g.baseline, g.rounds) == ("router", 1, "direct", 3)
    assert g.out_tok_ratio.median == pytest.approx(1.01)
    assert (g.out_tok_ratio.low, g.out_tok_ratio.high) == pytest.approx((0.99, 1.04))
    assert g.out_tok_ratio.ci_low == pytest.approx(0.950817, abs=1e-6)
    d = g.ttft_p50_delta_ms  # mean 2/3, sd 0.763763, half-width 4.302653 · sd / √3
    assert (d.median, d.low, d.high) == pytest.approx((0.5, 0.0, 1.5))
    assert (d.ci_low, d.ci_high) == pytest.approx((-1.230625, 2.563958), abs=1e-6)
    assert g.srv_itl_ratio == pytest.approx(1.1) and math.isnan(g.srv_ttft_delta_ms)
    assert (g.errors, g.requests) == (0, 24)
    assert g.verdict == "unclear"  # both intervals straddle their goal: 3 rounds cannot tell
    assert got["tight"].verdict == "met"
    assert got["tight"].ttft_p50_delta_ms.median == pytest.approx(0.2)
    assert got["slow"].verdict == "missed"
    assert got["slow"].out_tok_ratio.ci_high < 0.99
    assert got["broken"].verdict == "missed" and got["broken"].errors == 1
    assert compare(rows, "direct")[0].verdict == ""  # no goals, no verdict


def test_compare_pairs_only_rounds_both_ran_and_drops_undefined_ratios():
    rows = [
        row("direct", 1, 100, 10.0),
        row("gw", 1, 99, 11.0),
        row("direct", 2, 0, 10.0),  # the baseline streamed nothing: no ratio for round 2
        row("gw", 2, 90, 12.0),
        row("gw", 3, 95, 12.0),  # no baseline in round 3
        row("direct", 1, 10, 1.0, concurrency=8),
        row("gw", 1, 11, 2.0, concurrency=8),
    ]
    c1, c8 = compare(rows, "direct", 0.99, 1.0)
    assert (c1.concurrency, c1.rounds, c1.out_tok_ratio.n) == (1, 2, 1)
    assert c1.out_tok_ratio.median == pytest.approx(0.99)
    assert c1.ttft_p50_delta_ms.median == pytest.approx(1.5)  # rounds 1 and 2 paired
    assert c1.verdict == ""  # fewer than three paired rounds: no interval, no verdict
    assert (c8.concurrency, c8.out_tok_ratio.median) == (8, pytest.approx(1.1))


def test_relay_share_divides_out_vllm_drift():
    # vLLM itself 10% slower while the target ran (its mean e2e 220 against 200 ms): the raw
    # tok/s ratio 0.95 misses 0.99, the relay's own share 0.95 x 1.1 = 1.045 does not.
    rows: list[Row] = []
    added = {"gateway": (0.5, 0.75, 1.0), "tight": (0.2, 0.2, 0.2)}
    for r in (1, 2, 3):
        rows.append(row("direct", r, 100, 30.0, srv_e2e_mean_ms=200.0, srv_ttft_mean_ms=28.0))
        for label, extra in added.items():
            ttft = 28.0 + 2.0 + extra[r - 1]  # vLLM's TTFT + the baseline's 2 ms + the added
            rows.append(row(label, r, 95, ttft + 3.0, srv_e2e_mean_ms=220.0, srv_ttft_mean_ms=31.0))
    got = {c.target: c for c in compare(rows, "direct", 0.99, 1.0)}
    g = got["gateway"]
    assert g.out_tok_ratio.median == pytest.approx(0.95) and g.verdict == "missed"
    assert g.relay_ratio.median == pytest.approx(1.045)
    assert (g.relay_ratio.ci_low, g.relay_ratio.ci_high) == pytest.approx((1.045, 1.045))
    # added TTFT 0.5, 0.75, 1.0: mean 0.75, sd 0.25, half-width T2 * 0.25 / sqrt(3)
    a = g.added_ttft_ms
    assert (a.median, a.low, a.high) == pytest.approx((0.75, 0.5, 1.0))
    half = T2 * 0.25 / math.sqrt(3)
    assert (a.ci_low, a.ci_high) == pytest.approx((0.75 - half, 0.75 + half))
    assert g.relay_verdict == "unclear"  # the ratio clears 0.99, the TTFT interval straddles 1 ms
    assert got["tight"].relay_verdict == "met"
    assert got["tight"].verdict == "missed"
    assert "1.0450" in " ".join(cells_of(g))


def test_added_ttft_takes_the_clients_mean_where_the_row_has_one():
    rows: list[Row] = []
    for r in (1, 2, 3):
        rows.append(row("direct", r, 100, 30.0, ttft_mean_ms=32.0, srv_ttft_mean_ms=30.0))
        rows.append(row("gw", r, 100, 99.0, ttft_mean_ms=33.0, srv_ttft_mean_ms=30.0))
    (c,) = compare(rows, "direct", 0.99, 1.0)
    assert c.added_ttft_ms.median == pytest.approx(1.0)  # (33 - 30) - (32 - 30), p50s unused


def test_no_server_metrics_no_relay_share():
    rows = [row(t, r, 100, 10.0) for r in (1, 2, 3) for t in ("direct", "gw")]
    (c,) = compare(rows, "direct", 0.99, 1.0)
    assert c.relay_ratio.n == 0 and c.added_ttft_ms.n == 0
    assert c.relay_verdict == "" and c.verdict == "met"
    assert cells_of(c)[-3:] == ["—", "—", "—"]
