"""The request id on every log line written while a request is served.

The access guard, the one way into the edge, sets `REQUEST_ID` to the gateway's id of each HTTP
request (`gateway.edge.request_id`: the id its answer says as `x-plumbline-request-id`, the
record keeps and the trace carries as `plumbline.request_id`). `stamp_records` makes every log
record carry it as the attribute `request_id` ("-" outside a request), whatever logger wrote it,
so a handler's format may name it; `install` gives a process that configured no logging one
stderr handler whose lines do.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

REQUEST_ID: ContextVar[str] = ContextVar("plumbline_request_id", default="-")
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


def stamp_records() -> None:
    """Make every log record carry `request_id` (once per process: the factory is wrapped
    once)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "stamps_request_id", False):
        return

    def stamped(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        record.request_id = REQUEST_ID.get()
        return record

    stamped.stamps_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(stamped)


def install(level: int = logging.INFO) -> None:
    """Stamp records, and where the process set up no logging of its own, write the gateway's
    records (`gateway.*`, `plumbline`) to stderr with their request ids."""
    stamp_records()
    if logging.getLogger().handlers:
        return  # the process's own configuration stands (a host application, pytest)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    for name in ("gateway", "plumbline"):
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = False
