"""`plumbline report cost` and `plumbline report health`, read from the store.

`report cost`: requests, tokens, cost per million tokens and API/node per model. One row per
(model, upstream) over a window read from the store: requests, tokens by kind, cost, $/M tokens,
the model's API/node ratio, truncation and error rates. An API upstream's $/M is what it cost
(the provider's charged cost where it reported one, the price table elsewhere) per million
tokens; a node upstream's is the node's measured cost per million tokens for that model (see
gateway/cost.py for the rule).

`report health`: per upstream, the share of its requests each watchdog check flagged (the same
flags the live watchdog counts, `gateway/watchdog.py`), and which checks are over their trip
threshold; the config's own findings are always tripped.

Both render as a rich table, CSV or JSON.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table

from gateway.config import Config, Upstream
from gateway.cost import MILLION, ModelEconomics, Usage, active_hour_cost, economics
from gateway.store import REQUESTS, Store
from gateway.trust_config import CHECKS, WatchdogConfig
from gateway.watchdog import config_findings, pinned_providers

Format = Literal["table", "csv", "json"]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_since(text: str) -> float:
    """'90s', '30m', '24h', '7d', '2w' -> seconds."""
    m = _SINCE.match(text.lower())
    if m is None:
        raise ValueError(f"--since {text!r}: expected a number and a unit (s, m, h, d, w)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds <= 0:
        raise ValueError(f"--since {text!r}: must be positive")
    return seconds


@dataclass(slots=True)
class CostRow:
    model: str
    upstream: str | None
    node: str | None
    requests: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cost_usd: float | None
    usd_per_m: float | None
    api_node_ratio: float | None
    truncation_rate: float
    error_rate: float
    estimated: int


def cost_rows(config: Config, usage: list[Usage], econ: dict[str, ModelEconomics]) -> list[CostRow]:
    node_of = {u.name: u.node for u in config.upstreams}
    rows = []
    for u in usage:
        node = node_of.get(u.upstream or "")
        model_econ = econ.get(u.model)
        if node:
            per_m = model_econ.node_usd_per_m_on(node) if model_econ else None
            cost = None if per_m is None else per_m * u.tokens / MILLION
        else:
            cost = u.cost_usd - u.charged_basis_usd + u.charged_cost_usd
            per_m = cost / u.tokens * MILLION if u.tokens else None
        rows.append(
            CostRow(
                model=u.model,
                upstream=u.upstream,
                node=node,
                requests=u.requests,
                prompt_tokens=u.prompt_tokens,
                cached_tokens=u.cached_tokens,
                completion_tokens=u.completion_tokens,
                reasoning_tokens=u.reasoning_tokens,
                cost_usd=cost,
                usd_per_m=per_m,
                api_node_ratio=model_econ.ratio if model_econ else None,
                truncation_rate=u.truncated / u.requests if u.requests else 0.0,
                error_rate=u.errors / u.requests if u.requests else 0.0,
                estimated=u.estimated,
            )
        )
    return rows


def window_economics(
    config: Config, store: Store, window_s: float, now: float | None = None
) -> tuple[list[Usage], dict[str, float], dict[str, ModelEconomics]]:
    """Usage, node busy hours and per-model economics over the last `window_s` seconds.

    The gateway can publish the result as gauges: `metrics.set_economics(econ)`.
    """
    now = time.time() if now is None else now
    usage = store.usage(now - window_s, now)
    hours = store.node_hours(config, now - window_s, now)
    return usage, hours, economics(config, usage, hours)


def span(since: str, now: float | None = None) -> tuple[float, float]:
    """The window `since` (e.g. "24h") up to `now` (default: the clock), as (start, end)."""
    end = time.time() if now is None else now
    return end - parse_since(since), end


@contextlib.contextmanager
def reading(config: Config, store: Store | None) -> Iterator[Store]:
    """`store`, or the config's own store, opened for one report and closed after it."""
    if store is not None:
        yield store
        return
    own = Store.from_config(config)
    try:
        yield own
    finally:
        own.close()


