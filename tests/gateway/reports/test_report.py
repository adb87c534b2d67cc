"""`plumbline report cost` and `plumbline report health` from a real SQLite store."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest

from gateway.config import Config
from gateway.ledger import terminal
from gateway.ledger.metrics import Metrics
from gateway.ledger.record import Attempt, Record
from gateway.ledger.store import Store, record_row
from gateway.ledger.window import parse_since, window_economics
from gateway.reports.cost import report_cost
from gateway.reports.health import report_health
from gateway.reports.shadow import report_shadow
from tests.gateway.trust import test_watchdog as watchdog

NOW = 1_800_000_000.0


def config(root: Path) -> Config:
    return Config.model_validate(
        {
            "store": {"url": "sqlite:///var/records.db"},
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
                },
            ],
            "models": {"qwen": {"upstreams": ["local"], "fallback": ["or"]}},
            "prices": {"or": {"input": 0.42, "output": 3.00}},
            "nodes": {"box": {"cost_per_hour": 3.08, "utilisation": 0.7}},
            "root": root,
        }
    )


def rec(i: int, upstream: str, t: float, **kw: object) -> Record:
    values: dict[str, object] = dict(
        request_id=f"{upstream}-{i}",
        door="chat",
        model="qwen",
        stream=True,
        time=t,
        upstream=upstream,
        status=200,
        prompt_tokens=1000,
        cached_tokens=200,
        completion_tokens=100,
        reasoning_tokens=30,
        e2e_s=36.0,
    )
    values.update(kw)
    return Record(**values)  # type: ignore[arg-type]


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    c = config(tmp_path)
    store = Store.from_config(c)
    rows = []
    # 100 node requests back to back: 100 x 36 s = one busy hour.
    # Truncated: 10 with no cap and 2 short of their cap (the upstream cut them), 6 at the
    # client's own max_tokens (what the client asked for).
    for i in range(100):
        cap = 100 if 10 <= i < 16 else 500 if 16 <= i < 18 else None
        rows.append(rec(i, "local", NOW - 7200 + 36 * i, truncated=i < 18, max_tokens=cap))
    for i in range(20):
        cost = (800 * 0.42 + 200 * 0.42 + 100 * 3.00) / 1e6
        rows.append(
            rec(
                i,
                "or",
                NOW - 600 + i,
                cost_usd=cost,
                status=500 if i < 5 else 200,
                error_class="UpstreamError" if i < 5 else None,
            )
        )
    rows.append(rec(0, "local", NOW - 3 * 86_400, request_id="too-old"))
    store.write([record_row(r) for r in rows])
    store.close()
    return c


def test_parse_since() -> None:
    assert parse_since("24h") == 86_400
    assert parse_since("30m") == 1800
    assert parse_since("7d") == 7 * 86_400
    with pytest.raises(ValueError, match="since"):
        parse_since("yesterday")


def test_json_report(cfg: Config) -> None:
    doc = json.loads(report_cost(cfg, "24h", "json", now=NOW))
    rows = {r["upstream"]: r for r in doc["rows"]}
    assert set(rows) == {"local", "or"}
    local, api = rows["local"], rows["or"]
    assert local["requests"] == 100 and local["node"] == "box"
    assert (local["prompt_tokens"], local["cached_tokens"]) == (100_000, 20_000)
    assert (local["completion_tokens"], local["reasoning_tokens"]) == (10_000, 3_000)
    assert local["upstream_cut_rate"] == pytest.approx(0.12)
    assert local["client_capped_rate"] == pytest.approx(0.06)
    assert api["error_rate"] == pytest.approx(0.25)
    assert doc["nodes"]["box"]["busy_hours"] == pytest.approx(1.0)
    # The node's hour ($3.08 at 70% = $4.40) over the 110k tokens it served.
    assert local["usd_per_m"] == pytest.approx(4.40 / 110_000 * 1e6)
    assert api["usd_per_m"] == pytest.approx((1000 * 0.42 + 100 * 3.00) / 1100)
    api_bill = (100_000 * 0.42 + 10_000 * 3.00) / 1e6
    assert local["api_node_ratio"] == pytest.approx(api_bill / 4.40)
    assert doc["models"]["qwen"]["api_node_ratio"] == pytest.approx(api_bill / 4.40)


def test_window_excludes_older_rows(cfg: Config) -> None:
    doc = json.loads(report_cost(cfg, "30m", "json", now=NOW))
    assert {r["upstream"] for r in doc["rows"]} == {"or"}  # node traffic ended an hour ago


def test_csv_report(cfg: Config) -> None:
    rows = list(csv.DictReader(io.StringIO(report_cost(cfg, "24h", "csv", now=NOW))))
    assert [r["upstream"] for r in rows] == ["local", "or"]
    assert int(rows[0]["requests"]) == 100
    assert float(rows[0]["upstream_cut_rate"]) == pytest.approx(0.12)
    assert float(rows[0]["client_capped_rate"]) == pytest.approx(0.06)


def test_table_report(cfg: Config) -> None:
    text = report_cost(cfg, "24h", "table", now=NOW)
    assert "qwen" in text and "local (box)" in text and "API vs node" in text
    assert "upstream cut %" in text and "client cap %" in text
    assert "$/M tokens (in+out)" in text
    # API ÷ node, said as which side costs how many times the other.
    ratio = (100_000 * 0.42 + 10_000 * 3.00) / 1e6 / 4.40
    assert f"node costs {1 / ratio:#.3g}× the API" in text


def test_empty_store(tmp_path: Path) -> None:
    c = config(tmp_path)
    assert json.loads(report_cost(c, "1h", "json", now=time.time()))["rows"] == []
    assert "Cost, last 1h" in report_cost(c, "1h", "table")


def test_window_economics_feed_the_gauges(cfg: Config) -> None:
    store = Store.from_config(cfg)
    try:
        _, hours, econ = window_economics(cfg, store, 86_400, now=NOW)
    finally:
        store.close()
    assert hours == {"box": pytest.approx(1.0)}
    metrics = Metrics(cfg)
    metrics.set_economics(econ)
    body = metrics.render()[0].decode()
    ratio = (100_000 * 0.42 + 10_000 * 3.00) / 1e6 / 4.40
    assert f'gateway_api_node_cost_ratio{{model="qwen"}} {ratio!r}' in body


# ---- health --------------------------------------------------------------------------------


def test_report_health_reads_flags_back_from_the_store(tmp_path: Path) -> None:
    cfg = watchdog.config()
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    rows = []
    for i in range(30):
        # 6 answers stopped at the client's own max_tokens, 9 cut by the upstream (no cap).
        r = watchdog.record(
            "a",
            truncated=i < 15,
            max_tokens=16 if i < 6 else None,
            completion_tokens=16,
            sampled=i < 10,
            degenerate=i < 3,
        )
        r.request_id, r.time = f"req-{i}", 1000.0 + i
        rows.append(record_row(r))
    for i in range(30):
        # A healthy replica whose clients all ask for short answers: every one hits its cap.
        r = watchdog.record("b", truncated=True, max_tokens=8, completion_tokens=8)
        r.request_id, r.time = f"b-{i}", 1000.0 + i
        rows.append(record_row(r))
    for i in range(10):
        r = watchdog.record(
            "or", provider="Other" if i < 2 else "DeepInfra", provider_mismatch=i < 2
        )
        r.request_id, r.time = f"or-{i}", 1000.0 + i
        rows.append(record_row(r))
    store.write(rows)
    try:
        doc = json.loads(report_health(cfg, "1h", "json", store=store, now=2000.0))
        table = report_health(cfg, "1h", "table", store=store, now=2000.0)
        csv_text = report_health(cfg, "1h", "csv", store=store, now=2000.0)
    finally:
        store.close()
    by = {r["upstream"]: r for r in doc["rows"]}
    assert by["a"]["rates"]["truncation"] == pytest.approx(9 / 30)
    assert by["a"]["client_capped"] == 6
    assert by["a"]["client_capped_rate"] == pytest.approx(6 / 30)
    assert by["a"]["rates"]["degenerate"] == pytest.approx(0.3)
    assert set(by["a"]["tripped"]) == {"truncation", "degenerate"}
    assert by["b"]["rates"]["truncation"] == 0.0 and by["b"]["client_capped_rate"] == 1.0
    assert by["b"]["tripped"] == [] and by["b"]["state"] == "ok"
    assert by["or"]["rates"]["provider_mismatch"] == pytest.approx(0.2)
    assert by["or"]["tripped"] == ["provider_mismatch"]
    assert "truncation (upstream cut) %" in table and "client-capped %" in table
    head = csv_text.splitlines()[0].split(",")
    assert head[:3] == ["upstream", "state", "requests"]
    assert "truncation_rate" in head and "client_capped_rate" in head


def test_report_health_lists_dead_and_idle_upstreams(tmp_path: Path) -> None:
    """Every configured upstream has a row: one that only failed (its calls sit in other
    records' attempts, or in records nobody answered) and one that saw no traffic at all."""
    cfg = Config.model_validate(
        {
            "upstreams": [
                {"name": n, "kind": "vllm", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
                for n in ("live", "dead", "idle")
            ],
            "models": {"smol": {"upstreams": ["dead", "live", "idle"]}},
        }
    )
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")

    def one(i: int, upstream: str | None, attempts: list[Attempt], **kw: object) -> None:
        r = rec(i, "live", 1000.0 + i, model="smol", attempts=attempts, **kw)
        r.upstream = upstream
        store.write([record_row(r)])

    refused = Attempt("dead", "connect_error", None, 0.001)
    one(0, "live", [refused, Attempt("live", "ok", 200, 0.01)])  # fell back to live
    one(1, None, [refused, refused], status=502, error_class="AllUpstreamsFailed")
    one(2, "live", [Attempt("live", "http_400", 400, 0.01)], status=400, error_class="BadRequest")
    one(3, "live", [Attempt("live", "cancelled", None, 0.01)], status=499, error_class="Gone")
    one(4, "live", [Attempt("live", "ok", 200, 0.01)])
    try:
        doc = json.loads(report_health(cfg, "1h", "json", store=store, now=2000.0))
        table = report_health(cfg, "1h", "table", store=store, now=2000.0)
    finally:
        store.close()
    by = {r["upstream"]: r for r in doc["rows"]}
    assert list(by) == ["live", "dead", "idle"]  # the config's order, none missing
    assert by["dead"]["requests"] == 0 and by["dead"]["failed_attempts"] == 3
    assert by["dead"]["state"] == "failing"
    # Its error rate, last error and when, from the failed calls (upstream_state.py).
    assert by["dead"]["error_rate"] == 1.0 and by["dead"]["last_error"] == "connect_error"
    assert by["dead"]["last_error_time"] == 1001.0
    assert by["live"]["error_rate"] == 0.0 and by["live"]["last_error"] is None
    assert "dead: last error connect_error at 1970-01-01 00:16:41 UTC" in table
    assert by["idle"]["requests"] == 0 and by["idle"]["failed_attempts"] == 0
    assert by["idle"]["state"] == "no traffic"
    # live: its refusal of a bad request and a client that left are not live failing.
    assert by["live"]["requests"] == 4 and by["live"]["failed_attempts"] == 0
    assert by["live"]["errors"] == 2 and by["live"]["state"] == "ok"
    assert "failing" in table and "no traffic" in table


def test_report_health_names_what_an_upstream_cannot_be_told(tmp_path: Path) -> None:
    """A profiled route's upstream that cannot be told part of its profile is named with field,
    value and upstream; a difference the route accepts is shown too, and does not trip."""
    cfg = Config.model_validate(
        {
            "upstreams": [
                {"name": "node", "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "q"},
                {
                    "name": "api-b",
                    "kind": "openai",
                    "base_url": "http://127.0.0.1:2/v1",
                    "model": "q",
                },
                {
                    "name": "api-c",
                    "kind": "openai",
                    "base_url": "http://127.0.0.1:3/v1",
                    "model": "q",
                },
            ],
            "profiles": {"qwen": {"sampling": {"temperature": 0.7, "top_k": 20}}},
            "models": {
                "q": {"profile": "qwen", "upstreams": ["node", "api-b"]},
                "q-ok": {
                    "profile": "qwen",
                    "upstreams": ["node", "api-c"],
                    "accept_unequal": ["top_k"],
                },
            },
        }
    )
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        table = report_health(cfg, "1h", "table", store=store, now=NOW)
        doc = json.loads(report_health(cfg, "1h", "json", store=store, now=NOW))
    finally:
        store.close()
    assert "not_at_parity on api-b: models.q: api-b cannot be sent top_k=20 (kind openai)" in table
    assert (
        "accepted_unequal on api-c: models.q-ok: api-c cannot be sent top_k=20 (kind openai), "
        "accepted (accept_unequal)"
    ) in table
    by = {r["upstream"]: r for r in doc["rows"]}
    assert by["api-b"]["tripped"] == ["not_at_parity"]
    assert by["api-c"]["tripped"] == [] and by["node"]["tripped"] == []


def test_latency_percentiles_are_the_streams_only(tmp_path: Path) -> None:
    """A whole answer's TTFT is its end-to-end time and it has no TPOT: only streamed rows
    enter `report health`'s TTFT and TPOT percentiles."""
    c = config(tmp_path)
    store = Store.from_config(c)
    rows = [
        rec(i, "local", NOW - 100 + i, ttft_s=0.1 + i / 100, e2e_s=1.1 + i / 100)
        for i in range(10)  # streamed: 100 completion tokens in 1 s after the first
    ]
    rows += [
        rec(i, "local", NOW - 50 + i, stream=False, ttft_s=36.0, request_id=f"w{i}")
        for i in range(30)
    ]
    store.write([record_row(r) for r in rows])
    try:
        doc = json.loads(report_health(c, "1h", "json", store=store, now=NOW))
        table = report_health(c, "1h", "table", store=store, now=NOW)
    finally:
        store.close()
    latency = {r["upstream"]: r["latency"] for r in doc["rows"]}["local"]
    assert latency["streams"] == 10
    assert latency["ttft_p50_s"] == pytest.approx(0.14) and latency["ttft_p95_s"] == pytest.approx(
        0.19
    )
    assert latency["tpot_p50_s"] == pytest.approx(1.0 / 99)
    assert "TTFT ms (p50/p95)" in table and "140.0/190.0" in table


def test_reports_fit_an_80_column_terminal(cfg: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every report's table folds and wraps to the terminal's width (`COLUMNS`), with units in
    its headers and small sums that still read as money."""
    store = Store.from_config(cfg)
    shadow = rec(
        0,
        "local",
        NOW - 600 + 7,  # a shadow is recorded at its primary's time
        request_id="shadow-0",
        lane="shadow",
        shadow_of="or-7",
        agreement="agree",
        cost_usd=0.0000123,
        e2e_s=0.004,
    )
    store.write([record_row(shadow)])
    store.close()
    texts = {
        "cost": lambda: report_cost(cfg, "24h", "table", now=NOW),
        "health": lambda: report_health(cfg, "24h", "table", now=NOW),
        "shadow": lambda: report_shadow(cfg, "24h", "table", now=NOW),
    }
    monkeypatch.setenv("COLUMNS", "80")
    for name, text in texts.items():
        lines = text().splitlines()
        assert max(len(line) for line in lines) <= 80, (name, text())
    monkeypatch.setenv("COLUMNS", "300")
    wide = texts["shadow"]()
    assert "e2e s, mean (primary/shadow)" in wide and "cost $ (primary/shadow)" in wide
    assert "0.000720/0.0000123" in wide and "36.00/0.0040" in wide  # never 0.0000


def test_small_values_keep_their_digits() -> None:
    assert terminal.usd(0.0000123) == "0.0000123" and terminal.usd(1.5) == "1.5000"
    assert terminal.usd(None) == "–" and terminal.usd(0.0) == "0.0000"
    assert terminal.hours(0.001) == "0.001" and terminal.hours(2.5) == "2.50"
    assert terminal.cheaper(2.6) == "API costs 2.60× the node"
    assert terminal.cheaper(0.38) == "node costs 2.63× the API"
