"""The web console in a real headless Chromium (Debian's `chromium`, driven by playwright)
against a real gateway: traffic driven through it to the fake upstream, eval rounds and a gate
decision kept in its store the way the scheduler keeps them. One browser for the module."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from evals.result import ItemResult
from evals.stats import wilson
from gateway.edge.access import hash_key
from gateway.edge.console.credentials import basic_password
from gateway.ledger.percentile import percentile
from gateway.ledger.rows import REQUESTS
from gateway.reports.cost import report_cost
from gateway.trust.gate import control_pair, decide
from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from tests.harness import config_from, serving, wait_for

ADMIN, CONSOLE, CLIENT = "sk-admin-console-test", "sk-console-test", "sk-client-test"
PROMPT: list[Any] = [{"role": "user", "content": "one two three four"}]
RUN = "20261201T000000Z-gate"
ACCEPTED = "api cannot be sent top_k=20 (kind openai)"  # as the route's accept_unequal lets it


def _config(fake: FakeHandle) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0.5, "retry_backoff_s": 0},
            "store": {"url": "sqlite:///var/records.db"},
            "access": {
                "store_keys": True,
                "keys": [
                    {"id": "ops", "sha256": hash_key(ADMIN), "role": "admin"},
                    {"id": "wall", "sha256": hash_key(CONSOLE), "role": "console"},
                    {"id": "app", "sha256": hash_key(CLIENT), "role": "client"},
                ],
            },
            "upstreams": [
                {
                    "name": "local",
                    "kind": "vllm",
                    "base_url": fake.base_url,
                    "model": "m",
                    "node": "box",
                },
                {"name": "api", "kind": "openai", "base_url": fake.base_url, "model": "m"},
            ],
            "models": {
                "qwen": {
                    "upstreams": ["local"],
                    "fallback": ["api"],
                    "shadow": {
                        "upstream": "api",
                        "fraction": 1.0,
                        "budget_requests_per_day": 100,
                        "max_concurrency": 8,  # every shadow mirrored, however they overlap
                    },
                },
                "qwen-api": {"upstreams": ["api"]},
            },
            "prices": {"api": {"input": 0.5, "output": 2.0}},
            "nodes": {"box": {"cost_per_hour": 3.0, "utilisation": 0.5}},
        }
    )


def _items(target: str, upstream: str, wrong: set[int], **kw: Any) -> list[ItemResult]:
    return [
        ItemResult(
            target=target,
            item_id=f"item-{i}",
            item_digest=f"d{i:03d}",
            family="math",
            outcome="wrong" if i in wrong else "correct",
            output_tokens=100,
            prompt_tokens=50,
            params_hash="p1",
            run=RUN,
            upstream=upstream,
            **kw,
        )
        for i in range(40)
    ]


def _keep_round(gw: Any) -> Any:
    """An eval round as `EvalScheduler.run_gate` keeps it: every arm's items in the store, the
    control pair and `decide` over them, the decision in the gate book."""
    node = _items("qwen@local", "local", {1, 2, 3, 4}, started=1000.0, latency_s=36.0)
    node_again = _items("qwen@local#control", "local", {1, 2, 3, 5}, started=1000.0, latency_s=36.0)
    api = _items("qwen@api", "api", {1, 2, 3}, cost=0.0004, cost_basis="price", accepted=ACCEPTED)
    gw.store.write_eval_results([r.to_dict() for r in node + node_again + api], time.time())
    floor = [control_pair("local", node, node_again)]
    decision = decide(
        "qwen", {"local": node, "api": api}, floor, {"local": None, "api": 1.25}, min_items=30
    )
    gw.gate_book.record(decision)
    return decision


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:  # a failure, never a skip: CI must have the browser (deploy/install.sh)
        pytest.fail("Debian's chromium is not installed: apt-get install chromium")
    return path


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeHandle]:
    with running_fake(tokens=8) as handle:
        yield handle


@pytest.fixture(scope="module")
def console(fake: FakeHandle) -> Iterator[dict[str, Any]]:
    cfg = _config(fake)
    with serving(cfg, record=True) as (url, app):
        gw = app.state.gateway
        client = openai.OpenAI(base_url=url, api_key=CLIENT, max_retries=0)
        for _ in range(3):
            client.chat.completions.create(model="qwen", messages=PROMPT)
        stream = client.chat.completions.create(model="qwen", messages=PROMPT, stream=True)
        for _ in stream:
            pass
        wait_for(lambda: gw.store.count() == 8, timeout=30)  # the shadows are in: no scripts
        # One answer stopped at the client's own cap, one cut by the upstream, one leaking
        # its reasoning into the answer: each one of the 8 qwen-api requests.
        fake.script(
            {"finish_reason": "length"},
            {"finish_reason": "length", "tokens": 3},
            {"leak_think": True},
        )
        client.chat.completions.create(model="qwen-api", messages=PROMPT, max_tokens=8)
        client.chat.completions.create(model="qwen-api", messages=PROMPT, max_tokens=8)
        for _ in range(6):
            client.chat.completions.create(model="qwen-api", messages=PROMPT)
        # 4 qwen + 4 shadows of them + 8 qwen-api.
        wait_for(lambda: gw.store.count() == 16, timeout=30)
        decision = _keep_round(gw)
        # The prober has learnt each engine's fingerprint.
        root = url.removesuffix("/v1")
        wait_for(lambda: httpx.get(root + "/health").json()["upstreams"]["local"]["engine"])
        yield {"root": root, "gw": gw, "cfg": cfg, "decision": decision}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        yield b
        b.close()


def _client_rows(gw: Any, model: str) -> list[Any]:
    t = REQUESTS
    query = sa.select(t.c.ttft_s, t.c.stream).where(t.c.model == model, t.c.lane == "client")
    with gw.store.engine.connect() as conn:
        return list(conn.execute(query))


def _save(page: Page, tmp: Path, name: str) -> Path:
    path = tmp / name
    page.screenshot(path=str(path), full_page=True)
    if out := os.environ.get("PLUMBLINE_ARTIFACTS"):
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / name)
    return path


def test_basic_password_reads_the_key_from_basic_auth() -> None:
    token = base64.b64encode(b"anyone:sk-1").decode()
    assert basic_password([(b"authorization", f"Basic {token}".encode())]) == "sk-1"
    assert basic_password([(b"authorization", b"Basic !!!")]) is None
    assert basic_password([(b"authorization", b"Bearer sk-1")]) is None


def test_a_key_is_required(console: dict[str, Any], browser: Browser) -> None:
    root = console["root"]
    for path in (
        "/console",
        "/console/api/cost",
        "/console/api/quality",
        "/console/assets/plotly.min.js",
    ):
        bare = httpx.get(root + path)
        assert bare.status_code == 401, path
        assert bare.headers["www-authenticate"].startswith("Basic ")
        assert bare.json()["error"]["type"] == "authentication_error"
        assert httpx.get(root + path, auth=("x", "wrong")).status_code == 401
        client = httpx.get(root + path, headers={"authorization": f"Bearer {CLIENT}"})
        assert client.status_code == 403, path
    for key in (ADMIN, CONSOLE):
        assert httpx.get(root + "/console/api/cost", auth=("x", key)).status_code == 200
        bearer = httpx.get(root + "/console/api/cost", headers={"authorization": f"Bearer {key}"})
        assert bearer.status_code == 200
    # A console key made through the admin API works the same.
    basic = httpx.post(
        root + "/admin/keys", auth=("x", ADMIN), json={"id": "wall-2", "role": "console"}
    )
    assert basic.status_code == 401  # Basic auth is read on the console's paths only
    made = httpx.post(
        root + "/admin/keys",
        headers={"authorization": f"Bearer {ADMIN}"},
        json={"id": "wall-2", "role": "console"},
    )
    assert made.status_code == 201, made.text
    assert httpx.get(root + "/console/api/cost", auth=("x", made.json()["key"])).status_code == 200
    # A console key opens the console only.
    assert httpx.get(root + "/admin/keys", auth=("x", CONSOLE)).status_code == 401
    assert httpx.get(root + "/admin/keys", headers={"x-api-key": CONSOLE}).status_code == 403
    bad = httpx.get(root + "/console/api/cost?window=2y", auth=("x", CONSOLE))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "window"
    # The browser without credentials is refused the page (headless, nobody answers the prompt).
    context = browser.new_context()
    try:
        with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
            context.new_page().goto(root + "/console")
        assert context.request.get(root + "/console/api/quality").status == 401
    finally:
        context.close()


def _cells(page: Page, table: str) -> list[list[str]]:
    rows: list[list[str]] = page.eval_on_selector_all(
        f"#{table} tbody tr",
        "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))",
    )
    return rows


def _row(rows: list[list[str]], *first: str) -> list[str]:
    for r in rows:
        if tuple(r[: len(first)]) == first:
            return r
    raise AssertionError(f"no row {first} in {rows}")


def cheaper(ratio: float) -> str:
    """The console's words for API ÷ node."""
    if ratio >= 1:
        return f"API costs {ratio:#.3g}× the node"
    return f"node costs {1 / ratio:#.3g}× the API"


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def test_the_console_shows_the_stored_numbers(
    console: dict[str, Any], browser: Browser, tmp_path: Path
) -> None:
    root, gw, cfg = console["root"], console["gw"], console["cfg"]
    context = browser.new_context(
        http_credentials={"username": "console", "password": CONSOLE},
        viewport={"width": 1440, "height": 1000},
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url))
    try:
        page.goto(root + "/console?every=5")
        # Locator waits: the page's CSP refuses eval, which wait_for_function would need.
        expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"\d"))
        page.wait_for_selector("#frontier-chart .main-svg")

        # Upstreams: live health and engine from /health, traffic from `report health`.
        health = httpx.get(root + "/health").json()["upstreams"]
        ups = _cells(page, "upstreams-table")
        local = _row(ups, "local")
        assert local[1] == ("healthy" if health["local"]["healthy"] else "unhealthy")
        assert health["local"]["engine"] and local[2] == health["local"]["engine"]
        assert local[3] == "0" and local[4] == "no" and local[5] == "not supervised"
        assert local[8] == "4"  # the 4 qwen requests it answered
        assert _row(ups, "api")[8] == "12"  # 8 qwen-api + 4 shadows

        # Cost: the rows of `plumbline report cost`, API $/M by hand from the price table.
        doc = json.loads(report_cost(cfg, "24h", "json", store=gw.store))
        cost = _cells(page, "cost-table")
        for r in doc["rows"]:
            row = _row(cost, r["model"], r["upstream"])
            assert row[3] == f"{r['requests']:,}"
            assert row[6] == ("–" if r["usd_per_m"] is None else f"{r['usd_per_m']:.4f}")
        api = next(r for r in doc["rows"] if r["model"] == "qwen-api")
        by_hand = (0.5 * api["prompt_tokens"] + 2.0 * api["completion_tokens"]) / (
            api["prompt_tokens"] + api["completion_tokens"]
        )
        assert _row(cost, "qwen-api", "api")[6] == f"{by_hand:.4f}"
        assert _row(cost, "qwen", "local")[2] == "node box"
        econ = _row(_cells(page, "economics-table"), "qwen")
        ratio = doc["models"]["qwen"]["api_node_ratio"]
        assert ratio is not None and econ[3] == cheaper(ratio)

        # Quality: Wilson intervals of the stored round, the gate's McNemar and verdict.
        rounds = _cells(page, "rounds-table")
        node_arm = _row(rounds, RUN, "qwen", "local")
        lo, hi = wilson(36, 40)
        assert node_arm[3:7] == ["40", "36", "90.0%", f"{100 * lo:.1f}–{100 * hi:.1f}%"]
        api_arm = _row(rounds, RUN, "qwen", "api")
        assert api_arm[5] == "92.5%"
        # 0.0004 USD per item over 100 output tokens: $4/M output; on the frontier (best).
        assert api_arm[7] == "4.0000" and api_arm[8] == "on frontier"
        # The accepted difference beside the arm's numbers, in the round and in the evidence.
        assert api_arm[9] == f"accepted unequal: {ACCEPTED}" and node_arm[9] == "at parity"
        decision = console["decision"]
        evidence = page.locator("#decisions table").first
        arms = evidence.locator("tbody tr").all_inner_texts()
        local_ev = next(a for a in decision.arms if a.upstream == "local")
        local_row = next(a for a in arms if a.startswith("local"))
        assert f"{local_ev.p_value:.3f}" in local_row and str(local_ev.only_best) in local_row
        api_row = next(a for a in arms if a.startswith("api"))
        assert api_row.endswith(f"accepted unequal: {ACCEPTED}")
        assert decision.reason in page.locator("#decisions").inner_text()
        # Beside the decision: what its round could tell apart, and per arm the gap it detects.
        shown = page.locator("#decisions .resolution").first.inner_text()
        assert shown.startswith("This round") and decision.resolution[1:] in shown
        mde = "no gap" if local_ev.mde is None else f"{100 * local_ev.mde:.1f} pts"
        assert mde in local_row
        assert page.locator("#frontier-chart .point").count() >= 2

        # At a glance: sums of the same figures.
        assert page.locator("#glance-requests").inner_text() == "12"  # 4 qwen + 8 qwen-api
        assert page.locator("#glance-gate").inner_text() == f"qwen → {decision.chosen}"
        assert page.locator("#glance-ratio").inner_text() == cheaper(ratio)
        loop = page.locator("#glance-loop").inner_text()  # this process's, from /health
        assert re.fullmatch(r"\d+% busy, timers \d+(\.\d+)? ms late", loop), loop

        # Traffic: rate, truncation by cause and leaks of the 8 qwen-api requests.
        traffic = _row(_cells(page, "traffic-table"), "qwen-api")
        assert traffic[1] == "8"
        assert traffic[2] == f"{8 / (86400 / 60):.2f}"
        assert traffic[5:8] == [_pct(1 / 8), _pct(1 / 8), _pct(1 / 8)]
        # Latency percentiles are the streams' only: qwen-api's answers were all whole.
        assert traffic[3] == traffic[4] == "– / – / –"
        streamed = [r for r in _client_rows(gw, "qwen") if r.stream]
        ttft = sorted(r.ttft_s for r in streamed if r.ttft_s is not None)
        assert len(streamed) == 1 < len(_client_rows(gw, "qwen"))
        ranks = [percentile(ttft, p / 100) for p in (50, 90, 99)]
        qwen = _row(_cells(page, "traffic-table"), "qwen")
        assert qwen[3] == " / ".join(f"{1000 * v:.1f}" for v in ranks)
        shadow = _row(_cells(page, "shadow-table"), "qwen", "local → api")
        assert shadow[2] == "4"

        # Live refresh: a new request shows up without a reload.
        page.evaluate("() => { window.stayed = true; }")  # gone if the page reloads
        httpx.post(
            root + "/v1/chat/completions",
            headers={"authorization": f"Bearer {CLIENT}"},
            json={"model": "qwen-api", "messages": PROMPT},
        ).raise_for_status()
        wait_for(lambda: gw.store.count() == 17, timeout=30)
        live = page.locator("#traffic-table tbody tr", has_text="qwen-api")
        expect(live.locator("td").nth(1)).to_have_text("9", timeout=30_000)  # the 5 s interval
        page.select_option("#window", "1h")
        expect(live.locator("td").nth(2)).to_have_text(f"{9 / 60:.2f}")
        assert page.evaluate("() => window.stayed") is True
        assert "window=1h" in page.url and "every=5" in page.url  # the window is in the URL

        shot = _save(page, tmp_path, "console.png")
        assert shot.stat().st_size > 10_000
        assert errors == []

        # Nothing from elsewhere: every request the page made went to the gateway.
        assert fetched and all(
            u.startswith(root + "/") for u in fetched if not u.startswith("data:")
        )
        assert f"{root}/console/assets/plotly.min.js" in fetched

        # Accessibility: every table has a caption, every control a label, the panels headings;
        # then axe-core (shipped in the axe-playwright-python wheel) finds nothing.
        uncaptioned = page.eval_on_selector_all(
            "table", "ts => ts.filter(t => !(t.caption && t.caption.textContent.trim())).length"
        )
        assert uncaptioned == 0
        expect(page.get_by_label("Window", exact=True)).to_have_attribute("id", "window")
        expect(page.get_by_label("Refresh", exact=True)).to_have_attribute("id", "every")
        assert page.get_by_role("heading", level=2).all_inner_texts() == [
            "At a glance",
            "Upstreams",
            "Cost",
            "Quality",
            "Traffic",
        ]
        results = Axe().run(page)
        assert results.violations_count == 0, results.generate_report()
    finally:
        context.close()


