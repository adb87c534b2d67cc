"""The quality gate end to end: the scheduler evaluates every upstream of a gated route through
the gateway itself (pinned on the eval lane), decides, and live routing follows the decision."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import httpx
import sqlalchemy as sa
from typer.testing import CliRunner

from evals import sandbox
from evals.result import ItemResult
from evals.runner import load_run
from gateway import cli
from gateway.ledger.rows import ROUNDS
from gateway.ledger.store import Store
from gateway.trust.schedule import EvalScheduler
from plumbline_kit.fakes.upstream import running_fake
from tests.gateway.trust.gated import gated_config
from tests.harness import config_from, free_port, serving, wait_for
from tests.loop_io import io_on


def test_gate_switches_to_the_cheapest_upstream_within_the_floor(tmp_path: Path) -> None:
    # The cheap upstream's answers are all cut short, so it loses the two instruction items the
    # dear one happens to pass: a 2-to-0 split, well inside the noise floor.
    with running_fake(tokens=6) as dear, running_fake(tokens=6, finish_reason="length") as cheap:
        cfg = gated_config(dear.base_url, cheap.base_url, tmp_path)
        with serving(cfg, own_port=True, record=True) as (url, app):
            gw = app.state.gateway
            before = {
                httpx.post(
                    f"{url}/chat/completions",
                    json={"model": "smol", "messages": [{"role": "user", "content": "hi"}]},
                ).headers["x-plumbline-upstream"]
                for _ in range(4)
            }
            loop_thread = asyncio.run_coroutine_threadsafe(_thread(), gw_loop(app)).result(10)
            recorded_in: list[int] = []
            record = gw.gate_book.record

            def recorded(decision: object) -> None:
                recorded_in.append(threading.get_ident())
                record(decision)

            gw.gate_book.record = recorded
            sandbox._smoke_failure.cache_clear()  # the round's own probe, not an earlier test's
            with io_on(loop_thread) as on_loop:
                run = gw.scheduler.run_gate("smol")
                decision = asyncio.run_coroutine_threadsafe(run, gw_loop(app)).result(120)
            after = {
                httpx.post(
                    f"{url}/chat/completions",
                    json={"model": "smol", "messages": [{"role": "user", "content": "hi"}]},
                ).headers["x-plumbline-upstream"]
                for _ in range(4)
            }
            view = httpx.get(f"{url.removesuffix('/v1')}/health").json()
            sent = {"dear": len(dear.requests()), "cheap": len(cheap.requests())}
    assert before <= {"dear", "cheap"}
    arms = {a["upstream"]: a for a in decision.to_dict()["arms"]}
    assert decision.best == "dear" and arms["dear"]["correct"] > arms["cheap"]["correct"]
    assert decision.chosen == "cheap", decision.reason
    assert "within the noise floor" in decision.reason
    # Beside the decision, what its round could tell apart.
    assert decision.resolution.startswith("this round can tell apart")
    assert arms["cheap"]["mde"] is not None and arms["cheap"]["mde"] <= 0.5
    assert after == {"cheap"}
    # Each upstream got the whole suite through the gateway, the control (dear) twice.
    n = arms["dear"]["n"]
    assert sent["dear"] >= 2 * n and sent["cheap"] >= n
    assert view["gate"]["smol"]["chosen"] == "cheap"
    # The decision went to the store off the event loop (a write there waits for the store's lock).
    assert recorded_in and loop_thread not in recorded_in
    # The round's files (run.json, the results, read back) and the sandbox's probe of a confined
    # child were made off the event loop too: a held write or a slow child holds no request.
    runs = str(tmp_path / "runs")
    assert [e for e in on_loop if e[0] != "open" or e[1].startswith(runs)] == []
    # So were the round's imports (the OpenAI client, the suites, scipy), where this process had
    # not made them before.
    imported = [p for _, p in on_loop if "/evals/" in p or "site-packages/openai/" in p]
    assert imported == []
    assert (tmp_path / "runs").is_dir() and any((tmp_path / "runs").glob("*/results.jsonl"))


async def _thread() -> int:
    return threading.get_ident()


def gw_loop(app: object) -> asyncio.AbstractEventLoop:
    return app.state.gateway.loop  # type: ignore[attr-defined]


def test_gateways_on_one_store_run_one_round_per_interval(tmp_path: Path) -> None:
    """Two gateways' schedulers on one store look at the same clock: a round runs at most once
    per interval between them (each claims it in the store first), not once per gateway. The
    rounds' eval work is counted, not run: the test above runs one."""
    interval = 0.25
    store = Store("sqlite:///var/records.db", root=tmp_path)
    ran: list[str] = []

    class Counting(EvalScheduler):
        async def run_once(  # type: ignore[override]
            self, now: float | None = None, outcome: object = None
        ) -> None:
            ran.append(self.base_url)

    evals = SimpleNamespace(every_hours=interval / 3600)
    config = SimpleNamespace(evals=evals)  # the scheduler reads only [evals] here
    one, two = (Counting(config, store, None, name) for name in ("one", "two"))  # type: ignore[arg-type]
    one.first_round = two.first_round = 1.0

    async def look(now: float) -> list[bool]:
        return [await one.tick(now), await two.tick(now)]

    async def clock() -> list[list[bool]]:
        return [await look(now) for now in (0.9, 1.0, 1.1, 1.25, 1.3, 1.5, 1.75)]

    try:
        looks = asyncio.run(clock())
        with store.engine.connect() as conn:
            started = sorted(conn.execute(sa.select(ROUNDS.c.started)).scalars())
    finally:
        store.close()
    # Before its first round nothing runs; then whoever looks first at a due round runs it.
    assert looks == [[False, False], [True, False], [False, False], [True, False]] + [
        [False, False],
        [True, False],
        [True, False],
    ]
    assert ran == ["one"] * 4 and started == [1.0, 1.25, 1.5, 1.75]


