"""`plumbline report shadow`: the shadow pairs read back from the store, per (model, primary,
shadow): pairs, agreement with its Wilson interval, latency, tokens and cost of either side."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from gateway.config import Config
from gateway.ledger import terminal
from gateway.ledger.rows import REQUESTS
from gateway.ledger.window import Format, reading, span
from gateway.trust.agreement import AGREE, DIFFER


@dataclass(slots=True)
class ShadowRow:
    model: str
    primary: str | None
    shadow: str | None
    pairs: int
    agreements: dict[str, int]
    agree_rate: float | None  # over pairs where both answered
    agree_ci: tuple[float, float] | None
    primary_e2e_s: float | None
    shadow_e2e_s: float | None
    primary_tokens: int
    shadow_tokens: int
    primary_cost_usd: float
    shadow_cost_usd: float


def _shadow_query(since: float, until: float) -> Any:
    s, p = REQUESTS.alias("s"), REQUESTS.alias("p")
    join = s.join(p, sa.and_(p.c.time == s.c.time, p.c.request_id == s.c.shadow_of))
    return (
        sa.select(
            s.c.model,
            p.c.upstream,
            s.c.upstream,
            s.c.agreement,
            sa.func.count(),
            sa.func.avg(p.c.e2e_s),
            sa.func.avg(s.c.e2e_s),
            sa.func.sum(p.c.completion_tokens),
            sa.func.sum(s.c.completion_tokens),
            sa.func.sum(sa.func.coalesce(p.c.charged_cost_usd, p.c.cost_usd, 0.0)),
            sa.func.sum(sa.func.coalesce(s.c.charged_cost_usd, s.c.cost_usd, 0.0)),
        )
        .select_from(join)
        # shadow_of IS NOT NULL: what the join needs anyway, and what lets the partial index
        # `ix_requests_shadow_time` find the window's (few) shadow rows without reading the
        # others (a day at the seed's rate: 7 s on SQLite by the primary key, 1 ms by it).
        .where(
            s.c.lane == "shadow",
            s.c.shadow_of.is_not(None),
            s.c.time >= since,
            s.c.time < until,
        )
        .group_by(s.c.model, p.c.upstream, s.c.upstream, s.c.agreement)
    )


def shadow_rows(raw: Sequence[Sequence[Any]]) -> list[ShadowRow]:
    from evals.stats import wilson

    groups: dict[tuple[str, str | None, str | None], list[Sequence[Any]]] = {}
    for r in raw:
        groups.setdefault((r[0], r[1], r[2]), []).append(r)
    rows = []
    for (model, primary, shadow), parts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        counts = {str(r[3]): int(r[4]) for r in parts}
        n = sum(counts.values())

        def mean(i: int, parts: list[Sequence[Any]] = parts) -> float | None:
            vals = [(r[i], r[4]) for r in parts if r[i] is not None]
            w = sum(c for _, c in vals)
            return sum(v * c for v, c in vals) / w if w else None

        agree = sum(counts.get(a, 0) for a in AGREE)
        comparable = agree + sum(counts.get(d, 0) for d in DIFFER)
        rows.append(
            ShadowRow(
                model,
                primary,
                shadow,
                n,
                counts,
                agree / comparable if comparable else None,
                wilson(agree, comparable) if comparable else None,
                mean(5),
                mean(6),
                sum(int(r[7] or 0) for r in parts),
                sum(int(r[8] or 0) for r in parts),
                sum(float(r[9] or 0) for r in parts),
                sum(float(r[10] or 0) for r in parts),
            )
        )
    return rows


def report_shadow(
    config: Config,
    since: str = "24h",
    fmt: Format = "table",
    *,
    store: Any = None,
    now: float | None = None,
) -> str:
    """Per (model, primary, shadow): pairs, agreement with its interval, latency, tokens, cost."""
    start, now = span(since, now)
    with reading(config, store) as db, db.engine.connect() as conn:
        rows = shadow_rows(list(conn.execute(_shadow_query(start, now))))
    if fmt == "json":
        return json.dumps(
            {"since": start, "until": now, "rows": [asdict(r) for r in rows]}, indent=2
        )
    if fmt == "csv":
        return _csv(rows)
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}")
    return _table(rows, since)


def _csv(rows: list[ShadowRow]) -> str:
    lines = [
        "model,primary,shadow,pairs,agree_rate,agree_lo,agree_hi,primary_e2e_s,"
        "shadow_e2e_s,primary_tokens,shadow_tokens,primary_cost_usd,shadow_cost_usd"
    ]
    for r in rows:
        lo, hi = r.agree_ci or ("", "")
        cells = [
            r.model,
            r.primary,
            r.shadow,
            r.pairs,
            r.agree_rate,
            lo,
            hi,
            r.primary_e2e_s,
            r.shadow_e2e_s,
            r.primary_tokens,
            r.shadow_tokens,
            r.primary_cost_usd,
            r.shadow_cost_usd,
        ]
        lines.append(",".join("" if c is None else str(c) for c in cells))
    return "\n".join(lines) + "\n"


def _table(rows: list[ShadowRow], since: str) -> str:
    heads = (
        "model",
        "primary → shadow",
        "pairs",
        "agree %",
        "95% CI",
        "e2e s, mean (primary/shadow)",
        "tokens (primary/shadow)",
        "cost $ (primary/shadow)",
        "breakdown",
    )
    table_rows = []
    for r in rows:
        ci = "–" if r.agree_ci is None else f"{100 * r.agree_ci[0]:.0f}–{100 * r.agree_ci[1]:.0f}"
        e2e = "/".join(terminal.significant(v, 2, 2) for v in (r.primary_e2e_s, r.shadow_e2e_s))
        table_rows.append(
            (
                r.model,
                f"{r.primary} → {r.shadow}",
                str(r.pairs),
                "–" if r.agree_rate is None else f"{100 * r.agree_rate:.1f}",
                ci,
                e2e,
                f"{r.primary_tokens}/{r.shadow_tokens}",
                f"{terminal.usd(r.primary_cost_usd)}/{terminal.usd(r.shadow_cost_usd)}",
                ", ".join(f"{k} {v}" for k, v in sorted(r.agreements.items())),
            )
        )
    title = f"Shadow agreement, last {since}"
    left = ("model", "primary → shadow", "breakdown")
    return terminal.render(title, heads, table_rows, left=left, wide=200)
