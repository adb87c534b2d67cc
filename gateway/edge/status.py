"""The gateway's own status: `/health` (every upstream's live state, the watchdog's, the gate's,
the ledger's backlog, the scheduled rounds, the event loop's load) and `/metrics`
(Prometheus). The console's upstreams panel reads the same document (`health_of`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.edge.route import Route
from gateway.ledger.backlog import health as ledger_health

if TYPE_CHECKING:
    from gateway.edge.gateway import Gateway

JSON = "application/json"


async def health(request: Request) -> Response:
    return Response(orjson.dumps(health_of(request.app.state.gateway)), media_type=JSON)


def health_of(gw: Gateway) -> dict[str, Any]:
    """`/health`'s document: every upstream's live state, the watchdog's, the gate's."""
    errors = gw.upstream_errors.snapshot()
    upstreams = {
        name: {
            # failing | degraded | ok | no traffic, from its failed calls of the last 15
            # minutes (gateway/ledger/upstream_state.py), with the figures behind it.
            **errors.get(name, {}),
            "healthy": st.healthy,
            "inflight": st.inflight,
            "cooling": st.cooling_until > 0,
            "demoted": st.demoted,
            # Which gateways' watchdogs demote it: this one, and others on the same store.
            "demoted_by": gw.demotions.by(name),
            "engine": gw.engines.known.get(name),
            # The engine process `plumbline up` supervises: state, restarts, last exit status.
            "process": gw.engine_view(name),
        }
        for name, st in gw.pool.states.items()
    }
    return {
        "status": "ok",
        "upstreams": upstreams,
        "watchdog": gw.watchdog.snapshot(),
        "gate": gw.gate_book.view(),
        # The records not in the store yet: spooled, quarantined (gateway/ledger/backlog.py).
        "ledger": ledger_health(gw.queue),
        # Scheduled rounds: this gateway's last ones, how each ended, what the tripwire found.
        "evals": gw.scheduler.status(),
        # This process's event loop over the last minute: near 1 busy, run more workers.
        "event_loop": gw.loop_watch.snapshot(),
    }


async def metrics(request: Request) -> Response:
    body, content_type = request.app.state.gateway.metrics.render()
    return Response(body, media_type=content_type)


ROUTES = (
    Route("GET", "/health", health),
    Route("GET", "/metrics", metrics),
)
