"""The eval lane's credential: a scheduled round authenticates where /v1 needs a key, and the
credential opens nothing else (no route opens /v1 to everyone)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa

from evals.runner import RunSpec, load_run
from gateway.config import LANE_KEY_VAR
from gateway.edge.access import hash_key
from gateway.edge.lane import LaneCredential
from plumbline_kit.fakes.upstream import running_fake
from tests.harness import config_from, free_port, serving, wait_for

CLIENT = "pl-client-key-for-the-lane-tests"
ADMIN = "pl-admin-key-for-the-lane-tests"
CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}
LANE = {"x-plumbline-lane": "eval"}


def keyed_config(base_url: str, root: Path, **evals: Any) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "port": free_port()},
            "upstreams": [
                {
                    "name": "u",
                    "kind": "vllm",
                    "base_url": base_url,
                    "model": "m",
                    "profile": "smollm2",
                }
            ],
            "models": {"smol": {"profile": "smollm2", "upstreams": ["u"]}},
            "access": {
                "keys": [
                    # A budgeted client key allowed one model, and the admin key.
                    {
                        "id": "team",
                        "sha256": hash_key(CLIENT),
                        "models": ["smol"],
                        "requests_per_window": 1000,
                        "tokens_per_window": 10_000_000,
                    },
                    {"id": "ops", "sha256": hash_key(ADMIN), "role": "admin"},
                ]
            },
            "evals": {
                "suite": "smoke",
                "targets": ["smol"],
                "concurrency": 4,
                "timeout_s": 30,
                "runs_dir": str(root / "runs"),
                "tripwire": False,
                **evals,
            },
        }
    )


def test_a_scheduled_round_with_client_keys_succeeds_and_v1_stays_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with running_fake(tokens=6) as fake:
        cfg = keyed_config(fake.base_url, tmp_path, every_hours=2 / 3600)
        with serving(cfg, own_port=True, record=True) as (url, app):
            gw = app.state.gateway
            lane = app.state.access.lane.reveal()
            wait_for(lambda: gw.scheduler.last_run is not None, timeout=120)
            wait_for(lambda: gw.scheduler.history.last.outcome != "running", timeout=30)
            outcome = gw.scheduler.history.last
            _, results = load_run(gw.scheduler.last_run)
            health = httpx.get(url.removesuffix("/v1") + "/health").json()
            # /v1 is closed to a caller without a key, and to the lane's key off the lane.
            anonymous = httpx.post(f"{url}/chat/completions", json=CHAT)
            models_anon = httpx.get(f"{url}/models", headers=LANE)
            bearer = {"authorization": f"Bearer {lane}"}
            off_lane = httpx.post(f"{url}/chat/completions", json=CHAT, headers=bearer)
            on_lane = httpx.post(f"{url}/chat/completions", json=CHAT, headers={**bearer, **LANE})
            admin = httpx.get(url.removesuffix("/v1") + "/admin/keys", headers=bearer)
            console = httpx.get(url.removesuffix("/v1") + "/console/api/quality", headers=bearer)
            client = httpx.post(
                f"{url}/chat/completions", json=CHAT, headers={"authorization": f"Bearer {CLIENT}"}
            )
            # A client key may not put itself on the eval lane (it would pin an upstream and
            # be counted as eval traffic).
            client_on_lane = httpx.post(
                f"{url}/chat/completions",
                json=CHAT,
                headers={"authorization": f"Bearer {CLIENT}", "x-plumbline-upstream": "u", **LANE},
            )

            def key_ids() -> list[Any]:
                with gw.store.engine.connect() as conn:
                    query = sa.text("select distinct key_id, lane from requests")
                    return sorted(map(tuple, conn.execute(query)), key=str)

            wait_for(lambda: ("team", "client") in key_ids())
            rows = key_ids()
            with gw.store.engine.connect() as conn:
                stored = "\n".join(
                    str(tuple(r)) for r in conn.execute(sa.text("select * from requests"))
                )
    assert outcome.outcome == "ok", outcome
    assert results and all(r.outcome != "error" for r in results), [r.error for r in results]
    assert health["evals"]["rounds"][0]["outcome"] == "ok"
    assert anonymous.status_code == 401 and models_anon.status_code == 401
    assert off_lane.status_code == 403 and "eval lane" in off_lane.json()["error"]["message"]
    assert on_lane.status_code == 200
    assert admin.status_code == 403 and console.status_code == 403
    assert client.status_code == 200
    assert client_on_lane.status_code == 403, client_on_lane.text
    assert "client key cannot send requests on the eval lane" in client_on_lane.text
    assert client_on_lane.json()["error"]["type"]  # OpenAI's shape
    # The round's records name the lane's key by its id; the key itself is nowhere.
    assert ("eval-lane", "eval") in rows and ("team", "client") in rows
    assert ("team", "eval") not in rows
    assert lane not in stored and hash_key(lane) not in stored
    assert lane not in caplog.text and lane not in repr(gw.scheduler._spec(["smol"]))


def test_the_lane_key_is_the_configured_one_and_eval_run_presents_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[evals].lane_key_env`: the gateway takes its credential from that variable, and
    `plumbline eval run --config` (with --keep, to the store) presents it."""
    from typer.testing import CliRunner

    from gateway import cli

    monkeypatch.setenv("PLUMBLINE_TEST_LANE_KEY", "pl-configured-lane-key-0123456789")
    with running_fake(tokens=6) as fake:
        cfg = keyed_config(fake.base_url, tmp_path, lane_key_env="PLUMBLINE_TEST_LANE_KEY")
        toml = tmp_path / "gateway.toml"
        toml.write_text(
            f'[store]\nurl = "sqlite:///{tmp_path}/store.db"\n'
            '[evals]\nlane_key_env = "PLUMBLINE_TEST_LANE_KEY"\n'
        )
        with serving(cfg) as (url, app):
            assert app.state.access.lane.source == "configured"
            args = ["eval", "run", "-t", "smol", "--suite", "smoke", "--base-url", url]
            args += ["--runs-dir", str(tmp_path / "runs")]
            refused = CliRunner().invoke(cli.app, args, env={"COLUMNS": "300"})
            kept = CliRunner().invoke(cli.app, [*args, "--keep", "--config", str(toml)])
    assert refused.exit_code != 0 and "refused the key" in refused.output
    assert kept.exit_code == 0, kept.output
    assert "kept in the store" in kept.output
    assert "pl-configured-lane-key" not in kept.output


