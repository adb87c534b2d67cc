"""What each console panel shows, read from the gateway's own records, health and gate book.

No number here is computed a second way: cost is `plumbline report cost` (`report_cost`),
upstream health is ``/health`` plus `plumbline report health`, shadow agreement is
`plumbline report shadow`, the gate's evidence is the gate book's latest decision, and the eval
rounds are the scheduler's rows in the store (`eval_results`) summarised by `evals.stats` and
priced by `evals.cost` (the frontier the eval report draws). Only the traffic panel reads rows
of its own: per model counts and the request-rate series from the 5-minute rollups
(`gateway.ledger.rollup_traffic`: whole buckets, raw rows at the window's ends) and TTFT/TPOT
percentiles from the newest streamed rows, which no report has.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from gateway.errors import BadRequest
from gateway.ledger.percentile import percentile
from gateway.ledger.record import CLIENT, LANES
from gateway.ledger.rejection import rejection_counts
from gateway.ledger.rollup_traffic import bucket_counts, model_counts
from gateway.ledger.rounds import latest_rounds, latest_tripwires
from gateway.ledger.rows import EVAL_RESULTS, REQUESTS
from gateway.reports.cost import report_cost
from gateway.reports.health import report_health
from gateway.reports.shadow import report_shadow

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.ledger.store import Store

# The windows the page offers (its selector), in seconds.
WINDOWS = {"1h": 3600.0, "24h": 86_400.0, "7d": 604_800.0}
PERCENTILES = (50, 90, 99)
ROUNDS = 6  # eval runs shown, newest first
# The request-rate series' slice per window: whole 5-minute rollup buckets (12, 48, 28 points).
SERIES_WIDTH = {"1h": 300, "24h": 1800, "7d": 21_600}
# Latency percentiles read at most this many of the window's newest client rows (counts and
# rates read every row).
LATENCY_ROWS = 50_000


def window_of(text: str) -> str:
    """`text` if the page offers that window, else a 400 naming the ones it does."""
    if text not in WINDOWS:
        raise BadRequest(
            f"Unknown window {text!r}: use one of {', '.join(WINDOWS)}.", param="window"
        )
    return text


def upstreams(
    config: Config, store: Store | None, health: dict[str, Any], window: str, now: float
) -> dict[str, Any]:
    """Per configured upstream: ``/health``'s live view (health, engine fingerprint, in-flight,
    cooling, demotion, the engine process) beside the watchdog's window and the store's
    `report health` row over `window` (requests, errors, rates, tripped checks)."""
    rows: dict[str, Any] = {}
    findings: list[Any] = []
    if store is not None:
        doc = json.loads(report_health(config, window, "json", store=store, now=now))
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
    # This process's event loop over the last minute (`gateway/serving/loop_watch.py`).
    loop = health.get("event_loop")
    return {
        "window": window,
        "now": now,
        "upstreams": out,
        "findings": findings,
        "event_loop": loop,
    }


def lane_of(text: str) -> str:
    """`text` if it is a lane (or "all"), else a 400 naming them."""
    if text not in (*LANES, "all"):
        raise BadRequest(
            f"Unknown lane {text!r}: use one of {', '.join((*LANES, 'all'))}.", param="lane"
        )
    return text


def cost(
    config: Config, store: Store | None, window: str, now: float, lane: str = CLIENT
) -> dict[str, Any]:
    """`plumbline report cost --since WINDOW --lane LANE --format json`, as the store has it."""
    if store is None:
        return {"window": window, "store": False, "rows": [], "models": {}, "nodes": {}}
    doc: dict[str, Any] = json.loads(
        report_cost(config, window, "json", store=store, now=now, lane=lane)
    )
    return {"window": window, "lane": lane, "store": True, **doc}


def rejections(store: Store | None, window: str, now: float) -> dict[str, Any]:
    """Requests refused before they had a record, per door, reason and status (the rows of
    `plumbline report health`'s rejected requests)."""
    if store is None:
        return {"window": window, "store": False, "rows": []}
    with store.engine.connect() as conn:
        rows = rejection_counts(conn, now - WINDOWS[window], now)
    return {"window": window, "store": True, "rows": rows}


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99 by the gateway's one percentile (`gateway.ledger.percentile`)."""
    return {f"p{p}": percentile(values, p / 100) if values else None for p in PERCENTILES}


def _tpot(e2e: float | None, ttft: float | None, tokens: int) -> float | None:
    """Time per output token after the first (None where it cannot be known)."""
    if e2e is None or ttft is None or tokens < 2:
        return None
    return max(0.0, e2e - ttft) / (tokens - 1)


def _client_rows(start: float, now: float, lane: str = CLIENT) -> Any:
    t = REQUESTS
    if lane == "all":
        return sa.and_(t.c.time >= start, t.c.time < now)
    return sa.and_(t.c.time >= start, t.c.time < now, t.c.lane == lane)


def _latencies(conn: Any, start: float, now: float, lane: str) -> dict[str, list[Any]]:
    """Per model, (TTFT, E2E, completion tokens) of the newest `LATENCY_ROWS` streamed rows of
    the lane. A whole answer's TTFT is its E2E and its TPOT nothing: only streams measure them."""
    t = REQUESTS
    query = (
        sa.select(t.c.model, t.c.ttft_s, t.c.e2e_s, t.c.completion_tokens)
        .where(_client_rows(start, now, lane), t.c.stream == sa.true())
        .order_by(t.c.time.desc())
        .limit(LATENCY_ROWS)
    )
    out: dict[str, list[Any]] = {}
    for model, *row in conn.execute(query):
        out.setdefault(model, []).append(row)
    return out


def _series(conn: Any, start: float, now: float, lane: str, width: int) -> list[dict[str, float]]:
    """Requests per minute in slices `width` seconds wide, aligned to multiples of it (so to
    whole 5-minute rollup buckets), over the part of each slice inside the window."""
    counts = bucket_counts(conn, start, now, lane)
    out = []
    edge = int(start // width) * width
    while edge < now:
        lo, hi = max(float(edge), start), min(float(edge + width), now)
        n = sum(v for k, v in counts.items() if edge <= k < edge + width)
        out.append({"t": hi, "per_minute": n / ((hi - lo) / 60)})
        edge += width
    return out


def traffic(
    config: Config, store: Store | None, window: str, now: float, lane: str = CLIENT
) -> dict[str, Any]:
    """Per model, one lane's traffic (the client's unless asked) over `window`: request rate,
    error, truncation by cause and reasoning-leak rates (over every row), TTFT and TPOT
    percentiles (over the newest `LATENCY_ROWS` streamed rows: `latency_rows` says how many), a
    rate series for the chart; shadow agreement (`report shadow`)."""
    span = WINDOWS[window]
    start = now - span
    if store is None:
        return {"window": window, "store": False, "models": [], "series": [], "shadow": []}
    with store.engine.connect() as conn:
        counts = model_counts(conn, start, now, lane)
        latencies = _latencies(conn, start, now, lane)
        series = _series(conn, start, now, lane, SERIES_WIDTH[window])
    models = []
    for model, (n, truncated, capped, leaked, errors) in sorted(counts.items()):
        rows = latencies.get(model, [])
        tpots = [v for ttft, e2e, k in rows if (v := _tpot(e2e, ttft, int(k or 0))) is not None]
        models.append(
            {
                "model": model,
                "requests": n,
                "per_minute": n / (span / 60),
                "latency_rows": len(rows),
                "ttft_s": _percentiles([r[0] for r in rows if r[0] is not None]),
                "tpot_s": _percentiles(tpots),
                "upstream_cut_rate": (truncated - capped) / n,
                "client_capped_rate": capped / n,
                "leak_rate": leaked / n,
                "errors": errors,
                "error_rate": errors / n,
            }
        )
    shadow = json.loads(report_shadow(config, window, "json", store=store, now=now))
    return {
        "window": window,
        "lane": lane,
        "store": True,
        "models": models,
        "series": series,
        "shadow": shadow["rows"],
    }


def _latest_runs(store: Store, limit: int) -> list[tuple[str, float]]:
    t = EVAL_RESULTS
    query = (
        sa.select(t.c.run, sa.func.max(t.c.time).label("kept"))
        .group_by(t.c.run)
        .order_by(sa.desc("kept"))
        .limit(limit)
    )
    with store.engine.connect() as conn:
        return [(str(run), float(kept)) for run, kept in conn.execute(query)]


def _route_and_upstream(target: str) -> tuple[str, str | None, bool]:
    """A scheduler label `model@upstream` (`#control` for the control's second run), or a
    configured target (a model name)."""
    label, _, tag = target.partition("#")
    route, _, upstream = label.partition("@")
    return route, upstream or None, tag == "control"


def eval_round(config: Config, store: Store, run: str, kept: float) -> dict[str, Any]:
    """One stored run: per arm, accuracy with its Wilson interval, $/M output (node-hours for
    a node's items, as the eval report prices them) and whether it is on the frontier."""
    # Loaded here, not at gateway start: the eval suite stays off the serving path.
    from evals.cost import arm_costs, frontier, node_map, price_nodes
    from evals.parity import accepted_text, unsent
    from evals.result import ItemResult

    results = [ItemResult.from_dict(d) for d in store.eval_results([run])]
    results = price_nodes(results, *node_map(config))
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
                # What the arm's numbers carry: accepted differences, and what its upstream
                # could not be told (gateway/serving/dialect.py).
                "accepted": accepted_text(arms[label]),
                "unsent": "; ".join(unsent(arms[label])),
            }
        )
    return {"run": run, "kept": kept, "arms": out}


