import json
import math

import httpx
import openai
import pytest

from evals.logits import (
    Divergence,
    against_control,
    aligned,
    collect,
    collect_echo,
    divergence,
    kl,
    top1,
)

ln = math.log


def test_identical_distributions() -> None:
    d = {"a": ln(0.5), "b": ln(0.3), "c": ln(0.2)}
    assert kl(d, d) == pytest.approx(0.0, abs=1e-12)
    assert divergence([d, d], [d, d]) == Divergence(2, 1.0, pytest.approx(0.0, abs=1e-12))


def test_kl_hand_computed_same_support() -> None:
    p = {"a": ln(0.6), "b": ln(0.4)}
    q = {"a": ln(0.4), "b": ln(0.6)}
    expected = 0.6 * ln(0.6 / 0.4) + 0.4 * ln(0.4 / 0.6)  # 0.0810930...
    assert kl(p, q) == pytest.approx(expected)
    assert kl(p, q) == pytest.approx(0.081093, abs=1e-6)


def test_kl_hand_computed_missing_tokens() -> None:
    # Each side leaves 0.1 unlisted; the token it is missing gets that residual (0.1, which is
    # below its smallest listed 0.2), so A = {a .7, b .2, c .1}, B = {a .7, b .1, c .2}.
    p = {"a": ln(0.7), "b": ln(0.2)}
    q = {"a": ln(0.7), "c": ln(0.2)}
    expected = 0.2 * ln(0.2 / 0.1) + 0.1 * ln(0.1 / 0.2)  # = 0.1 ln 2
    assert kl(p, q) == pytest.approx(expected)
    assert kl(p, q) == pytest.approx(0.0693147, abs=1e-6)


def test_missing_token_is_never_likelier_than_a_listed_one() -> None:
    # A lists only 0.5 of its mass; the fill for its two missing tokens is capped at 0.05.
    p = {"a": ln(0.45), "b": ln(0.05)}
    q = {"c": ln(0.5), "d": ln(0.5)}
    # A over the union before renormalising: a .45, b .05, c .05, d .05 (sum 0.6).
    pa = {"a": 0.45 / 0.6, "b": 0.05 / 0.6, "c": 0.05 / 0.6, "d": 0.05 / 0.6}
    # B leaves nothing unlisted: its missing tokens get the floor 1e-6.
    raw_b = {"a": 1e-6, "b": 1e-6, "c": 0.5, "d": 0.5}
    zb = sum(raw_b.values())
    expected = sum(pa[t] * ln(pa[t] / (raw_b[t] / zb)) for t in pa)
    assert kl(p, q) == pytest.approx(expected)
    assert math.isfinite(kl(p, q))


def test_top1_agreement() -> None:
    a = [{"x": ln(0.9), "y": ln(0.1)}, {"x": ln(0.4), "y": ln(0.6)}]
    b = [{"x": ln(0.8), "y": ln(0.2)}, {"x": ln(0.7), "y": ln(0.3)}]
    assert top1(a[1]) == "y"
    assert divergence(a, b).top1_agreement == 0.5
    with pytest.raises(ValueError):
        divergence(a, b[:1])


def test_alignment_stops_after_the_first_split() -> None:
    tops = [{"t": 0.0}] * 5
    pa, pb = aligned(["a", "b", "c", "d"], tops, ["a", "b", "x", "d"], tops)
    assert len(pa) == len(pb) == 3


def test_against_control() -> None:
    control = Divergence(100, 0.9615, 0.0184)
    assert not against_control(Divergence(100, 0.9904, 0.00158), control).above_floor
    verdict = against_control(Divergence(100, 0.8190, 0.14515), control)
    assert verdict.above_floor
    assert verdict.excess_kl == pytest.approx(0.12675)


