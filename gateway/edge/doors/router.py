"""Every front door's rows of the edge's request table (`gateway/edge/table.py`), in order."""

from __future__ import annotations

from gateway.edge.doors.messages import routes as messages
from gateway.edge.doors.openai import routes as openai
from gateway.edge.doors.responses import routes as responses
from gateway.edge.route import Route

ROUTES: tuple[Route, ...] = (*openai.ROUTES, *responses.ROUTES, *messages.ROUTES)
