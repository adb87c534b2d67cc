"""Prometheus series derived from records: values, bounded labels, promtool, several workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import Config
from gateway.ledger.cost import ModelEconomics
from gateway.ledger.metrics import Metrics
from gateway.ledger.record import Attempt, Record

CONFIG = {
    "upstreams": [
        {
            "name": "local",
            "kind": "vllm",
            "base_url": "http://127.0.0.1:1/v1",
            "model": "q",
            "node": "box",
        },
        {
            "name": "or",
            "kind": "openai",
            "base_url": "https://openrouter.ai/api/v1",
            "model": "q/q",
            "provider": {"order": ["DeepInfra"]},
        },
    ],
    "models": {"qwen": {"upstreams": ["local"], "fallback": ["or"]}},
    "prices": {"or": {"input": 1.0, "cached_input": 0.1, "output": 2.0}},
    "nodes": {"box": {"cost_per_hour": 3.08, "utilisation": 0.7}},
}


def config() -> Config:
    return Config.model_validate(CONFIG)


def record(**kw: object) -> Record:
    values: dict[str, object] = dict(
        request_id="r",
        door="chat",
        model="qwen",
        stream=True,
        upstream="local",
        status=200,
        prompt_tokens=100,
        cached_tokens=60,
        completion_tokens=20,
        reasoning_tokens=5,
        queue_s=0.001,
        ttft_s=0.1,
        ttfa_s=0.2,
        e2e_s=1.0,
        itl_mean_s=0.02,
        attempts=[Attempt("local", "ok", 200, 1.0)],
    )
    values.update(kw)
    return Record(**values)  # type: ignore[arg-type]


def samples(m: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    body, _ = m.render()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
    }


MU_LOCAL = {"model": "qwen", "upstream": "local", "lane": "client"}


def value(m: Metrics, name: str, **labels: str) -> float:
    return samples(m).get((name, frozenset(labels.items())), 0.0)


def test_a_record_becomes_counters_and_histograms() -> None:
    m = Metrics(config())
    m.observe(record())
    m.observe(record(truncated=True, reasoning_leak=True, usage_estimated=True))
    mu = {"model": "qwen", "upstream": "local", "lane": "client"}
    assert value(m, "gateway_requests_total", **mu, provider="none", outcome="ok") == 2
    assert value(m, "gateway_tokens_total", **mu, kind="prompt") == 200
    assert value(m, "gateway_tokens_total", **mu, kind="cached") == 120
    assert value(m, "gateway_tokens_total", **mu, kind="completion") == 40
    assert value(m, "gateway_tokens_total", **mu, kind="reasoning") == 10
    assert value(m, "gateway_truncations_total", **mu, cause="upstream") == 1
    assert value(m, "gateway_truncations_total", **mu, cause="client_cap") == 0
    assert value(m, "gateway_reasoning_leaks_total", **mu) == 1
    assert value(m, "gateway_usage_estimated_total", **mu) == 1
    for clock in ("queue", "ttft", "ttfa", "e2e"):
        assert value(m, f"gateway_{clock}_seconds_count", **mu) == 2
    assert value(m, "gateway_e2e_seconds_sum", **mu) == pytest.approx(2.0)
    assert value(m, "gateway_inter_token_seconds_count", **mu) == 2


def test_truncations_say_whether_the_client_cap_or_the_upstream_cut_them() -> None:
    m = Metrics(config())
    m.observe(record(truncated=True, max_tokens=20))  # completion 20: stopped at its own cap
    m.observe(record(truncated=True, max_tokens=20))
    m.observe(record(truncated=True, max_tokens=4096))  # short of its cap: the upstream's cut
    m.observe(record(truncated=False, max_tokens=20))
    mu = {"model": "qwen", "upstream": "local", "lane": "client"}
    assert value(m, "gateway_truncations_total", **mu, cause="client_cap") == 2
    assert value(m, "gateway_truncations_total", **mu, cause="upstream") == 1


def test_dropped_fields_are_counted_per_model_door_and_field() -> None:
    m = Metrics(config())
    m.observe(record(door="responses", dropped="tools.web_search,tools.file_search"))
    m.observe(record(door="responses", dropped="tools.web_search"))
    m.observe(record(door="messages", dropped="Mcp Servers!"))  # cleaned into a bounded label
    m.observe(record(model="typo", door="chat", dropped="x"))
    m.observe(record())
    field = "gateway_dropped_fields_total"
    assert value(m, field, model="qwen", door="responses", field="tools.web_search") == 2
    assert value(m, field, model="qwen", door="responses", field="tools.file_search") == 1
    assert value(m, field, model="qwen", door="messages", field="mcp_servers_") == 1
    assert value(m, field, model="other", door="chat", field="x") == 1
    assert sum(v for (name, _), v in samples(m).items() if name == field) == 5


def test_a_whole_answer_is_no_time_to_first_token() -> None:
    """A non-streamed answer's first token arrives with its last: its end-to-end time is not a
    time to first token, and must not raise the TTFT that dashboards read."""
    m = Metrics(config())
    m.observe(record(stream=False, ttft_s=30.0, ttfa_s=30.0, e2e_s=30.0, itl_mean_s=None))
    m.observe(record())
    mu = {"model": "qwen", "upstream": "local", "lane": "client"}
    for clock in ("ttft", "ttfa"):
        assert value(m, f"gateway_{clock}_seconds_count", **mu) == 1
        assert value(m, f"gateway_{clock}_seconds_sum", **mu) < 1
    assert value(m, "gateway_e2e_seconds_count", **mu) == 2


def test_cost_drift_and_provider() -> None:
    m = Metrics(config())
    kw = dict(upstream="or", provider="DeepInfra", attempts=[Attempt("or", "ok", 200)])
    computed = (40 * 1.0 + 60 * 0.1 + 20 * 2.0) / 1e6
    m.observe(record(cost_usd=computed, charged_cost_usd=computed, **kw))
    m.observe(record(cost_usd=computed, charged_cost_usd=2 * computed, **kw))
    mu = {"model": "qwen", "upstream": "or", "lane": "client"}
    assert value(m, "gateway_cost_usd_total", **mu) == pytest.approx(2 * computed)
    assert value(m, "gateway_charged_cost_usd_total", **mu) == pytest.approx(3 * computed)
    assert value(m, "gateway_cost_drift_total", **mu) == 1
    assert value(m, "gateway_requests_total", **mu, provider="deepinfra", outcome="ok") == 2


def test_attempts_retries_fallbacks_and_errors() -> None:
    m = Metrics(config())
    m.observe(
        record(
            upstream="or",
            attempts=[
                Attempt("local", "connect_error"),
                Attempt("local", "http_503", 503),
                Attempt("or", "ok", 200),
            ],
        )
    )
    m.observe(
        record(
            status=502,
            error_class="AllUpstreamsFailed",
            upstream=None,
            attempts=[Attempt("local", "timeout")],
        )
    )
    assert (
        value(
            m,
            "gateway_attempts_total",
            model="qwen",
            upstream="local",
            lane="client",
            outcome="http_503",
        )
        == 1
    )
    assert value(m, "gateway_retries_total", **MU_LOCAL) == 1
    assert value(m, "gateway_fallbacks_total", model="qwen", upstream="or", lane="client") == 1
    assert (
        value(
            m,
            "gateway_errors_total",
            model="qwen",
            upstream="none",
            lane="client",
            error_class="allupstreamsfailed",
        )
        == 1
    )
    assert (
        value(
            m,
            "gateway_requests_total",
            model="qwen",
            upstream="none",
            lane="client",
            provider="none",
            outcome="error",
        )
        == 1
    )


def test_unknown_model_never_mints_a_series() -> None:
    m = Metrics(config())
    m.observe(record())
    m.observe(record(model="qwen-typo-0", upstream="made-up-0"))
    series = len(samples(m))
    for i in range(1, 50):
        m.observe(record(model=f"qwen-typo-{i}", upstream=f"made-up-{i}"))
    after = samples(m)
    assert len(after) == series  # 49 more unknown names, not one new series
    names = {v for _, labels in after for _, v in labels}
    assert not any("typo" in v or "made-up" in v for v in names)
    assert (
        value(
            m,
            "gateway_requests_total",
            model="other",
            upstream="other",
            lane="client",
            provider="none",
            outcome="ok",
        )
        == 50
    )


def test_providers_are_bounded() -> None:
    m = Metrics(config(), max_providers=3)
    for i in range(10):
        m.observe(record(upstream="or", provider=f"Host {i}"))
    providers = {
        dict(labels).get("provider")
        for (name, labels) in samples(m)
        if name == "gateway_requests_total"
    }
    assert providers == {"host_0", "host_1", "host_2", "other"}


def test_gauges() -> None:
    m = Metrics(config())
    m.inflight("local", 1)
    m.inflight("local", 1)
    m.inflight("local", -1)
    m.set_health("or", False)
    m.set_health("local", True)
    econ = ModelEconomics(
        "qwen",
        node_usd=4.4,
        node_prompt=147_000_000,
        node_completion=18_000_000,
        api_bill_usd=115.74,
    )
    econ.api_usd_per_m = 115.74 / 165
    m.set_economics({"qwen": econ, "nope": ModelEconomics("nope")})
    assert value(m, "gateway_inflight_requests", upstream="local") == 1
    assert value(m, "gateway_upstream_up", upstream="or") == 0
    assert value(m, "gateway_upstream_up", upstream="local") == 1
    assert value(
        m, "gateway_cost_per_million_tokens_usd", model="qwen", side="node"
    ) == pytest.approx(4.4 / 165)
    assert value(
        m, "gateway_cost_per_million_tokens_usd", model="qwen", side="api"
    ) == pytest.approx(115.74 / 165)
    assert value(m, "gateway_api_node_cost_ratio", model="qwen") == pytest.approx(115.74 / 4.4)
    assert not any(dict(labels).get("model") == "nope" for _, labels in samples(m))


def test_registries_are_per_app() -> None:
    a, b = Metrics(config()), Metrics(config())
    a.observe(record())
    assert (
        value(
            b,
            "gateway_requests_total",
            model="qwen",
            upstream="local",
            provider="none",
            outcome="ok",
        )
        == 0
    )


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool absent: apt-get install prometheus (Debian package)",
)
def test_exposition_passes_promtool() -> None:
    m = Metrics(config())
    m.observe(record())
    m.observe(
        record(
            upstream="or",
            provider="DeepInfra",
            cost_usd=0.001,
            charged_cost_usd=0.002,
            status=500,
            error_class="UpstreamError",
            truncated=True,
        )
    )
    m.inflight("local", 1)
    m.set_health("local", True)
    body, content_type = m.render()
    assert content_type.startswith("text/plain")
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60
    )
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
    assert not done.stdout.strip(), done.stdout.decode()


def test_metrics_folder_without_multiprocess_mode_is_refused(tmp_path: Path) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        pytest.skip("this test process runs in multiprocess mode")
    with pytest.raises(RuntimeError, match="PROMETHEUS_MULTIPROC_DIR"):
        Metrics(config(), multiproc_dir=tmp_path)


WORKER = textwrap.dedent("""
    import json, sys
    from gateway.config import Config
    from gateway.ledger.metrics import Metrics
    from gateway.ledger.record import Record
    m = Metrics(Config.model_validate(json.loads(sys.argv[1])), multiproc_dir=sys.argv[2])
    for _ in range(int(sys.argv[3])):
        m.observe(Record(request_id="r", door="chat", model="qwen", stream=False,
                         upstream="local", status=200, prompt_tokens=10, e2e_s=0.5))
    m.inflight("local", 1)
    if sys.argv[4] == "render":
        sys.stdout.write(m.render()[0].decode())