def report_cost(
    config: Config,
    since: str = "24h",
    fmt: Format = "table",
    *,
    store: Store | None = None,
    now: float | None = None,
) -> str:
    """The cost report over the last `since` (e.g. "24h") as a table, CSV or JSON."""
    start, now = span(since, now)
    window = now - start
    with reading(config, store) as db:
        usage, hours, econ = window_economics(config, db, window, now)
    rows = cost_rows(config, usage, econ)
    if fmt == "json":
        return json.dumps(_document(config, rows, econ, hours, window, now), indent=2)
    if fmt == "csv":
        return _csv(rows)
    if fmt == "table":
        return _table(rows, econ, hours, config, since)
    raise ValueError(f"unknown format {fmt!r}")


def _document(
    config: Config,
    rows: list[CostRow],
    econ: dict[str, ModelEconomics],
    hours: dict[str, float],
    window: float,
    now: float,
) -> dict[str, Any]:
    return {
        "since": now - window,
        "until": now,
        "rows": [asdict(r) for r in rows],
        "models": {
            name: {
                "node_usd_per_m": e.node_usd_per_m,
                "node_usd_per_m_input": e.node_usd_per_m_input,
                "node_usd_per_m_output": e.node_usd_per_m_output,
                "output_weight": e.output_weight,
                "api_usd_per_m": e.api_usd_per_m,
                "api_node_ratio": e.ratio,
            }
            for name, e in econ.items()
        },
        "nodes": {
            name: {
                "busy_hours": h,
                "cost_usd": h * active_hour_cost(config.nodes[name]),
                "basis": config.nodes[name].basis,
                "utilisation": config.nodes[name].utilisation,
            }
            for name, h in hours.items()
        },
    }


def _csv(rows: list[CostRow]) -> str:
    out = io.StringIO()
    fields = list(CostRow.__dataclass_fields__)
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in asdict(r).items()})
    return out.getvalue()


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _table(
    rows: list[CostRow],
    econ: dict[str, ModelEconomics],
    hours: dict[str, float],
    config: Config,
    since: str,
) -> str:
    table = Table(title=f"Cost, last {since}", title_justify="left")
    for name in (
        "model",
        "upstream",
        "requests",
        "prompt",
        "cached",
        "completion",
        "reasoning",
        "cost $",
        "$/M tok",
        "API÷node",
        "trunc %",
        "error %",
    ):
        table.add_column(name, justify="left" if name in ("model", "upstream") else "right")
    for r in rows:
        where = r.upstream or "–"
        table.add_row(
            r.model,
            f"{where} ({r.node})" if r.node else where,
            f"{r.requests:,}",
            f"{r.prompt_tokens:,}",
            f"{r.cached_tokens:,}",
            f"{r.completion_tokens:,}",
            f"{r.reasoning_tokens:,}",
            _num(r.cost_usd, ".4f"),
            _num(r.usd_per_m, ".4f"),
            _num(r.api_node_ratio, ".3g"),
            f"{100 * r.truncation_rate:.1f}",
            f"{100 * r.error_rate:.1f}",
        )
    console = Console(file=io.StringIO(), width=160, color_system=None, force_terminal=False)
    console.print(table)
    for name, e in econ.items():
        if e.node_tokens:
            console.print(
                f"{name}: node ${_num(e.node_usd_per_m_input, '.4f')}/M in, "
                f"${_num(e.node_usd_per_m_output, '.4f')}/M out "
                f"(output weighs {e.output_weight:.2f} input tokens), "
                f"API ${_num(e.api_usd_per_m, '.4f')}/M for the same tokens"
            )
    for name, h in hours.items():
        node = config.nodes[name]
        console.print(
            f"node {name}: {h:.2f} busy h × ${active_hour_cost(node):.2f}/active h "
            f"({node.basis}, {node.utilisation:.0%} utilisation)"
        )
    return console.file.getvalue()  # type: ignore[attr-defined]


@dataclass(slots=True)
class HealthRow:
    upstream: str
    requests: int
    completed: int
    rates: dict[str, float | None]
    samples: dict[str, int]
    capped_truncations: int  # truncations where the client had sent max_tokens
    tripped: list[str]


