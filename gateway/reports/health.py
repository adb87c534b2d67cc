"""`plumbline report health`: every configured upstream, what it served and what the watchdog
checks flagged in it, read from the store.

One row per upstream of the config — also those that served nothing in the window or only
failed — then any upstream the store names that the config no longer has. Per row:

    requests          records the upstream answered (it is the record's `upstream`)
    completed         of those, answers that completed (status 200, no error; not embeddings)
    errors            of those, requests that ended in an error
    failed_attempts   calls to it that failed before answering (connection refused, timeout,
                      5xx, a malformed answer; not the request's own 4xx, not a client leaving);
                      they sit in every record's `attempts`, also where another upstream (or
                      none) answered in the end
    error_rate        failed calls / (failed calls + requests answered without an error)
    last_error        the newest failed call's outcome (connect_error, http_502, timeout...)
                      and the time of its request
    state             failing (error rate >= 50%) | degraded (>= 5%) | ok | no traffic (no
                      call at all) | not configured: `gateway/ledger/upstream_state.py`
    check rates       the share of its completed answers each watchdog check flagged
                      (`gateway/trust/watchdog.py`), `truncation` being cuts by the upstream
    client_capped     answers that stopped at the request's own max_tokens (asked for, not a
                      fault: `gateway/ledger/truncation.py`), and their share of completed answers
    tripped           checks over their trip threshold; the config's own findings always are

Below the rows: how the newest scheduled eval rounds ended (a failed one's error class and
masked message) and each target's newest tripwire verdict (`gateway/ledger/rounds.py`).

Renders as a rich table, CSV or JSON.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from gateway.config import Config, Upstream
from gateway.config.trust import CHECKS, WatchdogConfig
from gateway.ledger import terminal
from gateway.ledger.health_queries import NOT_FAILURES, failed_attempts  # noqa: F401
from gateway.ledger.latency import Latency, ms_pair, streamed_latency
from gateway.ledger.rejection import rejection_counts, rejections_text
from gateway.ledger.rollups import health_counts
from gateway.ledger.rounds import latest_rounds, latest_tripwires, rounds_text
from gateway.ledger.store import Store
from gateway.ledger.upstream_state import error_rate, state_of
from gateway.ledger.window import Format, reading, span
from gateway.trust.watchdog import config_findings, pinned_providers


@dataclass(slots=True)
class HealthRow:
    upstream: str
    configured: bool
    requests: int
    completed: int
    errors: int
    failed_attempts: int
    rates: dict[str, float | None]
    samples: dict[str, int]
    client_capped: int
    client_capped_rate: float | None
    tripped: list[str] = field(default_factory=list)
    last_error: str | None = None
    last_error_time: float | None = None

    @property
    def error_rate(self) -> float | None:
        return error_rate(self.requests - self.errors, self.failed_attempts)

    # TTFT and TPOT percentiles of its streamed answers (gateway/ledger/latency.py).
    latency: Latency | None = None

    @property
    def state(self) -> str:
        if not self.configured:
            return "not configured"
        return state_of(self.requests - self.errors, self.failed_attempts)


def health_rows(
    config: Config,
    flags: Iterable[Sequence[Any]],
    failures: Counter[str],
    cfg: WatchdogConfig,
    last: dict[str, tuple[str, float]] | None = None,
) -> list[HealthRow]:
    """Every configured upstream in config order, then the store's others by name."""
    findings = config_findings(config)
    by_name = {r[0]: [int(x or 0) for x in r[1:]] for r in flags}
    names = [u.name for u in config.upstreams]
    names += sorted((set(by_name) | set(failures)) - set(names))
    rows = []
    for name in names:
        try:
            upstream: Upstream | None = config.upstream(name)
        except KeyError:
            upstream = None
        v = by_name.get(name, [0] * 15)
        total, ok, errors, cut, capped, leak, sampled, degen, tooled, bad = v[:10]
        provs, mism, charged, drift, unasked = v[10:]
        pinned = upstream is not None and bool(pinned_providers(upstream))
        parser = upstream is None or upstream.reasoning == "parser"
        pairs = {
            "truncation": (cut, ok),
            "reasoning_leak": (leak, ok if parser else 0),
            "degenerate": (degen, sampled),
            "tool_call": (bad, tooled),
            "provider_mismatch": (mism, provs if pinned else 0),
            "cost_drift": (drift, charged),
            # Of every completed answer (whether it asked not to think is not stored).
            "unasked_reasoning": (unasked, ok),
        }
        tripped = [
            c
            for c, (k, n) in pairs.items()
            if n and n >= cfg.threshold(c).min_samples and k / n >= cfg.threshold(c).rate
        ]
        tripped += [f.check for f in findings if f.upstream == name and f.trips]
        rows.append(
            HealthRow(
                upstream=name,
                configured=upstream is not None,
                requests=total,
                completed=ok,
                errors=errors,
                failed_attempts=failures.get(name, 0),
                rates={c: (k / n if n else None) for c, (k, n) in pairs.items()},
                samples={c: n for c, (_, n) in pairs.items()},
                client_capped=capped,
                client_capped_rate=capped / ok if ok else None,
                tripped=tripped,
                last_error=(last or {}).get(name, (None, None))[0],
                last_error_time=(last or {}).get(name, (None, None))[1],
            )
        )
    return rows


