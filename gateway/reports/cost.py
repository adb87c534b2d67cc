"""`plumbline report cost`, read from the store (`report health`:
`gateway/reports/health.py`).

`report cost`: requests, tokens, cost per million tokens and API/node per model. One row per
(model, upstream) over a window read from the store: requests, tokens by kind, cost, $/M tokens,
the model's API/node ratio, truncation rates (cut by the upstream, and stopped at the client's
own cap: `gateway/ledger/truncation.py`) and error rate. An API upstream's $/M is what it cost
(the provider's charged cost where it reported one, the price table elsewhere) per million
tokens; a node upstream's is the node's measured cost per million tokens for that model (see
gateway/ledger/cost.py for the rule).

Renders as a rich table, CSV or JSON (`Format`, gateway/ledger/window.py).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass
from typing import Any

from gateway.config import Config
from gateway.ledger import terminal
from gateway.ledger.cost import MILLION, ModelEconomics, Usage, active_hour_cost
from gateway.ledger.store import Store
from gateway.ledger.window import Format, reading, span, window_economics


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
    upstream_cut_rate: float  # truncated by the upstream: short of the request's cap, or no cap
    client_capped_rate: float  # stopped at the request's own max_tokens: what it asked for
    error_rate: float
    estimated: int
    lane: str = "client"
    errors: int = 0
    # node | api | no upstream (none answered: every request failed before one did) | failed
    # (every request it answered was an error): not labelled a node or an API's cost then.
    kind: str = "api"


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
                upstream_cut_rate=_share(u.truncated - u.client_capped, u.requests),
                client_capped_rate=_share(u.client_capped, u.requests),
                error_rate=_share(u.errors, u.requests),
                estimated=u.estimated,
                lane=u.lane,
                errors=u.errors,
                kind=_kind(u, node),
            )
        )
    return rows


def _kind(u: Usage, node: str | None) -> str:
    if u.upstream is None:
        return "no upstream"
    if u.requests and u.errors == u.requests:
        return "failed"
    return "node" if node else "api"


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def report_cost(
    config: Config,
    since: str = "24h",
    fmt: Format = "table",
    *,
    store: Store | None = None,
    now: float | None = None,
    lane: str = "client",
) -> str:
    """The cost report over the last `since` (e.g. "24h") as a table, CSV or JSON: the rows of
    `lane` (client traffic by default; "all": every lane, each its own rows)."""
    start, now = span(since, now)
    window = now - start
    with reading(config, store) as db:
        usage, hours, econ = window_economics(config, db, window, now)
    rows = [r for r in cost_rows(config, usage, econ) if lane in ("all", r.lane)]
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


def _table(
    rows: list[CostRow],
    econ: dict[str, ModelEconomics],
    hours: dict[str, float],
    config: Config,
    since: str,
) -> str:
    lanes = any(r.lane != "client" for r in rows)  # more than the client's: say whose
    heads = (
        "model",
        *(("lane",) if lanes else ()),
        "upstream",
        "requests",
        "prompt tokens",
        "cached tokens",
        "completion tokens",
        "reasoning tokens",
        "cost $",
        "$/M tokens (in+out)",
        "API vs node",
        "upstream cut %",
        "client cap %",
        "error %",
    )
    cells = []
    for r in rows:
        where = r.upstream or "– (no upstream)"
        where = f"{where} ({r.node})" if r.kind == "node" else where
        where = f"{where} [failed]" if r.kind == "failed" else where
        cells.append(
            (
                r.model,
                *((r.lane,) if lanes else ()),
                where,
                f"{r.requests:,}",
                f"{r.prompt_tokens:,}",
                f"{r.cached_tokens:,}",
                f"{r.completion_tokens:,}",
                f"{r.reasoning_tokens:,}",
                terminal.usd(r.cost_usd),
                terminal.usd(r.usd_per_m),
                terminal.cheaper(r.api_node_ratio),
                f"{100 * r.upstream_cut_rate:.1f}",
                f"{100 * r.client_capped_rate:.1f}",
                f"{100 * r.error_rate:.1f}",
            )
        )
    lines = _notes(econ, hours, config)
    left = ("model", "lane", "upstream", "API vs node")
    return terminal.render(f"Cost, last {since}", heads, cells, lines, left=left, wide=220)


def _notes(econ: dict[str, ModelEconomics], hours: dict[str, float], config: Config) -> list[str]:
    """The lines under the cost table: each model's node against API, each node's busy hours."""
    lines: list[str] = []
    for name, e in econ.items():
        if e.node_tokens:
            lines.append(
                f"{name}: node ${terminal.usd(e.node_usd_per_m_input)}/M input tokens, "
                f"${terminal.usd(e.node_usd_per_m_output)}/M output tokens "
                f"(output weighs {e.output_weight:.2f} input tokens); "
                f"API ${terminal.usd(e.api_usd_per_m)}/M tokens (in+out) for the same tokens: "
                f"{terminal.cheaper(e.ratio)}"
            )
    for name, h in hours.items():
        node = config.nodes[name]
        lines.append(
            f"node {name}: {terminal.hours(h)} busy h × ${active_hour_cost(node):.2f}/active h "
            f"({node.basis}, {node.utilisation:.0%} utilisation)"
        )
    return lines
