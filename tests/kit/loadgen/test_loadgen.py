"""plumbline_kit.loadgen against the fake upstream (a real HTTP server on loopback).

No timing asserts."""

from __future__ import annotations

import asyncio
import io
import random
from dataclasses import astuple
from pathlib import Path

import aiohttp
import orjson
import pytest
from rich.console import Console
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from plumbline_kit.fakes.upstream import running_fake
from plumbline_kit.loadgen import (
    COLUMNS,
    SHAPES,
    BenchConfig,
    Row,
    Sample,
    Shape,
    append_tsv,
    bench_main,
    detect_tokenizer,
    fit_words,
    parse_concurrencies,
    parse_shape,
    parse_target,
    read_events,
    run_bench,
)
from tests.harness import serving_app

SMALL = Shape("tiny", input=24, output=8, prefix=0)
PREFIXED = Shape("tinyprefix", input=12, output=6, prefix=20)


@pytest.fixture
def fake():
    # The fake answers `tokens` words unless max_tokens cuts it, so a long default makes
    # max_tokens (= the shape's output) decide the length, as ignore_eos does on vLLM.
    with running_fake(tokens=10_000) as handle:
        yield handle


def config(fake, **kw) -> BenchConfig:
    defaults = dict(
        targets=[parse_target(f"fake={fake.base_url}", "m")],
        shapes=[SMALL],
        concurrencies=[2],
        prompts_per_slot=3,
        warmup=1,
        seed=7,
    )
    return BenchConfig(**(defaults | kw))


def generation_bodies(fake) -> list[dict]:
    return [r["body"] for r in fake.requests() if r["path"].endswith("/completions")]


def test_one_row_per_combination_with_every_column(fake, tmp_path: Path):
    rows = run_bench(config(fake, concurrencies=[1, 3], shapes=[SMALL, PREFIXED]))
    assert [(r.shape, r.concurrency) for r in rows] == [
        ("tiny", 1),
        ("tiny", 3),
        ("tinyprefix", 1),
        ("tinyprefix", 3),
    ]
    for row in rows:
        assert set(vars(row)) == set(COLUMNS)
        assert row.errors == 0 and row.first_error == ""
        assert row.requests == 3 * row.concurrency  # prompts_per_slot × C, warm-up excluded
        assert row.tokenizer == "vllm" and row.prompt_fit == "exact"
        shape = SMALL if row.shape == "tiny" else PREFIXED
        assert row.mean_prompt_tokens == shape.prefix + shape.input
        assert row.mean_completion_tokens == shape.output
        assert row.req_per_s > 0 and row.out_tok_per_s > 0 and row.in_tok_per_s > 0
        for name in ("ttft", "tpot", "itl", "e2e"):
            p50, p99 = getattr(row, f"{name}_p50_ms"), getattr(row, f"{name}_p99_ms")
            assert 0 <= p50 <= p99


def test_requests_sent_equal_prompts_plus_warmup_and_carry_the_shape(fake):
    run_bench(config(fake, shapes=[PREFIXED], concurrencies=[2], warmup=2))
    bodies = generation_bodies(fake)
    assert len(bodies) == 2 + 3 * 2
    prompts = [b["prompt"] for b in bodies]
    assert all(len(p.split()) == PREFIXED.prefix + PREFIXED.input for p in prompts)
    assert len(set(prompts)) == len(prompts)  # every prompt unique ...
    assert len({" ".join(p.split()[: PREFIXED.prefix]) for p in prompts}) == 1  # ... but the prefix
    for body in bodies:
        assert body["max_tokens"] == PREFIXED.output and body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["ignore_eos"] is True and body["min_tokens"] == PREFIXED.output


def test_seed_reproduces_prompts_and_runs_differ(fake):
    run_bench(config(fake, seed=11))
    first = sorted(b["prompt"] for b in generation_bodies(fake))  # arrival order may vary
    fake.reset()
    run_bench(config(fake, seed=11))
    assert sorted(b["prompt"] for b in generation_bodies(fake)) == first
    fake.reset()
    run_bench(config(fake, seed=12))
    assert not set(first) & {b["prompt"] for b in generation_bodies(fake)}


