"""What each console panel shows, read from the gateway's own records, health and gate book.

No number here is computed a second way: cost is `plumbline report cost` (`report_cost`),
upstream health is ``/health`` plus `plumbline report health`, shadow agreement is
`plumbline report shadow`, the gate's evidence is the gate book's latest decision, and the eval
rounds are the scheduler's rows in the store (`eval_results`) summarised by `evals.stats` and
priced by `evals.cost` (the frontier the eval report draws). Only the traffic panel reads rows
of its own: request rate and TTFT/TPOT percentiles, which no report has, and the truncation
split by cause with `gateway.ledger.truncation`'s clauses.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from gateway.errors import BadRequest
from gateway.ledger.health_report import report_health
from gateway.ledger.report import report_cost
from gateway.ledger.rows import EVAL_RESULTS, REQUESTS
from gateway.ledger.truncation import capped_clause
from gateway.trust.shadow_report import report_shadow

if TYPE_CHECKING:
    from gateway.edge.app import Gateway

# The windows the page offers (its selector), in seconds.
WINDOWS = {"1h": 3600.0, "24h": 86_400.0, "7d": 604_800.0}
PERCENTILES = (50, 90, 99)
ROUNDS = 6  # eval runs shown, newest first
BUCKETS = 30  # points of the request-rate series


def window_of(text: str) -> str:
    """`text` if the page offers that window, else a 400 naming the ones it does."""
    if text not in WINDOWS:
        raise BadRequest(
            f"Unknown window {text!r}: use one of {', '.join(WINDOWS)}.", param="window"
        )
    return text


def upstreams(gw: Gateway, health: dict[str, Any], window: str, now: float) -> dict[str, Any]:
    """Per configured upstream: ``/health``'s live view (health, engine fingerprint, in-flight,
    cooling, demotion, the engine process) beside the watchdog's window and the store's
    `report health` row over `window` (requests, errors, rates, tripped checks)."""
    rows: dict[str, Any] = {}
    findings: list[Any] = []
    if gw.store is not None:
        doc = json.loads(report_health(gw.config, window, "json", store=gw.store, now=now))
        rows = {r["upstream"]: r for r in doc["rows"]}
        findings = doc["findings"]
    watch = health.get("watchdog", {})
    out = []
    for name, live in health["upstreams"].items():
        checks = watch.get(name, {}).get("checks", {})
        out.append(
            {
                "name": name,
                **live,
                "checks": checks,
                "tripped_now": sorted(c for c, v in checks.items() if v.get("tripped")),
                "report": rows.get(name),
            }
        )
    return {"window": window, "now": now, "upstreams": out, "findings": findings}


def cost(gw: Gateway, window: str, now: float) -> dict[str, Any]:
    """`plumbline report cost --since WINDOW --format json`, as the store has it."""
    if gw.store is None:
        return {"window": window, "store": False, "rows": [], "models": {}, "nodes": {}}
    doc: dict[str, Any] = json.loads(
        report_cost(gw.config, window, "json", store=gw.store, now=now)
    )
    return {"window": window, "store": True, **doc}


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        if not ordered:
            out[f"p{p}"] = None
            continue
        # Nearest rank: a value some request actually saw.
        out[f"p{p}"] = ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
    return out


def _tpot(e2e: float | None, ttft: float | None, tokens: int) -> float | None:
    """Time per output token after the first (None where it cannot be known)."""
    if e2e is None or ttft is None or tokens < 2:
        return None
    return max(0.0, e2e - ttft) / (tokens - 1)


def traffic(gw: Gateway, window: str, now: float) -> dict[str, Any]:
    """Per model, client traffic (the prod lane) over `window`: request rate, TTFT and TPOT
    percentiles, truncation by cause and the reasoning-leak rate; a rate series for the chart;
    shadow agreement (`plumbline report shadow`)."""
    span = WINDOWS[window]
    start = now - span
    if gw.store is None:
        return {"window": window, "store": False, "models": [], "series": [], "shadow": []}
    t = REQUESTS
    capped = capped_clause(t)
    query = sa.select(
        t.c.model,
        t.c.time,
        t.c.ttft_s,
        t.c.e2e_s,
        t.c.completion_tokens,
        t.c.truncated,
        capped.label("capped"),
        t.c.reasoning_leak,
    ).where(t.c.time >= start, t.c.time < now, t.c.lane == "prod")
    with gw.store.engine.connect() as conn:
        raw = list(conn.execute(query))
    by_model: dict[str, list[Any]] = {}
    for r in raw:
        by_model.setdefault(r[0], []).append(r)
    models = []
    for model, rs in sorted(by_model.items()):
        n = len(rs)
        ttfts = [r[2] for r in rs if r[2] is not None]
        tpots = [v for r in rs if (v := _tpot(r[3], r[2], int(r[4] or 0))) is not None]
        capped_n = sum(1 for r in rs if r[6])
        cut_n = sum(1 for r in rs if r[5]) - capped_n
        models.append(
            {
                "model": model,
                "requests": n,
                "per_minute": n / (span / 60),
                "ttft_s": _percentiles(ttfts),
                "tpot_s": _percentiles(tpots),
                "upstream_cut_rate": cut_n / n,
                "client_capped_rate": capped_n / n,
                "leak_rate": sum(1 for r in rs if r[7]) / n,
            }
        )
    width = span / BUCKETS
    counts = [0] * BUCKETS
    for r in raw:
        counts[min(BUCKETS - 1, int((r[1] - start) // width))] += 1
    series = [
        {"t": start + (i + 1) * width, "per_minute": c / (width / 60)} for i, c in enumerate(counts)
    ]
    shadow = json.loads(report_shadow(gw.config, window, "json", store=gw.store, now=now))
    return {
        "window": window,
        "store": True,
        "models": models,
        "series": series,
        "shadow": shadow["rows"],
    }


def _latest_runs(gw: Gateway, limit: int) -> list[tuple[str, float]]:
    assert gw.store is not None
    t = EVAL_RESULTS
    query = (
        sa.select(t.c.run, sa.func.max(t.c.time).label("kept"))
        .group_by(t.c.run)
        .order_by(sa.desc("kept"))
        .limit(limit)
    )
    with gw.store.engine.connect() as conn:
        return [(str(run), float(kept)) for run, kept in conn.execute(query)]


def _route_and_upstream(target: str) -> tuple[str, str | None, bool]:
    """A scheduler label `model@upstream` (`#control` for the control's second run), or a
    configured target (a model name)."""
    label, _, tag = target.partition("#")
    route, _, upstream = label.partition("@")
    return route, upstream or None, tag == "control"


def eval_round(gw: Gateway, run: str, kept: float) -> dict[str, Any]:
    """One stored run: per arm, accuracy with its Wilson interval, $/M output (node-hours for
    a node's items, as the eval report prices them) and whether it is on the frontier."""
    # Loaded here, not at gateway start: the eval suite stays off the serving path.
    from evals.cost import arm_costs, frontier, node_map, price_nodes
    from evals.result import ItemResult

    assert gw.store is not None
    results = [ItemResult.from_dict(d) for d in gw.store.eval_results([run])]
    results = price_nodes(results, *node_map(gw.config))
    arms: dict[str, list[Any]] = {}
    for r in results:
        arms.setdefault(r.target, []).append(r)
    costs = arm_costs(arms)
    on = frontier(costs)
    out = []
    for label, c in costs.items():
        route, upstream, control = _route_and_upstream(label)
        q = c.quality
        out.append(
            {
                "label": label,
                "route": route,
                "upstream": upstream,
                "control": control,
                "n": q.n,
                "correct": q.correct,
                "accuracy": q.accuracy,
                "ci": list(q.ci),
                "usd_per_m_output": c.usd_per_m_output,
                "cost_bases": list(c.bases),
                "on_frontier": label in on,
            }
        )
    return {"run": run, "kept": kept, "arms": out}


def quality(gw: Gateway) -> dict[str, Any]:
    """The latest eval rounds in the store and the gate's latest decision per gated route,
    with its evidence (per arm: score, interval, paired McNemar against the best, the noise
    floor of the control pair, the verdict)."""
    rounds = []
    if gw.store is not None:
        rounds = [eval_round(gw, run, kept) for run, kept in _latest_runs(gw, ROUNDS)]
    decisions = gw.gate_book.view()
    return {"store": gw.store is not None, "rounds": rounds, "decisions": decisions}
