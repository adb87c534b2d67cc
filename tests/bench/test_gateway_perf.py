"""The gateway benchmark's own machinery (bench/gateway_perf.py, bench/perf_procs.py): rounds
interleave the targets, cells are the median and range of the rounds, and every guarded proxy
refuses a request without the bench's key and serves one with it."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.gateway_perf import SCENARIOS, schedule, summarise, summary_markdown
from bench.perf_procs import BENCH_HEADERS, Proc, fake_upstream, floor, plumbline, set_fake_default


def test_rounds_visit_every_target_in_turn_direct_first() -> None:
    sc = [SCENARIOS["stream-c32"], SCENARIOS["nonstream-c1"]]
    order = [(s.name, r, t) for s, r, t in schedule(["plumbline", "direct", "floor"], sc, 3)]
    first = [t for s, r, t in order if s == "stream-c32"]
    assert first == ["direct", "plumbline", "floor"] * 3  # A B C A B C A B C
    assert [r for s, r, t in order if s == "stream-c32"] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert len(order) == 18


def test_each_cell_is_the_median_and_range_of_its_rounds() -> None:
    def run(target: str, rps: float, rss: float = math.nan) -> dict:
        row = {c: math.nan for c in ("chunks_per_s", "added_p50_ms", "added_p99_ms")}
        row |= {c: math.nan for c in ("first_p99_ms", "added_first_p99_ms", "cpu_per_chunk_us")}
        row["records"] = math.nan if target == "floor" else 1000.0  # only a recording gateway
        # the collector's pauses: the one-process gateway's, and the load generator's own
        row["gc_pauses"] = math.nan if target == "floor" else rps / 1000
        row["gc_pause_max_ms"] = math.nan if target == "floor" else 2.5
        row["gc_young_max_ms"] = math.nan if target == "floor" else 1.5
        row["gc_older_pauses"] = math.nan if target == "floor" else 0.0
        row["driver_gc_pause_max_ms"] = 0.0
        cpu = 1e6 / rps
        return row | {
            "scenario": "nonstream-c1",
            "target": target,
            "req_per_s": rps,
            "errors": 0,
            "cpu_per_req_us": cpu,
            "loop_per_req_us": 0.9 * cpu,  # the event loop's share
            "peak_rss_mb": rss,
        }

    rows = [run("plumbline", 1000.0), run("floor", 2000.0), run("plumbline", 1400.0)]
    rows += [run("floor", 2100.0), run("plumbline", 1100.0), run("floor", 1900.0)]
    cells = {c["target"]: c for c in summarise(rows)}
    assert cells["plumbline"]["rounds"] == 3
    assert cells["plumbline"]["req_per_s"] == {"median": 1100, "min": 1000, "max": 1400}
    assert cells["floor"]["req_per_s"]["median"] == 2000
    assert round(cells["plumbline"]["loop_per_req_us"]["median"], 6) == round(0.9e6 / 1100, 6)
    assert math.isnan(cells["floor"]["peak_rss_mb"]["median"])  # not measured: no number
    assert cells["plumbline"]["records"]["median"] == 1000
    assert math.isnan(cells["floor"]["records"]["median"])
    assert cells["plumbline"]["gc_pauses"] == {"median": 1.1, "min": 1.0, "max": 1.4}
    assert math.isnan(cells["floor"]["gc_pause_max_ms"]["median"])
    assert cells["floor"]["driver_gc_pause_max_ms"]["median"] == 0
    table = summary_markdown(list(cells.values()))
    assert "1,100.0 (1,000.0–1,400.0)" in table and "| 0 |" in table


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, Path]]:
    scratch = tmp_path_factory.mktemp("bench")
    fake = fake_upstream(scratch)
    try:
        yield fake, scratch
    finally:
        fake.stop()


def _post(proc: Proc, headers: dict[str, str]) -> tuple[int, dict]:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    request = urllib.request.Request(
        proc.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("target", ["plumbline", "floor-wire"])
def test_every_guarded_proxy_checks_the_bench_key(upstream: tuple[Proc, Path], target: str) -> None:
    fake, scratch = upstream
    proc = plumbline(fake, scratch) if target == "plumbline" else floor(fake, scratch, wire=True)
    try:
        status, err = _post(proc, {})
        assert status == 401 and "error" in err
        status, err = _post(proc, {"Authorization": "Bearer sk-wrong"})
        assert status == 401
        status, answer = _post(proc, BENCH_HEADERS)
        assert status == 200 and answer["choices"][0]["message"]["content"]
    finally:
        proc.stop()


def _head_within(proc: Proc, seconds: float) -> bool:
    """Whether a stream's response head comes within `seconds` (the fake holds its first token)."""
    body = {"model": "fake-model", "prompt": "hi", "max_tokens": 2, "stream": True}
    request = urllib.request.Request(
        proc.base_url + "/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **BENCH_HEADERS},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=seconds) as resp:
            return bool(resp.status == 200)
    except TimeoutError:
        return False


def test_the_late_head_floor_holds_its_head_until_the_first_block(
    upstream: tuple[Proc, Path],
) -> None:
    """An engine's head comes at once and its first token after the prefill: the bare relay
    passes the head on at once; with --late-head it waits for the first block, as the gateway
    does, which is what `floor-late` separates from the gateway's own work."""
    fake, scratch = upstream
    bare, late = floor(fake, scratch, wire=True), floor(fake, scratch, wire=True, late_head=True)
    try:
        set_fake_default(fake, {"hang_after_chunks": 0, "hang": 30})  # head sent, no token yet
        assert _head_within(bare, 5)
        assert not _head_within(late, 1)
        set_fake_default(fake, {"hang_after_chunks": None, "hang": None})
        assert _head_within(late, 10)  # once the token comes, so does the head
    finally:
        set_fake_default(fake, {"hang_after_chunks": None, "hang": None})
        bare.stop()
        late.stop()


@contextlib.asynccontextmanager
async def _tiny_stream_server(noted: Callable[[Any], None]) -> AsyncIterator[str]:
    """A tiny streaming chat server on loopback that calls `noted(request)` for each request;
    yields its URL."""
    from aiohttp import web

    async def answer(request: web.Request) -> web.StreamResponse:
        noted(request)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": []}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        await runner.cleanup()


async def _count_connections(fresh: bool) -> tuple[int, int, set[int]]:
    """Two waves of 3 workers against a tiny streaming server that notes each request's client
    port: (requests tallied, errors, the distinct client ports seen)."""
    from plumbline_kit.loadgen.scenario import Scenario, drive

    ports: list[int] = []
    async with _tiny_stream_server(
        lambda request: ports.append(request.transport.get_extra_info("peername")[1])
    ) as url:
        sc = Scenario("two-waves", 3, True, 4, once=True, waves=2, fresh=fresh)
        tally = await drive(url, sc, "m", 5, warmup=0)
    return tally.requests, tally.errors, set(ports)


async def test_the_load_generator_holds_its_full_collections_off_during_a_load() -> None:
    """The load generator collects its heap before a load and makes no full collection in it
    (its young ones go on): a full collection in a seed burst stalled every stream's reading
    55-75 ms on 2 cores, counted against whichever target was driven. Its thresholds are its
    own again after the load."""
    from plumbline_kit.loadgen.scenario import FULL_COLLECTIONS_HELD, Scenario, drive

    before, sent = gc.get_threshold(), time.time()
    during: list[tuple[int, ...]] = []
    async with _tiny_stream_server(lambda _request: during.append(gc.get_threshold())) as url:
        tally = await drive(url, Scenario("held", 3, True, 4, once=True), "m", 5, warmup=0)
    assert (tally.requests, tally.errors) == (3, 0)
    assert sent <= tally.started <= time.time()  # the load's start, which the bench counts from
    assert during == [(before[0], before[1], FULL_COLLECTIONS_HELD)] * 3
    assert gc.get_threshold() == before


async def test_two_waves_send_each_worker_twice_and_fresh_opens_a_connection_each() -> None:
    requests, errors, ports = await _count_connections(fresh=True)
    assert (requests, errors) == (6, 0)
    assert len(ports) == 6  # every request on a connection of its own
    requests, errors, ports = await _count_connections(fresh=False)
    assert (requests, errors) == (6, 0)
    assert len(ports) <= 3  # the second wave reuses the first wave's connections
    assert {"seed-2wave", "seed-2wave-fresh"} <= set(SCENARIOS)
    assert SCENARIOS["seed-2wave"].waves == 2 and SCENARIOS["seed-2wave-fresh"].fresh