def test_server_errors_are_counted(fake):
    fake.script({"status": 500, "message": "boom"}, {}, {"status": 503}, {})
    row = run_bench(config(fake, warmup=0, concurrencies=[1], prompts_per_slot=6))[0]
    assert (row.requests, row.errors) == (6, 2)
    assert row.first_error.startswith("HTTP 500")
    assert row.req_per_s > 0  # the four good requests still count


def test_a_stream_cut_short_is_an_error(fake):
    fake.set_default(disconnect_after_chunks=3)
    row = run_bench(config(fake, warmup=0, concurrencies=[1], prompts_per_slot=2))[0]
    assert row.errors == 2


def test_chat_endpoint_and_no_ignore_eos(fake):
    run_bench(config(fake, endpoint="chat", ignore_eos=False, warmup=0, concurrencies=[1]))
    chats = [r["body"] for r in fake.requests() if r["path"] == "/v1/chat/completions"]
    assert len(chats) == 3
    assert all("ignore_eos" not in b and "min_tokens" not in b for b in chats)
    assert all(len(b["messages"][0]["content"].split()) == SMALL.input for b in chats)


def test_without_a_tokenizer_the_row_says_approx(fake):
    row = run_bench(config(fake, tokenizer_url="http://127.0.0.1:9", warmup=0))[0]
    assert row.tokenizer == "approx" and row.errors == 0


def test_tsv_header_once_then_rows_appended(fake, tmp_path: Path):
    tsv = tmp_path / "out" / "bench.tsv"
    run_bench(config(fake, tsv=tsv, concurrencies=[1, 2]))
    run_bench(config(fake, tsv=tsv, concurrencies=[1]))
    lines = tsv.read_text().splitlines()
    assert lines[0].split("\t") == list(COLUMNS)
    assert len(lines) == 1 + 3
    assert all(len(line.split("\t")) == len(COLUMNS) for line in lines)
    assert [line.split("\t")[COLUMNS.index("concurrency")] for line in lines[1:]] == ["1", "2", "1"]


def test_tsv_with_other_columns_is_refused(tmp_path: Path):
    tsv = tmp_path / "bench.tsv"
    tsv.write_text("a\tb\n")
    row = Row(*["x"] * len(COLUMNS))
    with pytest.raises(ValueError, match="different columns"):
        append_tsv(tsv, [row])
    assert astuple(row)[0] == "x"


def test_bench_main_prints_a_table(fake, tmp_path: Path):
    console = Console(record=True, width=200)
    rows = bench_main(
        target=[f"node={fake.base_url}"],
        model="m",
        shape=["8/4"],
        concurrency="1,2",
        prompts_per_slot=2,
        tsv=str(tmp_path / "b.tsv"),
        seed=1,
        console=console,
        tripwire=False,  # the fake repeats a filler text: the tripwire would fail it
    )
    assert len(rows) == 2
    text = console.export_text()
    assert "plumbline bench" in text and "node" in text and "8/4" in text
    with pytest.raises(ValueError, match="NO_SUCH_KEY"):
        bench_main(target=[fake.base_url], model="m", api_key_env="NO_SUCH_KEY", environ={})


def test_api_key_is_sent_as_bearer(fake):
    target = parse_target(fake.base_url, "m", api_key="sk-test")
    run_bench(config(fake, targets=[target], warmup=0, concurrencies=[1], prompts_per_slot=1))
    generations = [r for r in fake.requests() if r["path"] == "/v1/completions"]
    assert generations and all(
        r["headers"].get("authorization", r["headers"].get("Authorization")) == "Bearer sk-test"
        for r in generations
    )


# --- pure parts -------------------------------------------------------------------------------


async def test_fit_words_reaches_exact_counts_with_multi_token_words():
    async def count(text: str) -> int:  # a BOS, and words longer than 5 letters cost two tokens
        return 1 + sum(1 + (len(w) > 5) for w in text.split())

    rng = random.Random(3)
    head, got = await fit_words(rng, count, [], 50, overhead=1)
    assert got == 50 and await count(" ".join(head)) == 50
    words, got = await fit_words(rng, count, head, 50 + 77, overhead=1)
    assert got == 127 and words[: len(head)] == head


