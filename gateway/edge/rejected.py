"""Refusals are requests too: each one the gateway answers before a record exists is counted.

The access guard's refusals (a bad key, a key over budget, a head or body too large) and the
edge's (an unknown model, a body that is not JSON, a parameter the door refuses) call `refuse`
with the error they answer: it becomes a `Rejection` (gateway/ledger/rejection.py) under the
same request id the answer carries, with the key's id (never the key) and the model as asked,
handed to the gateway (`Gateway.reject`: the metric and the store). A request that already has
a record (`RECORDED` in its scope) is counted by its record instead.
"""

from __future__ import annotations

import logging

from starlette.types import Scope

from gateway.edge.access import CURRENT_TICKET
from gateway.edge.request import ASKED, RECORDED
from gateway.edge.request_id import client_id, ids_of
from gateway.errors import (
    BadRequest,
    BodyTooLarge,
    Forbidden,
    GatewayError,
    GatewayShutdown,
    HeadersTooLarge,
    ModelNotFound,
    RateLimited,
    Unauthorized,
    UpstreamUnavailable,
)
from gateway.ledger.rejection import Rejection, door_of

log = logging.getLogger("plumbline")

_BY_TYPE: tuple[tuple[type[GatewayError], str], ...] = (
    (ModelNotFound, "unknown_model"),
    (BodyTooLarge, "too_large"),
    (HeadersTooLarge, "too_large"),
    (Unauthorized, "unauthorized"),
    (Forbidden, "forbidden"),
    (RateLimited, "over_budget"),
    (UpstreamUnavailable, "unavailable"),
    (GatewayShutdown, "unavailable"),
)
_NOT_JSON = (
    "The request body is empty",
    "The request body is not valid JSON",
    "The request body is nested",
)


def reason_of(error: GatewayError) -> str:
    for kind, reason in _BY_TYPE:
        if isinstance(error, kind):
            return reason
    if isinstance(error, BadRequest):
        return "bad_json" if error.message.startswith(_NOT_JSON) else "bad_request"
    return "other"


def refuse(scope: Scope, error: GatewayError, key_id: str | None = None) -> None:
    """Count `error`'s answer to a generation-API request that has no record. Never raises."""
    path: str = scope.get("path", "")
    if scope.get(RECORDED) or not (path.startswith("/v1/") or path == "/v1"):
        return
    try:
        app = scope.get("app")
        gw = getattr(getattr(app, "state", None), "gateway", None)
        if gw is None:
            return
        if key_id is None:
            ticket = CURRENT_TICKET.get(None)
            key_id = ticket.key.id if ticket is not None else None
        lane = "eval" if (b"x-plumbline-lane", b"eval") in scope.get("headers", ()) else "client"
        gw.reject(
            Rejection(
                request_id=ids_of(scope)[0],
                client_request_id=client_id(scope),
                door=door_of(path),
                reason=reason_of(error),
                status=error.status,
                key_id=key_id,
                model=scope.get(ASKED),
                lane=lane,
            )
        )
    except Exception:  # counting must never fail the answer
        log.exception("could not count a refused request")
