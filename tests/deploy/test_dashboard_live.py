"""Every Grafana panel's PromQL against a live Prometheus scraping a real gateway.

Debian's `prometheus` (deploy/install.sh installs it) runs on a free loopback port, scraping a
gateway started here every second; two rounds of traffic go through the gateway (client
requests, streams, a fallback, a route whose only upstream refuses every connection, shadow
copies, the eval lane, refusals), each scraped, then every panel's expression is run through
the HTTP API: none may fail, and each panel that the traffic feeds must have data.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml

from plumbline_kit.fakes.upstream import running_fake
from tests.deploy.test_manifests import DASHBOARD, concrete
from tests.gateway.traffic_mix import CLIENT, PROMPT, TIGHT, mixed_config
from tests.harness import free_port, serving, wait_for

# Panels whose every target has no data from this traffic: $/M tokens and API÷node are
# published by the housekeeper each minute from the store's economics.
QUIET = {1, 2}


def _prometheus() -> str:
    path = shutil.which("prometheus")
    if path is None:  # a failure, never a skip: deploy/install.sh installs it
        pytest.fail("Debian's prometheus is not installed: apt-get install prometheus")
    return path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("prometheus")
    with running_fake(tokens=8) as fake, serving(mixed_config(fake.base_url)) as (url, app):
        target = url.removeprefix("http://").removesuffix("/v1")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "plumbline", "static_configs": [{"targets": [target]}]}
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        prom = subprocess.Popen(
            [
                _prometheus(),
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        api = f"http://127.0.0.1:{port}/api/v1/query"
        try:
            wait_for(lambda: _value(api, 'up{job="plumbline"}') == 1.0, timeout=60)
            for last in (False, True):
                _round(url, app, last)
            # Both rounds (and their shadows) in the gateway's counters, then in a scrape.
            shadows = 'sum(gateway_requests_total{lane="shadow"})'
            wait_for(lambda: _value(api, shadows) == 6.0, timeout=30)
            time.sleep(2.5)  # a later scrape: rates see the last round's increase
            yield {"api": api}
        finally:
            prom.terminate()
            prom.wait(timeout=30)


def _query(api: str, expr: str) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(api, params={"query": expr}, timeout=10).json()
    return doc


def _value(api: str, expr: str) -> float | None:
    try:
        result = _query(api, expr)["data"]["result"]
    except (httpx.HTTPError, KeyError, ValueError):
        return None
    return float(result[0]["value"][1]) if result else None


def _round(url: str, app: Any, last: bool) -> None:
    """Client requests (whole and streamed), a fallback, a failing route, the eval lane and
    three refusals; the tight key's one request in the first round, its 429 in the last."""
    client = openai.OpenAI(base_url=url, api_key=CLIENT, max_retries=0)
    for _ in range(2):
        client.chat.completions.create(model="mirrored", messages=PROMPT)
    for _ in client.chat.completions.create(model="mirrored", messages=PROMPT, stream=True):
        pass
    client.chat.completions.create(model="fallback", messages=PROMPT)
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="broken", messages=PROMPT)
    lane = openai.OpenAI(
        base_url=url,
        api_key=app.state.access.lane.reveal(),
        max_retries=0,
        default_headers={"x-plumbline-lane": "eval"},
    )
    lane.chat.completions.create(model="mirrored", messages=PROMPT)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=PROMPT)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="sk-nope", max_retries=0).chat.completions.create(
            model="mirrored", messages=PROMPT
        )
    bad = httpx.post(
        url + "/chat/completions",
        content=b"{",
        headers={"authorization": f"Bearer {CLIENT}", "content-type": "application/json"},
    )
    assert bad.status_code == 400
    tight = openai.OpenAI(base_url=url, api_key=TIGHT, max_retries=0)
    if last:
        with pytest.raises(openai.RateLimitError):
            tight.chat.completions.create(model="fallback", messages=PROMPT)
    else:  # its one request (the fallback's shadow is skipped: no shadow record)
        tight.chat.completions.create(model="fallback", messages=PROMPT)
    time.sleep(2.5)  # scraped: the next round's counters are increases over these


def _targets() -> list[tuple[int, str, str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (p["id"], p["title"], t["refId"], t["expr"])
        for p in dashboard["panels"]
        for t in p.get("targets", [])
    ]


def test_every_panel_query_runs_and_the_fed_ones_have_data(live: dict[str, Any]) -> None:
    empty = []
    for panel, title, ref, expr in _targets():
        for lane in ("client", ".*"):
            doc = _query(live["api"], concrete(expr, rate="1m", lane=lane))
            assert doc["status"] == "success", (title, ref, doc)
            if panel not in QUIET and not doc["data"]["result"]:
                empty.append(f"{panel} {title} {ref} (lane {lane})")
    assert empty == []


def _by(live: dict[str, Any], panel: int, ref: str = "A", lane: str = "client") -> dict[str, float]:
    expr = next(e for p, _, r, e in _targets() if p == panel and r == ref)
    doc = _query(live["api"], concrete(expr, rate="1m", lane=lane))
    out = {}
    for series in doc["data"]["result"]:
        metric = series["metric"]
        key = metric.get("upstream") or metric.get("lane") or metric.get("reason") or ""
        out[key] = float(series["value"][1])
    return out


def test_the_panels_say_what_the_traffic_was(live: dict[str, Any]) -> None:
    # The failing upstream is failing (2), the one that answered ok (0).
    state = _by(live, 9)
    assert state["dead"] == 2 and state["good"] == 0 and state["alt"] == 0
    assert _by(live, 10)["dead"] == 1.0
    # Error rate: 0, not "No data", where nothing failed (the eval lane); above 0 for clients.
    assert _by(live, 5, lane="eval") == {"": 0.0}
    assert _by(live, 5)[""] > 0
    # Truncation: upstream cuts and client caps are two series, 0 where none happened.
    assert _by(live, 6, "A") == {"": 0.0} and _by(live, 6, "B") == {"": 0.0}
    # Lanes apart: client, eval and shadow requests each their own series.
    assert set(_by(live, 8)) == {"client", "eval", "shadow"}
    assert {"unknown_model", "unauthorized", "bad_json"} <= set(_by(live, 13))
    assert _by(live, 12)[""] > 0  # inter-token latency of the streamed answers