def test_shapes_and_parsing():
    assert (SHAPES["router"].input, SHAPES["router"].output) == (1024, 128)
    assert (SHAPES["promptopt"].prefix, SHAPES["promptopt"].input) == (3072, 512)
    assert parse_shape("rollout") == Shape("rollout", 8192, 2048)
    assert parse_shape("100/10") == Shape("100/10", 100, 10)
    assert parse_shape("300+100/10") == Shape("300+100/10", 100, 10, prefix=300)
    for bad in ["", "x", "10/", "0/5", "a+1/2"]:
        with pytest.raises(ValueError):
            parse_shape(bad)
    assert parse_concurrencies("1, 8,64") == [1, 8, 64]
    with pytest.raises(ValueError):
        parse_concurrencies("0,1")
    target = parse_target("http://127.0.0.1:8000/v1/", "m")
    assert (target.label, target.root) == ("127.0.0.1:8000", "http://127.0.0.1:8000")
    with pytest.raises(ValueError):
        parse_target("localhost:8000", "m")


def test_events_are_read_from_bytes():
    sample = Sample(start=0.0)
    usage = orjson.dumps({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}})
    events = [
        b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}',
        b'data: {"choices":[{"delta":{"content":"Hi"}}]}',
        b'data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}',
        b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}',
        b": keep-alive comment",
        b"data: " + usage,
    ]
    assert read_events(sample, events, 1.0) is False
    assert (sample.events, sample.first, sample.prompt_tokens, sample.completion_tokens) == (
        2,
        1.0,
        9,
        2,
    )
    assert read_events(sample, [b'data:{"choices":[{"text":"x"}]}', b"data: [DONE]"], 1.5)
    assert sample.events == 3 and list(sample.gaps) == [0.0, 0.5]


def tokenizer_node(served: str, asked: list[dict]) -> Starlette:
    """vLLM's /tokenize as far as names go: a model it does not serve is a 404; unnamed, its
    own. One token a word, as the fake upstream counts them."""

    async def tokenize(request: Request) -> JSONResponse:
        body = await request.json()
        asked.append(body)
        if "prompt" not in body:  # llama.cpp's probe ({"content": …}): not vLLM's shape
            return JSONResponse({"error": {"message": "prompt is required"}}, status_code=400)
        if body.get("model") not in (None, served):
            error = {"message": f"The model `{body['model']}` does not exist.", "code": 404}
            return JSONResponse({"error": error}, status_code=404)
        return JSONResponse({"count": len(body["prompt"].split())})

    return Starlette(routes=[Route("/tokenize", tokenize, methods=["POST"])])


def test_a_tokenizer_node_is_not_asked_for_the_targets_model(fake):
    # A gateway's route (`smollm2-pair`) is not a name the replica beside it serves: asked for
    # it, vLLM's /tokenize answered 404 and the run fell back to the approximation.
    asked: list[dict] = []
    target = parse_target(f"pair={fake.base_url}", "a-route-name")
    with serving_app(tokenizer_node("smollm2", asked)) as node:
        row = run_bench(config(fake, targets=[target], tokenizer_url=node, warmup=0))[0]
    assert asked and all("model" not in b for b in asked)
    assert (row.tokenizer, row.prompt_fit, row.errors) == ("vllm", "exact", 0)


def test_detect_tokenizer_names_the_model_it_is_given():
    asked: list[dict] = []

    async def kinds(root: str) -> list[str]:
        async with aiohttp.ClientSession() as session:
            return [
                (await detect_tokenizer(session, root, model, "completions")).kind
                for model in ("m", None, "other")
            ]

    with serving_app(tokenizer_node("m", asked)) as node:
        assert asyncio.run(kinds(node)) == ["vllm", "vllm", "approx"]
    # two probes each ("the", "the the"); a name the node does not serve is refused
    named = [b.get("model", "-") for b in asked if "prompt" in b]
    assert named == ["m", "m", "-", "-", "other"]


def test_bench_starts_with_the_tripwire_and_benches_no_collapsed_target() -> None:
    out = io.StringIO()
    with running_fake(degenerate=True, tokens=12) as broken:
        with pytest.raises(ValueError, match="every target failed the tripwire"):
            bench_main(
                target=[f"broken={broken.base_url}"],
                model="m",
                concurrency="1",
                tsv=None,
                console=Console(file=out, width=200),
            )
        asked = len(broken.requests())
    assert "tripwire broken: degenerate" in out.getvalue() and "not benched" in out.getvalue()
    assert asked == 20  # the tripwire's prompts only: no load was sent
