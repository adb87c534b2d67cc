"""`plumbline bench --rounds` and `--server-metrics` as a user runs them: the CLI against the fake
upstream, directly and through the real gateway, and a stand-in vLLM /metrics. No timing asserts."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway import cli
from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from plumbline_kit.loadgen import COLUMNS, histograms, parse_server_metrics, server_means
from plumbline_kit.loadgen.compare import TSV_COLUMNS
from tests.harness import config_from, running_gateway
from tests.kit.loadgen.metrics_server import histogram, serving_metrics

OLD_COLUMNS = COLUMNS[: COLUMNS.index("first_error") + 1]  # the columns before rounds existed


@pytest.fixture
def fake() -> Iterator[FakeHandle]:
    with running_fake(tokens=10_000) as handle:
        yield handle


def bench(*args: str) -> tuple[int, str]:
    # The fake repeats filler text, which the tripwire rightly calls degenerate: these tests are
    # about the rounds, so they skip it (tests/kit/loadgen/test_loadgen.py runs it).
    args = ("bench", "--model", "m", "--seed", "5", "--no-tripwire", *args)
    result = CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "240"})
    return result.exit_code, result.output


def read_tsv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def test_rounds_interleave_direct_and_gateway_and_compare_them(fake: FakeHandle, tmp_path: Path):
    config = config_from(
        {
            "server": {"health_interval_s": 0},
            "upstreams": [{"name": "a", "kind": "vllm", "base_url": fake.base_url, "model": "m"}],
            "models": {"m": {"upstreams": ["a"]}},
        }
    )
    tsv = tmp_path / "bench.tsv"
    with running_gateway(config) as gateway_url:
        code, out = bench(
            *("--target", f"direct={fake.base_url}", "--target", f"gateway={gateway_url}"),
            *("--shape", "8/4", "--concurrency", "1,2", "--prompts-per-slot", "2"),
            *("--rounds", "3", "--tsv", str(tsv), "--tokenizer-url", fake.url),
        )
    assert code == 0, out
    header = tsv.read_text().splitlines()[0].split("\t")
    assert header[: len(OLD_COLUMNS)] == list(OLD_COLUMNS)  # old columns first, in their order
    srv = [c for c in COLUMNS if c.startswith("srv_")]
    assert header[len(OLD_COLUMNS) :] == ["round", *srv, "ttft_mean_ms", "e2e_mean_ms"]
    rows = read_tsv(tsv)
    assert len(rows) == 1 * 2 * 2 * 3  # shapes × concurrencies × targets × rounds
    assert [(r["concurrency"], r["round"], r["target"]) for r in rows] == [
        (c, r, t)
        for c in ("1", "2")
        for r, order in (("1", "dg"), ("2", "gd"), ("3", "dg"))
        for t in (("direct", "gateway") if order == "dg" else ("gateway", "direct"))
    ]
    assert all(r["errors"] == "0" and r["srv_requests"] == "-1" for r in rows)
    assert all(r["srv_ttft_mean_ms"] == "nan" for r in rows)  # no --server-metrics given
    for r in rows:  # the client's means sit beside its percentiles
        assert 0 < float(r["ttft_mean_ms"]) <= float(r["e2e_mean_ms"])
    # Every round sends fresh prompts (no prefix cache across rounds); 24 runs' worth reached
    # the fake, directly or relayed.
    prompts = [r["body"]["prompt"] for r in fake.requests() if r["path"] == "/v1/completions"]
    assert len(prompts) == sum(3 * int(r["concurrency"]) for r in rows)  # warm-up C + 2 × C
    assert len(set(prompts)) == len(prompts)

    compared = read_tsv(tmp_path / "bench.compare.tsv")
    assert list(compared[0]) == list(TSV_COLUMNS)
    assert [(c["shape"], c["concurrency"], c["target"], c["baseline"]) for c in compared] == [
        ("8/4", "1", "gateway", "direct"),
        ("8/4", "2", "gateway", "direct"),
    ]
    for c in compared:
        assert c["rounds"] == "3" and c["errors"] == "0"
        ratio = [float(c[f"out_tok_ratio_{k}"]) for k in ("median", "min", "max")]
        ci = [float(c[f"out_tok_ratio_{k}"]) for k in ("ci_low", "ci_high")]
        assert all(math.isfinite(x) for x in ratio + ci) and ratio[1] > 0
        assert ratio[1] <= ratio[0] <= ratio[2] and ci[0] <= ci[1]  # a noisy fake: wide, finite
        assert math.isfinite(float(c["ttft_p50_delta_ms_median"]))
        assert c["verdict"] in ("met", "missed", "unclear")
    assert "against the baseline" in out and "comparison appended to" in out
    table = out[out.index("against the baseline") :]
    assert sum("gateway" in line and "direct" in line for line in table.splitlines()) == 2


def test_one_target_one_round_writes_no_comparison(fake: FakeHandle, tmp_path: Path):
    code, out = bench(
        *("--target", f"solo={fake.base_url}", "--shape", "8/4", "--concurrency", "1"),
        *("--prompts-per-slot", "1", "--tsv", str(tmp_path / "b.tsv")),
    )
    assert code == 0, out
    assert [r["round"] for r in read_tsv(tmp_path / "b.tsv")] == ["1"]
    assert "against the baseline" not in out and not (tmp_path / "b.compare.tsv").exists()


def test_an_older_tsv_is_refused_with_a_clear_message(fake: FakeHandle, tmp_path: Path):
    tsv = tmp_path / "old.tsv"
    tsv.write_text("\t".join(OLD_COLUMNS) + "\n")
    code, out = bench("--target", fake.base_url, "--concurrency", "1", "--tsv", str(tsv))
    assert code == 2 and "older bench" in out


def vllm_text(step: int) -> str:
    """What a serving vLLM shows after `step` scrapes' worth of traffic: per step 2 requests
    (two label sets), TTFT 20 + 40 ms, ITL 0.3 ms (the older metric name), E2E 250 ms."""
    return (
        histogram(
            "vllm:time_to_first_token_seconds",
            {"a": (0.02 * step, 1.0 * step), "b": (0.04 * step, 1.0 * step)},
        )
        + histogram("vllm:time_per_output_token_seconds", {"a": (0.003 * step, 10.0 * step)})
        + histogram("vllm:e2e_request_latency_seconds", {"a": (0.5 * step, 2.0 * step)})
        + "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n"
    )


def second_replica(step: int) -> str:
    """A second replica behind the gateway: 1 request of 1 s E2E per step, nothing else."""
    return histogram("vllm:e2e_request_latency_seconds", {"a": (1.0 * step, 1.0 * step)})


def test_server_metrics_are_scraped_around_each_run(fake: FakeHandle, tmp_path: Path):
    tsv, md = tmp_path / "bench.tsv", tmp_path / "cmp.md"
    with (
        serving_metrics(vllm_text) as (replica, served),
        serving_metrics(second_replica) as (replica2, served2),
    ):
        code, out = bench(
            *("--target", f"direct={fake.base_url}", "--target", f"gateway={fake.base_url}"),
            *("--server-metrics", f"direct={replica}", "--server-metrics", f"gateway={replica}"),
            *("--server-metrics", f"gateway={replica2}", "--shape", "8/4"),
            *("--concurrency", "1", "--prompts-per-slot", "2", "--rounds", "2"),
            *("--tsv", str(tsv), "--compare-out", str(md)),
        )
    assert code == 0, out
    rows = read_tsv(tsv)
    assert [(r["round"], r["target"]) for r in rows] == [
        ("1", "direct"),
        ("1", "gateway"),
        ("2", "gateway"),
        ("2", "direct"),
    ]
    # One probe per scraper and URL, then one scrape before and one after each run.
    assert len(served) == 2 + 2 * 4 and len(served2) == 1 + 2 * 2
    for r in rows:
        assert float(r["srv_ttft_mean_ms"]) == pytest.approx(30.0)  # (20 + 40) / 2
        assert float(r["srv_itl_mean_ms"]) == pytest.approx(0.3)
        for name in ("queue", "prefill", "decode"):
            assert r[f"srv_{name}_mean_ms"] == "nan"  # not exposed by this server
    direct = [r for r in rows if r["target"] == "direct"]
    gateway = [r for r in rows if r["target"] == "gateway"]
    assert all(r["srv_requests"] == "2" and float(r["srv_e2e_mean_ms"]) == 250.0 for r in direct)
    # The gateway's two replicas are summed: (0.5 + 1.0) s over 2 + 1 requests.
    assert all(r["srv_requests"] == "3" and float(r["srv_e2e_mean_ms"]) == 500.0 for r in gateway)
    assert "srv TTFT/ITL/E2E ms" in out and "30.0 / 0.3 / 250.0" in out
    text = md.read_text()
    assert "| shape | C | target | vs |" in text and "| 8/4 | 1 | gateway | direct | 2 |" in text
    assert "1.0000" in text.splitlines()[-1]  # the server-side ITL ratio, gateway / direct


def test_a_wrong_metrics_url_stops_the_bench_before_any_load(fake: FakeHandle, tmp_path: Path):
    with serving_metrics(lambda n: "# TYPE up gauge\nup 1\n") as (not_vllm, _):
        code, out = bench(
            *("--target", f"direct={fake.base_url}", "--server-metrics", not_vllm),
            *("--concurrency", "1", "--tsv", str(tmp_path / "b.tsv")),
        )
    assert code == 2 and "not vLLM" in out
    code, out = bench(
        *("--target", f"direct={fake.base_url}", "--server-metrics", "gw=http://127.0.0.1:9/m"),
        *("--concurrency", "1", "--tsv", str(tmp_path / "b.tsv")),
    )
    assert code == 2 and "no target labelled 'gw'" in out
    assert not [r for r in fake.requests() if r["path"] == "/v1/completions"]


def test_histograms_and_means_by_hand():
    before, after = histograms(vllm_text(3)), histograms(vllm_text(7))
    assert before["vllm:time_to_first_token_seconds"] == pytest.approx((0.18, 6.0))
    means = server_means(before, after)  # 4 steps: TTFT 0.24 s over 8, E2E 2 s over 8
    assert (means.srv_ttft_mean_ms, means.srv_e2e_mean_ms) == pytest.approx((30.0, 250.0))
    assert means.srv_requests == 8 and math.isnan(means.srv_decode_mean_ms)
    restarted = server_means(after, before)  # counters went backwards: a restarted server
    assert math.isnan(restarted.srv_ttft_mean_ms) and restarted.srv_requests == -1
    idle = server_means(before, before)  # no request in between: no mean, zero requests
    assert math.isnan(idle.srv_e2e_mean_ms) and idle.srv_requests == 0
    newer = histogram("vllm:inter_token_latency_seconds", {"a": (0.0, 0.0)})
    both = (
        histograms(newer + vllm_text(0)),
        histograms(
            histogram("vllm:inter_token_latency_seconds", {"a": (0.01, 5.0)}) + vllm_text(1)
        ),
    )
    assert server_means(*both).srv_itl_mean_ms == pytest.approx(2.0)  # the newer name wins
    urls = parse_server_metrics(
        ["http://127.0.0.1:1/metrics", "gw=http://127.0.0.1:2/metrics"], ["direct", "gw"]
    )
    assert urls == {
        "direct": ["http://127.0.0.1:1/metrics"],
        "gw": ["http://127.0.0.1:1/metrics", "http://127.0.0.1:2/metrics"],
    }
    with pytest.raises(ValueError, match="LABEL=URL"):
        parse_server_metrics(["gw=127.0.0.1:2"], ["gw"])
