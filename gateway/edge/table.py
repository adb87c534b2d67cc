"""The edge's request table: every route the gateway serves, in one place.

Each row (`gateway.edge.route.Route`) is a method, a path, a handler and the request's and
answer's models. The app is built from it once (`GatewayApp.serve_table`): the router holds
every row (it serves them, answers a wrong method with 405, and the OpenAPI schema at
`/openapi.json` is generated from it), the edge takes the `POST` of every generation row before
Starlette's stack, and the access guard budgets exactly those paths.

    POST   /v1/chat/completions, /v1/completions, /v1/embeddings   the OpenAI door (generation)
    GET    /v1/models, /v1/models/{model}                          its model list
    POST   /v1/responses                                           the Responses door (generation)
    POST   /v1/messages                                            the Messages door (generation)
    POST   /v1/messages/count_tokens, GET|HEAD /api/hello          the Messages door's others
    GET    /health, /metrics                                       the gateway's status
    *      /admin/...                                              admin keys only
    GET    /console, /console/...                                  the web console
"""

from __future__ import annotations

from gateway.edge import admin, status
from gateway.edge.console import api as console
from gateway.edge.doors import router as doors
from gateway.edge.route import Route

TABLE: tuple[Route, ...] = (*doors.ROUTES, *status.ROUTES, *admin.ROUTES, *console.ROUTES)