""")


def test_several_workers_are_summed_in_multiprocess_mode(tmp_path: Path) -> None:
    import json

    folder = tmp_path / "prom"
    folder.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)}
    root = str(Path(__file__).resolve().parents[3])

    def worker(n: int, mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", WORKER, json.dumps(CONFIG), str(folder), str(n), mode],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout

    worker(3, "quiet")
    text = worker(2, "render")
    found = {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    key = frozenset(
        {
            "model": "qwen",
            "upstream": "local",
            "lane": "client",
            "provider": "none",
            "outcome": "ok",
        }.items()
    )
    assert found[("gateway_requests_total", key)] == 5
    e2e = frozenset({"model": "qwen", "upstream": "local", "lane": "client"}.items())
    assert found[("gateway_e2e_seconds_count", e2e)] == 5


def test_inflight_is_read_from_the_pool_when_scraped() -> None:
    """One process: the gauge reads the pool's counts at scrape time; requests never touch it."""
    from gateway.serving.pool import Pool

    cfg = config()
    m = Metrics(cfg)
    pool = Pool(cfg)
    m.read_inflight(pool.states)
    pool.begin("local")
    pool.begin("local")
    assert value(m, "gateway_inflight_requests", upstream="local") == 2
    pool.end("local")
    assert value(m, "gateway_inflight_requests", upstream="local") == 1
    assert value(m, "gateway_inflight_requests", upstream="or") == 0