def test_a_gateway_without_a_store_says_so(fake: FakeHandle) -> None:
    cfg = _config(fake)
    with serving(cfg, record=False) as (url, _app):
        root, auth = url.removesuffix("/v1"), ("console", CONSOLE)
        for panel in ("cost", "traffic", "quality"):
            doc = httpx.get(f"{root}/console/api/{panel}", auth=auth).json()
            assert doc["store"] is False, panel
        quality = httpx.get(f"{root}/console/api/quality", auth=auth).json()
        assert quality["rounds"] == [] and quality["decisions"] == {}
        ups = httpx.get(f"{root}/console/api/upstreams?window=1h", auth=auth).json()
        assert [u["name"] for u in ups["upstreams"]] == ["local", "api"]
        assert all(u["report"] is None for u in ups["upstreams"])


def _layout(page: Page) -> dict[str, float]:
    return page.evaluate(
        """() => ({
            scroll: document.documentElement.scrollWidth,
            inner: window.innerWidth,
            rounds: document.getElementById("rounds-table").getBoundingClientRect().width,
            frontier: document.getElementById("frontier-chart").getBoundingClientRect().width,
        })"""
    )


@pytest.mark.parametrize("width", [1440, 390])
def test_the_page_fits_its_width_and_weighs_little(
    console: dict[str, Any], browser: Browser, width: int, tmp_path: Path
) -> None:
    """No sideways scroll of the page at a desktop's or a phone's width, the eval rounds table
    laid out (not squeezed to nothing beside the chart), the window kept in the URL across a
    reload, and everything the page fetched, as transferred (gzipped), under 1.5 MB."""
    root = console["root"]
    context = browser.new_context(
        http_credentials={"username": "console", "password": CONSOLE},
        viewport={"width": width, "height": 900},
    )
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    transferred: dict[str, int] = {}
    urls: dict[str, str] = {}
    cdp.on(
        "Network.requestWillBeSent", lambda e: urls.__setitem__(e["requestId"], e["request"]["url"])
    )
    cdp.on(
        "Network.loadingFinished",
        lambda e: transferred.__setitem__(
            urls.get(e["requestId"], e["requestId"]), e["encodedDataLength"]
        ),
    )
    encodings: dict[str, str | None] = {}
    page.on("response", lambda r: encodings.__setitem__(r.url, r.headers.get("content-encoding")))
    try:
        page.goto(root + "/console?window=7d&every=0")
        expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"\d"))
        page.wait_for_selector("#frontier-chart .main-svg")
        page.wait_for_selector("#cost-chart .main-svg")
        box = _layout(page)
        assert box["scroll"] <= box["inner"], box
        assert box["rounds"] > 200 and box["frontier"] > 200, box
        _save(page, tmp_path, f"console-{width}.png")

        # Every asset came gzipped, and the whole page under 1.5 MB as transferred.
        library = f"{root}/console/assets/plotly.min.js"
        assert (
            encodings[library] == "gzip"
            and encodings[f"{root}/console?window=7d&every=0"] == "gzip"
        )
        total = sum(transferred.values())
        assert library in transferred and total < 1_500_000, transferred
        print(f"console page at {width} px: {total:,} bytes transferred")

        # The window is the URL's, and a reload keeps it.
        assert page.locator("#window").input_value() == "7d"
        page.select_option("#window", "1h")
        assert "window=1h" in page.url
        page.reload()
        expect(page.locator("body")).to_have_attribute("data-refreshed", re.compile(r"\d"))
        assert page.locator("#window").input_value() == "1h"
        assert page.locator("#every").input_value() == "0"
    finally:
        context.close()


def test_assets_are_plain_to_a_client_without_gzip(console: dict[str, Any]) -> None:
    root, auth = console["root"], ("console", CONSOLE)
    plain = httpx.get(
        root + "/console/assets/plotly.min.js", auth=auth, headers={"accept-encoding": "identity"}
    )
    assert plain.status_code == 200 and "content-encoding" not in plain.headers
    assert plain.headers["vary"] == "Accept-Encoding" and b"Plotly" in plain.content[:4096]
    packed = httpx.get(
        root + "/console/assets/console.js", auth=auth, headers={"accept-encoding": "gzip;q=0"}
    )
    assert "content-encoding" not in packed.headers
