"""A scheduled round that fails says why: its error class and masked message in /health, the
console's quality panel and `plumbline report health`, not "no round has run"."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai

from gateway.config import parse_config
from gateway.ledger.rounds import latest_rounds
from gateway.ledger.store import Store
from gateway.reports.health import report_health
from gateway.trust.rounds import failure_of
from plumbline_kit.fakes.upstream import running_fake
from tests.gateway.edge.test_lane import ADMIN, keyed_config
from tests.harness import serving


def run_round(app: Any) -> None:
    gw = app.state.gateway
    gw.scheduler.first_round = 0.0
    asyncio.run_coroutine_threadsafe(gw.scheduler.tick(1e9), gw.loop).result(timeout=120)


def test_a_round_refused_by_the_gateway_says_why_everywhere(tmp_path: Path) -> None:
    with running_fake(tokens=6) as fake:
        cfg = keyed_config(fake.base_url, tmp_path, every_hours=24)
        with serving(cfg, own_port=True, record=True) as (url, app):
            gw = app.state.gateway
            gw.scheduler._api_key = "pl-not-the-lane-key-0123456789abcdef"  # a stale key
            run_round(app)
            root = url.removesuffix("/v1")
            health = httpx.get(f"{root}/health").json()
            quality = httpx.get(
                f"{root}/console/api/quality", headers={"authorization": f"Bearer {ADMIN}"}
            ).json()
            rounds = latest_rounds(gw.store.engine)
            text = report_health(cfg, "24h", store=gw.store)
            doc = report_health(cfg, "24h", "json", store=gw.store)
    [mine] = health["evals"]["rounds"]
    assert mine["outcome"] == "failed" and mine["error_class"] == "http_401"
    assert mine["error"] == "Invalid API key."
    [stored] = rounds
    assert (stored["outcome"], stored["error_class"]) == ("failed", "http_401")
    assert quality["schedule"]["rounds"][0]["error"] == "Invalid API key."
    assert "failed (http_401: Invalid API key.)" in text
    assert '"error_class": "http_401"' in doc
    assert "pl-not-the-lane-key" not in text + doc + str(health) + str(quality)


def test_a_round_whose_items_all_failed_is_failed(tmp_path: Path) -> None:
    """Nothing answered (the upstream gone): the round measured nothing, and says so."""
    with running_fake(tokens=6) as fake:
        cfg = keyed_config(fake.base_url, tmp_path, every_hours=24)
    # The fake is gone: every item's request fails to connect.
    with serving(cfg, own_port=True, record=True) as (_url, app):
        gw = app.state.gateway
        gw.scheduler.config = cfg.model_copy(
            update={"evals": cfg.evals.model_copy(update={"timeout_s": 5})}
        )
        run_round(app)
        outcome = gw.scheduler.history.last
    assert outcome.outcome == "failed" and outcome.items["smol"]["failed"] > 0
    assert outcome.error_class and outcome.error


def test_a_failure_is_masked_of_the_key_and_of_anything_shaped_like_one() -> None:
    key = "pl-secret-lane-key"
    error = RuntimeError(f"refused key {key} and Bearer abcdefghijklmnop")
    kind, message = failure_of(error, (key,))
    assert kind == "RuntimeError" and key not in message and "abcdefghijklmnop" not in message
    request = httpx.Request("GET", "http://x")
    status = openai.AuthenticationError(
        "Error code: 401", response=httpx.Response(401, request=request), body={"message": "no"}
    )
    assert failure_of(status) == ("http_401", "no")


def test_report_health_with_no_round_says_none_has_run(tmp_path: Path) -> None:
    cfg = parse_config({"store": {"url": f"sqlite:///{tmp_path}/s.db"}}, root=tmp_path)
    store = Store.from_config(cfg)
    try:
        assert "scheduled eval rounds: none has run" in report_health(cfg, "24h", store=store)
    finally:
        store.close()