def test_a_scheduled_run_is_kept_in_the_store_and_reported_from_it(tmp_path: Path) -> None:
    """The gate's eval run outlives the runs folder: its results are rows, and `plumbline eval
    report --from-store` builds the same report from them."""
    with running_fake(tokens=6) as dear, running_fake(tokens=6) as cheap:
        cfg = gated_config(dear.base_url, cheap.base_url, tmp_path)
        with serving(cfg, own_port=True, record=True) as (_url, app):
            gw = app.state.gateway
            asyncio.run_coroutine_threadsafe(gw.scheduler.run_gate("smol"), gw_loop(app)).result(
                timeout=120
            )
    [folder] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    _, on_disk = load_run(folder)
    store = Store(cfg.store.url, root=cfg.root)  # type: ignore[attr-defined]
    try:
        kept = [ItemResult.from_dict(r) for r in store.eval_results([folder.name])]
    finally:
        store.close()
    assert len(kept) == len(on_disk) > 0
    assert sorted(map(repr, kept)) == sorted(map(repr, on_disk))
    shutil.rmtree(folder)  # the pod is gone
    config = tmp_path / "gateway.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{cfg.root}/var/plumbline.db"\n')  # type: ignore[attr-defined]
    out = tmp_path / "report"
    args = [
        "eval",
        "report",
        folder.name,
        "--from-store",
        "--config",
        str(config),
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert "noise floor" in (out / "report.md").read_text().lower()


def test_the_schedule_evaluates_its_targets_through_the_gateway_by_itself(tmp_path: Path) -> None:
    """`[evals] every_hours` and `targets`: one interval after start the gateway runs the suite
    (here with one reasoning-gym item) on each target through itself, in the eval lane; the
    results are in the runs folder and in the store, and every item's request reached the
    upstream."""
    with running_fake(tokens=6) as fake:
        upstream = {"name": "u", "kind": "vllm", "base_url": fake.base_url, "model": "m"}
        cfg = config_from(
            {
                "server": {"health_interval_s": 0, "retry_backoff_s": 0, "port": free_port()},
                "upstreams": [{**upstream, "profile": "smollm2"}],
                "models": {"smol": {"profile": "smollm2", "upstreams": ["u"]}},
                "evals": {
                    "every_hours": 2 / 3600,
                    "suite": "smoke",
                    "targets": ["smol"],
                    "concurrency": 4,
                    "timeout_s": 30,
                    "runs_dir": str(tmp_path / "runs"),
                    "reasoning_gym": 1,
                },
            }
        )
        with serving(cfg, own_port=True, record=True) as (_url, app):
            gw = app.state.gateway
            assert gw.scheduler.enabled and not (tmp_path / "runs").exists()
            wait_for(lambda: gw.scheduler.last_run is not None, timeout=120)
            first = gw.scheduler.last_run
            meta, results = load_run(first)
            wait_for(lambda: len(gw.store.eval_results([meta["run"]])) == len(results))
            sent = len(fake.requests())

            def lanes() -> list[str]:
                with gw.store.engine.connect() as conn:
                    return [lane for (lane,) in conn.execute(sa.text("select lane from requests"))]

            wait_for(lambda: len(lanes()) >= len(results))
    assert meta["targets"] == ["smol"] and {r.target for r in results} == {"smol"}
    assert meta["reasoning_gym"] == 1 and sum("-rg-" in r.item_id for r in results) == 1
    assert 0 < len(results) <= sent
    assert set(lanes()) == {"eval"}  # the suite's requests, recorded as the eval lane


def node_and_api(node: str, api: str, root: Path, **route: object) -> object:
    """A gated Qwen3 route on a vLLM node and a plain OpenAI-compatible API (cheaper)."""
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "port": free_port()},
            "upstreams": [
                {
                    "name": "node",
                    "kind": "vllm",
                    "base_url": node,
                    "model": "m",
                    "profile": "qwen3-instruct",
                },
                {"name": "api-b", "kind": "openai", "base_url": api, "model": "m"},
            ],
            "models": {
                "q": {
                    "profile": "qwen3-instruct",
                    "upstreams": ["node", "api-b"],
                    "policy": "cheapest_within_floor",
                    "gate": {"min_items": 5, "prices": {"node": 10.0, "api-b": 1.0}},
                    **route,
                }
            },
            "evals": {
                "suite": "smoke",
                "concurrency": 4,
                "timeout_s": 30,
                "runs_dir": str(root / "runs"),
            },
        }
    )


