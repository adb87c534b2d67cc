"""The tracing seam: OpenTelemetry traces of the requests, or nothing at all.

With `[telemetry] endpoint` unset (the default) `tracing(...)` returns None, the records carry no
trace, and nothing of OpenTelemetry is imported: the hot path pays one `is None` test per
request and per attempt. Set, it returns a `Tracing` (gateway/otel.py, the only module that
imports the SDK): one trace per request, its root span begun at the front door (continuing the
client's W3C `traceparent` when it sent one) and ended when the record is finished, a child
span per upstream attempt (retries and fallbacks alike), the attempt's `traceparent` sent to the
upstream, GenAI semantic-convention attributes, exported over OTLP/HTTP in batches.

Low in the import order (beside gateway/errors.py): the edge and serving call it, it imports
nothing of the gateway. Records are read by duck typing (gateway/ledger/record.py's fields).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Protocol

EXTRA = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")


class Trace(Protocol):
    """One request's trace: its root span, and the attempt under way."""

    trace_id: str  # 32 lowercase hex digits, on the record beside its request id

    def attempt(self, upstream: str, kind: str, model: str) -> None:
        """An attempt on `upstream` begins (a child span)."""

    def header(self) -> bytes:
        """The `traceparent` request header line for the attempt under way (CRLF-ended)."""

    def attempt_end(self, outcome: str, status: int | None) -> None:
        """The attempt under way ended so (the record's `Attempt.outcome`)."""

    def end(self, record: Any) -> None:
        """The request ended: the root span takes the record's usage and outcome, and ends."""


class Tracing(Protocol):
    def begin(self, traceparent: str | None, door: str, model: str, stream: bool) -> Trace:
        """A request's trace, under the client's `traceparent` when it sent a valid one."""

    def close(self) -> None:
        """Send what is left and stop (blocking: the gateway calls it in a thread)."""


def missing() -> list[str]:
    """The modules of the `telemetry` extra that this install lacks (none imported)."""
    absent = []
    for name in EXTRA:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            absent.append(name)
    return absent


def tracing(
    endpoint: str | None,
    *,
    service_name: str = "plumbline",
    headers: dict[str, str] | None = None,
    export_delay_s: float = 5.0,
    export_timeout_s: float = 10.0,
    max_queue: int = 2048,
    sample_ratio: float = 1.0,
) -> Tracing | None:
    """None without an endpoint (nothing imported); else the SDK's tracing, exporting there.
    Raises RuntimeError naming the extra when the SDK is not installed."""
    if endpoint is None:
        return None
    absent = missing()
    if absent:
        raise RuntimeError(
            f"[telemetry] endpoint is set but OpenTelemetry is not installed (no "
            f"{', '.join(absent)}): install plumbline[telemetry], e.g. "
            "pip install 'plumbline[telemetry]'"
        )
    from gateway.otel import OtelTracing

    return OtelTracing(
        endpoint,
        service_name=service_name,
        headers=headers or {},
        export_delay_s=export_delay_s,
        export_timeout_s=export_timeout_s,
        max_queue=max_queue,
        sample_ratio=sample_ratio,
    )