def _fake_completions(tokens: list[str], tops: list[dict[str, float]]) -> openai.AsyncOpenAI:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["logprobs"] == 20 and body["temperature"] == 0
        return httpx.Response(
            200,
            json={
                "id": "x",
                "object": "text_completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "text": "".join(tokens),
                        "finish_reason": "length",
                        "logprobs": {
                            "tokens": tokens,
                            "token_logprobs": [max(t.values()) for t in tops],
                            "top_logprobs": tops,
                            "text_offset": list(range(len(tokens))),
                        },
                    }
                ],
            },
        )

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return openai.AsyncOpenAI(api_key="x", base_url="http://upstream.test/v1", http_client=http)


async def test_collect_from_two_fake_upstreams() -> None:
    same = {" the": ln(0.6), " a": ln(0.4)}
    diff = {" the": ln(0.4), " a": ln(0.6)}
    a = _fake_completions([" the", " cat", " sat"], [same, same, same])
    b = _fake_completions([" the", " dog", " ran"], [same, diff, same])
    pa, pb = await collect((a, "m"), (b, "m"), ["Once upon a time", "Hello"], max_tokens=3)
    assert len(pa) == len(pb) == 4  # two positions per prompt: agree, then the split
    d = divergence(pa, pb)
    assert d.top1_agreement == 0.5
    assert d.mean_kl == pytest.approx(0.081093 / 2, abs=1e-6)


def _fake_echo(tops: list[dict[str, float] | None], tokens: list[str]) -> openai.AsyncOpenAI:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["echo"] is True and body["logprobs"] == 20
        choice = {
            "index": 0,
            "text": body["prompt"] + "!",
            "finish_reason": "length",
            "logprobs": {
                "tokens": tokens,
                "token_logprobs": [None] + [0.0] * (len(tokens) - 1),
                "top_logprobs": tops,
                "text_offset": list(range(len(tokens))),
            },
        }
        payload = {"id": "x", "object": "text_completion", "created": 0, "model": "m"}
        return httpx.Response(200, json=payload | {"choices": [choice]})

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return openai.AsyncOpenAI(api_key="x", base_url="http://upstream.test/v1", http_client=http)


async def test_collect_echo_compares_every_position_with_logprobs() -> None:
    p = {" the": ln(0.6), " a": ln(0.4)}
    q = {" the": ln(0.4), " a": ln(0.6)}
    a = _fake_echo([None, p, p, p], ["Once", " upon", " a", " time"])
    b = _fake_echo([None, p, q, p], ["Once", " upon", " a", " time"])
    pa, pb = await collect_echo((a, "m"), (b, "m"), ["Once upon a time"])
    assert len(pa) == 3
    assert divergence(pa, pb).top1_agreement == pytest.approx(2 / 3)
    other = _fake_echo([None, p, p], ["Once", " upon", " a time"])
    with pytest.raises(ValueError, match="tokenise"):
        await collect_echo((a, "m"), (other, "m"), ["Once upon a time"])


async def test_teacher_forced_positions_through_the_gateway_and_the_fake_upstream() -> None:
    """`echo` + `logprobs` + `max_tokens=1` through the gateway's /v1/completions: every token of
    each fixed text but its first is a position, whatever each target generated after it (here
    the two answer differently: the generated token is cut off, not compared)."""
    from evals.logits import TEXTS
    from plumbline_kit.fakes.upstream import running_fake
    from tests.evals.test_runner import gateway_for
    from tests.harness import running_gateway

    with (
        running_fake(text="yes") as one,
        running_fake(text="no") as other,
        running_gateway(gateway_for(a=one.base_url, b=other.base_url)) as url,
    ):
        client = openai.AsyncOpenAI(base_url=url, api_key="unused")
        try:
            pa, pb = await collect_echo((client, "a"), (client, "b"), TEXTS)
        finally:
            await client.close()
        body = one.requests()[0]["body"]
    assert body["echo"] is True and body["logprobs"] == 20 and body["max_tokens"] == 1
    assert len(pa) == len(pb) == sum(len(t.split()) - 1 for t in TEXTS)
    d = divergence(pa, pb)
    assert d.top1_agreement == 1.0 and d.mean_kl == pytest.approx(0.0, abs=1e-12)
