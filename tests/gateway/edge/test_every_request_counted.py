"""Every request counted, every lane apart, every error in sight: a real gateway driven with
the real openai client and httpx (tests/gateway/traffic_mix.py), then each view read back: the
store, /metrics, /health, `plumbline report health` and `report cost`, and the console's API
and its page in a real headless Chromium."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser, expect, sync_playwright
from prometheus_client.parser import text_string_to_metric_families

from gateway.ledger.rows import REJECTIONS, REQUESTS
from gateway.reports.cost import report_cost
from gateway.reports.health import report_health
from plumbline_kit.fakes.upstream import running_fake
from tests.gateway.edge.test_console import _cells, _chromium, _row
from tests.gateway.traffic_mix import (
    BROKEN,
    CONSOLE,
    EVAL,
    FALLBACK,
    MIRRORED,
    drive,
    mixed_config,
)
from tests.harness import serving


@pytest.fixture(scope="module")
def mix() -> Iterator[dict[str, Any]]:
    with (
        running_fake(tokens=8) as fake,
        serving(mixed_config(fake.base_url), record=True) as (
            url,
            app,
        ),
    ):
        sent = drive(url, app)
        yield {"root": url.removesuffix("/v1"), "gw": app.state.gateway, "sent": sent}


def _metrics(root: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(root + "/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def _sum(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **want: str
) -> float:
    return sum(v for (n, labels), v in found.items() if n == name and set(want.items()) <= labels)


def test_each_refusal_is_in_the_store_the_metrics_and_its_answer(mix: dict[str, Any]) -> None:
    gw, sent = mix["gw"], mix["sent"]
    statuses = {"unknown_model": 404, "bad_request": 400, "bad_json": 400, "unauthorized": 401}
    assert sent.statuses == {**statuses, "over_budget": 429}
    with gw.store.engine.connect() as conn:
        rows = {r.reason: r for r in conn.execute(REJECTIONS.select())}
    assert set(rows) == set(sent.refused)
    for reason, (echoed, own) in sent.refused.items():
        row = rows[reason]
        # The id the answer carried is the one kept; the client's own where it sent one.
        assert row.request_id == own and row.status == sent.statuses[reason]
        assert row.door == "chat" and row.lane == "client"
        assert (row.client_request_id or own) == echoed
    assert sent.refused["unknown_model"][0] == "client-trace-404"
    assert rows["unknown_model"].client_request_id == "client-trace-404"
    assert rows["unknown_model"].model == "no-such-model"  # as asked
    assert rows["unauthorized"].key_id is None  # no key known; the key itself never kept
    assert rows["over_budget"].key_id == "tight" and rows["bad_json"].key_id == "app"
    kept = json.dumps([dict(r._mapping) for r in rows.values()])
    assert "sk-" not in kept and "messages" not in kept  # nothing of a secret or a body
    found = _metrics(mix["root"])
    for reason in sent.refused:
        assert _sum(found, "gateway_rejected_requests_total", door="chat", reason=reason) == 1
    route = "gateway_rejected_requests_total"
    assert _sum(found, route, reason="unknown_model", model="unknown") == 1
    assert _sum(found, route, reason="over_budget", model="mirrored") == 1
    assert _sum(found, route, reason="unauthorized", model="none") == 1
    # A model not configured never becomes a label.
    assert not any("no-such-model" in v for _, labels in found for _, v in labels)


def test_the_console_and_report_health_show_the_refusals(
    mix: dict[str, Any], browser: Browser
) -> None:
    root, sent = mix["root"], mix["sent"]
    auth = ("console", CONSOLE)
    doc = httpx.get(root + "/console/api/rejections?window=1h", auth=auth).json()
    by = {r["reason"]: r for r in doc["rows"]}
    assert {k: v["requests"] for k, v in by.items()} == dict.fromkeys(sent.refused, 1)
    assert by["unknown_model"]["status"] == 404 and by["unknown_model"]["model"] == "no-such-model"
    table = report_health(mix["gw"].config, "1h", "table", store=mix["gw"].store)
    assert "Rejected requests: 5" in table
    assert "unknown_model (404) at chat: 1, model asked 'no-such-model'" in table
    assert "over_budget (429) at chat: 1" in table
    page = _page(browser, root)
    try:
        shown = _cells(page, "rejections-table")
        assert _row(shown, "chat", "unknown_model")[2:5] == ["404", "1", "no-such-model"]
        for reason, status in (
            ("bad_json", "400"),
            ("unauthorized", "401"),
            ("over_budget", "429"),
        ):
            assert _row(shown, "chat", reason)[2:4] == [status, "1"]
    finally:
        page.context.close()


def test_a_failing_upstream_is_failing_in_every_view(mix: dict[str, Any], browser: Browser) -> None:
    root, gw = mix["root"], mix["gw"]
    live = httpx.get(root + "/health").json()["upstreams"]
    assert live["dead"]["state"] == "failing" and live["dead"]["error_rate"] == 1.0
    assert live["dead"]["failed_calls"] >= 2 and live["dead"]["last_error"] == "connect_error"
    assert live["good"]["state"] == "ok" and live["good"]["failed_calls"] == 0
    doc = json.loads(report_health(gw.config, "1h", "json", store=gw.store))
    row = next(r for r in doc["rows"] if r["upstream"] == "dead")
    assert row["state"] == "failing" and row["last_error"] == "connect_error"
    assert row["failed_attempts"] == live["dead"]["failed_calls"]
    table = report_health(gw.config, "1h", "table", store=gw.store)
    line = next(x for x in table.splitlines() if x.strip("│ ").startswith("dead"))
    assert "failing" in line and "100.0" in line
    assert "dead: last error connect_error at" in table
    # Cost: the route nobody answered is no API's cost, and has its errors.
    cost = json.loads(report_cost(gw.config, "1h", "json", store=gw.store))
    broken = [r for r in cost["rows"] if r["model"] == "broken"]
    assert broken and all(r["kind"] in ("no upstream", "failed") for r in broken)
    assert sum(r["errors"] for r in broken) == BROKEN
    assert all(r["error_rate"] == 1.0 for r in broken)
    page = _page(browser, root)
    try:
        dead = _row(_cells(page, "upstreams-table"), "dead")
        assert dead[1] == "failing"
        assert dead[11] == str(row["failed_attempts"]) and dead[12] == "100.0%"
        assert dead[13].startswith("connect_error at ")
        assert _row(_cells(page, "upstreams-table"), "good")[1] == "healthy"
        costs = _cells(page, "cost-table")
        assert all(r[2] != "API" for r in costs if r[0] == "broken")
        assert _row(costs, "broken")[8] == "100.0%"
        traffic = _row(_cells(page, "traffic-table"), "broken")
        assert traffic[8:10] == [str(BROKEN), "100.0%"]
    finally:
        page.context.close()


def test_shadow_and_eval_traffic_stay_out_of_the_client_lane(
    mix: dict[str, Any], browser: Browser
) -> None:
    root, gw = mix["root"], mix["gw"]
    client_mirrored = MIRRORED + 1  # and the tight key's one request
    found = _metrics(root)
    requests = "gateway_requests_total"
    assert _sum(found, requests, model="mirrored", lane="client") == client_mirrored
    assert _sum(found, requests, model="mirrored", lane="shadow") == client_mirrored
    assert _sum(found, requests, model="mirrored", lane="eval") == EVAL
    assert _sum(found, "gateway_cost_usd_total", lane="client") == 0  # "good" has no price
    assert _sum(found, "gateway_cost_usd_total", lane="shadow") > 0  # "alt" has one
    # The fallback landed on the shadow's own upstream: no shadow sent, the skip counted.
    skipped = _sum(
        found, "gateway_shadow_requests_total", model="fallback", outcome="skipped_same_upstream"
    )
    assert skipped == FALLBACK
    with gw.store.engine.connect() as conn:
        lanes = dict(
            conn.execute(
                sa.select(REQUESTS.c.lane, sa.func.count()).group_by(REQUESTS.c.lane)
            ).all()
        )
        pairs = list(
            conn.execute(
                sa.select(REQUESTS.c.upstream).where(
                    REQUESTS.c.lane == "shadow", REQUESTS.c.model == "fallback"
                )
            )
        )
    assert pairs == []  # never "good -> good"
    assert lanes == {
        "client": client_mirrored + FALLBACK + BROKEN,
        "shadow": client_mirrored,
        "eval": EVAL,
    }
    # report cost: the client lane by default, the others only when asked.
    cost = json.loads(report_cost(gw.config, "1h", "json", store=gw.store))
    assert {r["lane"] for r in cost["rows"]} == {"client"}
    assert sum(r["requests"] for r in cost["rows"] if r["model"] == "mirrored") == client_mirrored
    every = json.loads(report_cost(gw.config, "1h", "json", store=gw.store, lane="all"))
    assert {r["lane"] for r in every["rows"]} == {"client", "shadow", "eval"}
    table = report_cost(gw.config, "1h", "table", store=gw.store, lane="all")
    assert re.search(r"mirrored\s+│ shadow\s+│ alt", table)
    assert re.search(r"mirrored\s+│ eval\s+│ good", table)
    page = _page(browser, root)
    try:
        traffic = _row(_cells(page, "traffic-table"), "mirrored")
        assert traffic[1] == str(client_mirrored)
        assert _row(_cells(page, "cost-table"), "mirrored", "good")[3] == str(client_mirrored)
        page.select_option("#lane", "shadow")
        shadow = page.locator("#traffic-table tbody tr", has_text="mirrored")
        expect(shadow.locator("td").nth(1)).to_have_text(str(client_mirrored))
        expect(page.locator("#cost-table tbody tr", has_text="alt")).to_have_count(1)
        page.select_option("#lane", "eval")
        expect(shadow.locator("td").nth(1)).to_have_text(str(EVAL))
    finally:
        page.context.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        yield b
        b.close()


def _page(browser: Browser, root: str) -> Any:
    context = browser.new_context(
        http_credentials={"username": "console", "password": CONSOLE},
        viewport={"width": 1600, "height": 1000},
    )
    page = context.new_page()
    page.goto(root + "/console?every=0&window=1h")
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"\d"))
    page.select_option("#window", "1h")
    expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"[2-9]"))
    return page