def _health_query(since: float, until: float) -> Any:
    t = REQUESTS
    one = sa.literal(1)

    def count_if(cond: Any) -> Any:
        return sa.func.sum(sa.case((cond, one), else_=0))

    ok = sa.and_(t.c.status == 200, t.c.error_class.is_(None), t.c.door != "embeddings")
    return (
        sa.select(
            t.c.upstream,
            sa.func.count(),
            count_if(ok),
            count_if(sa.and_(ok, t.c.truncated == sa.true())),
            count_if(sa.and_(ok, t.c.truncated == sa.true(), t.c.max_tokens.is_not(None))),
            count_if(sa.and_(ok, t.c.reasoning_leak == sa.true())),
            count_if(t.c.sampled == sa.true()),
            count_if(t.c.degenerate == sa.true()),
            count_if(sa.or_(t.c.tool_calls > 0, t.c.tool_call_error.is_not(None))),
            count_if(t.c.tool_call_error.is_not(None)),
            count_if(t.c.provider.is_not(None)),
            count_if(t.c.provider_mismatch == sa.true()),
            count_if(t.c.charged_cost_usd.is_not(None)),
            count_if(t.c.cost_drift == sa.true()),
        )
        .where(t.c.time >= since, t.c.time < until, t.c.upstream.is_not(None))
        .group_by(t.c.upstream)
        .order_by(t.c.upstream)
    )


def health_rows(
    config: Config, raw: Iterable[Sequence[Any]], cfg: WatchdogConfig
) -> list[HealthRow]:
    findings = config_findings(config)
    rows = []
    for r in raw:
        name = r[0]
        try:
            upstream: Upstream | None = config.upstream(name)
        except KeyError:
            upstream = None
        v = [int(x or 0) for x in r[1:]]
        total, ok, trunc, capped, leak, sampled, degen, tooled, bad, provs, mism, charged, drift = v
        pinned = upstream is not None and bool(pinned_providers(upstream))
        parser = upstream is None or upstream.reasoning == "parser"
        pairs = {
            "truncation": (trunc, ok),
            "reasoning_leak": (leak, ok if parser else 0),
            "degenerate": (degen, sampled),
            "tool_call": (bad, tooled),
            "provider_mismatch": (mism, provs if pinned else 0),
            "cost_drift": (drift, charged),
        }
        rates = {c: (k / n if n else None) for c, (k, n) in pairs.items()}
        tripped = [
            c
            for c, (k, n) in pairs.items()
            if n >= cfg.threshold(c).min_samples and k / n >= cfg.threshold(c).rate
        ]
        tripped += [f.check for f in findings if f.upstream == name]
        rows.append(
            HealthRow(
                name, total, ok, rates, {c: n for c, (_, n) in pairs.items()}, capped, tripped
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
    """Per upstream: the watchdog rates over the window and the checks past their thresholds."""
    start, now = span(since, now)
    cfg = cfg if cfg is not None else getattr(config, "watchdog", WatchdogConfig())
    with reading(config, store) as db, db.engine.connect() as conn:
        raw = list(conn.execute(_health_query(start, now)))
    rows = health_rows(config, raw, cfg or WatchdogConfig())
    findings = [asdict(f) for f in config_findings(config)]
    if fmt == "json":
        return json.dumps(
            {
                "since": start,
                "until": now,
                "rows": [asdict(r) for r in rows],
                "findings": findings,
            },
            indent=2,
        )
    if fmt == "csv":
        head = [
            "upstream",
            "requests",
            "completed",
            *(f"{c}_rate" for c in CHECKS),
            "capped_truncations",
            "tripped",
        ]
        lines = [",".join(head)]
        for r in rows:
            rates = ["" if r.rates[c] is None else f"{r.rates[c]:.6f}" for c in CHECKS]
            lines.append(
                ",".join(
                    [
                        r.upstream,
                        str(r.requests),
                        str(r.completed),
                        *rates,
                        str(r.capped_truncations),
                        ";".join(r.tripped),
                    ]
                )
            )
        return "\n".join(lines) + "\n"
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}")
    table = Table(title=f"Upstream health, last {since}", title_justify="left")
    for name in ("upstream", "requests", *(f"{c} %" for c in CHECKS), "tripped"):
        table.add_column(name, justify="left" if name in ("upstream", "tripped") else "right")
    for r in rows:
        cells = [
            "–" if (rate := r.rates[c]) is None else f"{100 * rate:.1f} (n={r.samples[c]})"
            for c in CHECKS
        ]
        table.add_row(r.upstream, f"{r.requests:,}", *cells, ", ".join(r.tripped) or "–")
    console = Console(file=io.StringIO(), width=200, color_system=None, force_terminal=False)
    console.print(table)
    for f in findings:
        console.print(f"{f['check']} on {f['upstream']}: {f['detail']}")
    return console.file.getvalue()  # type: ignore[attr-defined]