def test_a_credential_made_at_start_hides_itself() -> None:
    cfg = config_from({})
    lane = LaneCredential.from_config(cfg)
    assert lane.source == "made at start" and lane.reveal().startswith("pl-")
    assert lane.reveal() not in repr(lane) and lane.matches(hash_key(lane.reveal()))
    spec = RunSpec(base_url="http://x/v1", targets=["a"], api_key=lane.reveal())
    assert lane.reveal() not in repr(spec)


def test_workers_share_the_credential_their_supervisor_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LANE_KEY_VAR, "pl-made-by-the-supervisor-0123456789")
    lane = LaneCredential.from_config(config_from({}))
    assert lane.reveal() == "pl-made-by-the-supervisor-0123456789"


def test_the_runner_presents_the_lane_key_to_a_keyed_gateway(tmp_path: Path) -> None:
    """Against a gateway whose /v1 needs a key, a run presenting none fails on its first call
    with the gateway's 401 (what every scheduled round did before the lane had a key)."""
    from evals.runner import Runner

    with running_fake(tokens=6) as fake:
        cfg = keyed_config(fake.base_url, tmp_path)
        with serving(cfg) as (url, _app):
            spec = RunSpec(base_url=url, targets=["smol"], suite="smoke", runs_dir=tmp_path)
            with pytest.raises(openai.AuthenticationError):
                asyncio.run(Runner(spec).run())


def test_two_gateways_on_postgresql_one_keyed_round_between_them(
    tmp_path: Path, pg_admin: str
) -> None:
    """Two gateways (each its own made-at-start credential) on one PostgreSQL store with client
    keys: the one that claims the due round runs it through itself and it succeeds; the other
    runs none; both show it (the console reads the store)."""
    from tests.gateway import pg

    url = pg.fresh_database(pg_admin)
    with running_fake(tokens=6) as fake:
        one, two = (
            keyed_config(fake.base_url, tmp_path / name, every_hours=24).model_copy(
                update={"store": config_from({"store": {"url": url}}).store}
            )
            for name in ("one", "two")
        )
        with (
            serving(one, own_port=True, record=True) as (url_one, app_one),
            serving(two, own_port=True, record=True) as (url_two, app_two),
        ):
            ran = []
            for app in (app_one, app_two):
                gw = app.state.gateway
                gw.scheduler.first_round = 0.0
                tick = gw.scheduler.tick(1e9)
                ran.append(asyncio.run_coroutine_threadsafe(tick, gw.loop).result(timeout=120))
            admin = {"authorization": f"Bearer {ADMIN}"}
            views = [
                httpx.get(u.removesuffix("/v1") + "/console/api/quality", headers=admin).json()
                for u in (url_one, url_two)
            ]
            assert app_one.state.access.lane.reveal() != app_two.state.access.lane.reveal()
    assert ran == [True, False]
    for view in views:
        [latest] = view["schedule"]["rounds"]
        assert latest["outcome"] == "ok", latest
        assert view["rounds"] and view["rounds"][0]["arms"][0]["n"] > 0