def test_a_series_appears_once_it_is_observed() -> None:
    """The per-route children are kept for reuse, yet a token kind or a clock no record has
    carried yet has no series, for this route or another."""
    m = Metrics(config())
    m.observe(record(stream=False, reasoning_tokens=0, cached_tokens=0, itl_mean_s=None))
    names = {(name, dict(labels).get("kind")) for name, labels in samples(m)}
    assert ("gateway_tokens_total", "prompt") in names
    assert ("gateway_tokens_total", "reasoning") not in names
    assert ("gateway_tokens_total", "cached") not in names
    assert not any(n.startswith(("gateway_ttft_", "gateway_inter_token_")) for n, _ in names)
    m.observe(record())  # streamed, every kind: the same route's series fill in
    m.observe(record(model="typo"))  # another (bounded) route: its own series
    mu = {"model": "qwen", "upstream": "local", "lane": "client"}
    assert value(m, "gateway_tokens_total", **mu, kind="reasoning") == 5
    assert value(m, "gateway_tokens_total", **mu, kind="prompt") == 200
    assert value(m, "gateway_ttft_seconds_count", **mu) == 1
    assert value(m, "gateway_e2e_seconds_count", **mu) == 2
    other = {"model": "other", "upstream": "local", "lane": "client"}
    assert value(m, "gateway_tokens_total", **other, kind="prompt") == 100
    assert value(m, "gateway_inter_token_seconds_count", **other) == 1