def test_a_round_refuses_an_api_not_at_parity_by_name_and_accepts_what_the_route_accepts(
    tmp_path: Path,
) -> None:
    """Through the gateway, a scheduled round: the plain API cannot be sent Qwen3's top_k or its
    thinking switch, and the gate says so by field, value and upstream; once the route accepts
    both, the API is compared at parity, wins on price, and the decision says what it accepted."""
    unsent = (
        "api-b cannot be sent top_k=20 (kind openai); "
        "api-b cannot be sent enable_thinking=false (kind openai)"
    )
    with running_fake(tokens=6) as node, running_fake(tokens=6) as api:
        for route, folder in (
            ({}, "refused"),
            ({"accept_unequal": ["top_k", "enable_thinking"]}, "ok"),
        ):
            cfg = node_and_api(node.base_url, api.base_url, tmp_path / folder, **route)
            with serving(cfg, own_port=True) as (_url, app):
                gw = app.state.gateway
                run = gw.scheduler.run_gate("q")
                decision = asyncio.run_coroutine_threadsafe(run, gw_loop(app)).result(timeout=120)
            arms = {a.upstream: a for a in decision.arms}
            if not route:
                assert decision.chosen == "node"
                assert not arms["api-b"].eligible
                assert arms["api-b"].why == f"refused, not at parity with node: {unsent}"
            else:
                assert decision.chosen == "api-b", decision.reason
                assert arms["api-b"].accepted == f"accepted unequal: {unsent}"
                assert decision.reason.endswith(f"(accepted unequal: {unsent})")
        told = [r["body"] for r in api.requests() if r["path"].endswith("/chat/completions")]
    assert told and not any({"top_k", "chat_template_kwargs"} & set(b) for b in told)


def test_a_round_starts_with_the_tripwire_and_an_upstream_that_fails_it_is_not_scored(
    tmp_path: Path,
) -> None:
    """The cheap upstream has collapsed (repeating digits): the round's tripwire fails it, so it
    is never scored; the gate names why it is not eligible, and the verdict is on /health, in
    the store and in the console's quality panel."""
    from gateway.edge.console import panels
    from gateway.ledger.rounds import latest_tripwires

    with running_fake(tokens=6) as dear, running_fake(degenerate=True, tokens=12) as cheap:
        cfg = gated_config(dear.base_url, cheap.base_url, tmp_path)
        with serving(cfg, own_port=True, record=True) as (url, app):
            gw = app.state.gateway
            gw.scheduler.first_round = 0.0
            tick = gw.scheduler.tick(1e9)
            asyncio.run_coroutine_threadsafe(tick, gw_loop(app)).result(timeout=180)
            root = url.removesuffix("/v1")
            health = httpx.get(f"{root}/health").json()
            # The console's quality panel (its route needs an admin key; the panel is this).
            quality = panels.quality(cfg, gw.store, gw.gate_book.view, gw.scheduler.status)
            stored = latest_tripwires(gw.store.engine)
            sent_cheap = len(cheap.requests())
    decision = health["gate"]["smol"]
    arms = {a["upstream"]: a for a in decision["arms"]}
    assert decision["chosen"] == "dear"
    assert arms["cheap"]["n"] == 0 and not arms["cheap"]["eligible"]
    assert arms["cheap"]["why"].startswith("refused: failed the tripwire: ")
    [round_] = health["evals"]["rounds"]
    assert round_["tripwire"]["smol@cheap"]["verdict"] == "degenerate"
    assert round_["tripwire"]["smol@dear"]["passed"] is True
    assert stored["smol@cheap"]["passed"] is False and stored["smol@cheap"]["source"] == "round"
    assert len(stored["smol@cheap"]["report"]["prompts"]) == 20
    assert quality["schedule"]["tripwire"]["smol@cheap"]["verdict"] == "degenerate"
    assert sent_cheap == 20  # the tripwire's prompts, and no eval item