def quality(
    config: Config,
    store: Store | None,
    decisions: Callable[[], dict[str, Any]],
    schedule: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The latest eval rounds in the store and the gate's latest decision per gated route
    (`decisions`: the gate book's view), with its evidence (per arm: score, interval, paired
    McNemar against the best, the noise floor of the control pair, the verdict); how the last
    scheduled rounds ended and each target's latest tripwire (`schedule`: the scheduler's own
    view, used where there is no store)."""
    rounds = []
    if store is not None:
        rounds = [eval_round(config, store, run, kept) for run, kept in _latest_runs(store, ROUNDS)]
    return {
        "store": store is not None,
        "rounds": rounds,
        "decisions": decisions(),
        "schedule": scheduled(store, schedule),
    }


def scheduled(store: Store | None, schedule: Callable[[], dict[str, Any]] | None) -> dict[str, Any]:
    """The newest scheduled rounds (how each ended, a failed one's class and masked message)
    and the newest tripwire verdict per target: from the store (every gateway's), else from
    this gateway's scheduler."""
    if store is not None:
        return {
            "rounds": latest_rounds(store.engine, ROUNDS),
            "tripwire": latest_tripwires(store.engine),
        }
    own = schedule() if schedule is not None else {"rounds": []}
    tripwire: dict[str, Any] = {}
    for r in reversed(own["rounds"]):
        tripwire.update(r.get("tripwire", {}))
    return {"rounds": own["rounds"], "tripwire": tripwire}