def report_health(
    config: Config,
    since: str = "24h",
    fmt: Format = "table",
    *,
    store: Store | None = None,
    now: float | None = None,
    cfg: WatchdogConfig | None = None,
) -> str:
    """Per configured upstream: traffic, failures, watchdog rates and what is past threshold."""
    start, now = span(since, now)
    cfg = cfg if cfg is not None else getattr(config, "watchdog", WatchdogConfig())
    with reading(config, store) as db, db.engine.connect() as conn:
        last: dict[str, tuple[str, float]] = {}
        flags, failures = health_counts(conn, start, now, last)
        refused = rejection_counts(conn, start, now)
        rounds, tripwires = latest_rounds(db.engine), latest_tripwires(db.engine)
        latency = streamed_latency(conn, start, now)
    rows = health_rows(config, flags, failures, cfg or WatchdogConfig(), last)
    for r in rows:
        r.latency = latency.get(r.upstream)
    findings = [asdict(f) for f in config_findings(config)]
    if fmt == "json":
        doc = {
            "since": start,
            "until": now,
            "rows": [asdict(r) | {"state": r.state, "error_rate": r.error_rate} for r in rows],
            "rejections": refused,
            "findings": findings,
            "rounds": rounds,
            "tripwire": tripwires,
        }
        return json.dumps(doc, indent=2)
    if fmt == "csv":
        return _csv(rows)
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}")
    lines = [*rejections_text(refused).splitlines(), *rounds_text(rounds, tripwires).splitlines()]
    return _table(rows, findings, since, lines)


COUNTS = ("requests", "completed", "errors", "failed_attempts")


def _csv(rows: list[HealthRow]) -> str:
    head = ["upstream", "state", *COUNTS, *(f"{c}_rate" for c in CHECKS)]
    head += ["client_capped", "client_capped_rate", "tripped"]
    head += ["error_rate", "last_error", "last_error_time"]
    lines = [",".join(head)]
    for r in rows:
        rates = [_rate(r.rates[c]) for c in CHECKS]
        counts = [str(getattr(r, c)) for c in COUNTS]
        tail = [str(r.client_capped), _rate(r.client_capped_rate), ";".join(r.tripped)]
        when = "" if r.last_error_time is None else f"{r.last_error_time:.3f}"
        tail += [_rate(r.error_rate), r.last_error or "", when]
        lines.append(",".join([r.upstream, r.state, *counts, *rates, *tail]))
    return "\n".join(lines) + "\n"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def _table(
    rows: list[HealthRow], findings: list[dict[str, Any]], since: str, lines: list[str]
) -> str:
    checks = {c: "truncation (upstream cut) %" if c == "truncation" else f"{c} %" for c in CHECKS}
    counts = ("upstream", "state", "requests", "errors", "failed calls", "error rate %")
    latency = ("streams", "TTFT ms (p50/p95)", "TPOT ms (p50/p95)")
    heads = (*counts, *latency, *checks.values(), "client-capped %", "tripped")
    cells = []
    for r in rows:
        rates = [
            "–" if (rate := r.rates[c]) is None else f"{100 * rate:.1f} (n={r.samples[c]})"
            for c in CHECKS
        ]
        capped = "–" if r.client_capped_rate is None else f"{100 * r.client_capped_rate:.1f}"
        lat = r.latency
        cells.append(
            (
                r.upstream,
                r.state,
                f"{r.requests:,}",
                f"{r.errors:,}",
                f"{r.failed_attempts:,}",
                "–" if r.error_rate is None else f"{100 * r.error_rate:.1f}",
                f"{lat.streams:,}" if lat else "0",
                ms_pair(lat.ttft_p50_s, lat.ttft_p95_s) if lat else "–",
                ms_pair(lat.tpot_p50_s, lat.tpot_p95_s) if lat else "–",
                *rates,
                capped,
                ", ".join(r.tripped) or "–",
            )
        )
    said = [f"{f['check']} on {f['upstream']}: {f['detail']}" for f in findings]
    for r in rows:
        if r.last_error is not None and r.last_error_time is not None:
            when = datetime.fromtimestamp(r.last_error_time, UTC).strftime("%Y-%m-%d %H:%M:%S")
            said.append(f"{r.upstream}: last error {r.last_error} at {when} UTC")
    title = f"Upstream health, last {since}"
    left = ("upstream", "state", "tripped")
    return terminal.render(title, heads, cells, [*said, *lines], left=left, wide=320)
