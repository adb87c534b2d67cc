"""Config of `[telemetry]`: OpenTelemetry traces of the requests, exported over OTLP/HTTP
(gateway/telemetry.py, docs/telemetry.md). Same rules as gateway/config/__init__.py (frozen,
unknown keys are errors)."""

from __future__ import annotations

from pydantic import Field

from gateway.config.frozen import Frozen


class TelemetryConfig(Frozen):
    """OpenTelemetry traces: one per request, a child span per upstream attempt, GenAI semantic
    conventions, sent over OTLP/HTTP. Off (and nothing of OpenTelemetry loaded) without an
    endpoint; on, it needs the `telemetry` extra (`pip install 'plumbline[telemetry]'`)."""

    # The collector's OTLP/HTTP traces URL (http://127.0.0.1:4318/v1/traces); none: tracing off.
    endpoint: str | None = Field(None, pattern=r"^https?://")
    # The `service.name` of the traces' resource.
    service_name: str = "plumbline"
    # Extra headers on each export (a collector's auth, say); values as written here.
    headers: dict[str, str] = Field(default_factory=dict)
    # Seconds between two batches sent to the collector (spans wait in memory till then).
    export_delay_s: float = Field(5.0, gt=0, le=300)
    # Seconds one export may take before it is given up (its spans are dropped).
    export_timeout_s: float = Field(10.0, gt=0, le=300)
    # Share of the traces the gateway starts that are kept and sent (0 to 1); a client's
    # `traceparent` decides for its own (its sampled flag). Unsent traces still reach the
    # upstream and the record by id, and cost a fraction of a sent one.
    sample_ratio: float = Field(1.0, ge=0, le=1)
    # Spans held for export at most; past it new ones are dropped, never the request.
    max_queue: int = Field(2048, ge=1)
