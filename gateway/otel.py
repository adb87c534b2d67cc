"""OpenTelemetry's SDK behind the tracing seam (gateway/telemetry.py): imported only when
`[telemetry] endpoint` is set. Spans follow the GenAI semantic conventions (`gen_ai.*`); the
export is the SDK's batch processor and OTLP/HTTP exporter (protobuf), off the request's path.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    Span,
    SpanKind,
    Status,
    StatusCode,
    format_span_id,
    format_trace_id,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
# The front door -> `gen_ai.operation.name` (the GenAI conventions' well-known values).
OPERATIONS = {
    "chat": "chat",
    "responses": "chat",
    "messages": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
}
# An upstream's `kind` -> `gen_ai.provider.name` (an OpenAI-compatible API is "openai").
_PROVIDERS = {"openai": "openai", "vllm": "vllm", "llamacpp": "llama.cpp"}


class OtelTrace:
    """One request's spans: the root (SERVER) and the attempt under way (CLIENT)."""

    __slots__ = ("trace_id", "_tracer", "_root", "_operation", "_model", "_attempt", "_served")

    def __init__(self, tracer: Any, root: Span, operation: str, model: str):
        self._tracer = tracer
        self._root = root
        self._operation = operation
        self._model = model
        self._attempt: Span | None = None
        self._served: str | None = None  # the model name the last successful attempt asked
        self.trace_id = format_trace_id(root.get_span_context().trace_id)

    def attempt(self, upstream: str, kind: str, model: str) -> None:
        if self._attempt is not None:  # an attempt that never said how it ended
            self._attempt.end()
        provider = _PROVIDERS.get(kind, kind)
        self._attempt = self._tracer.start_span(
            f"{self._operation} {self._model}",
            context=set_span_in_context(self._root),
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": self._operation,
                "gen_ai.request.model": model,
                "gen_ai.provider.name": provider,
                "gen_ai.system": provider,
                "plumbline.upstream": upstream,
            },
        )
        self._served = model

    def header(self) -> bytes:
        span = self._attempt if self._attempt is not None else self._root
        ctx = span.get_span_context()
        return b"traceparent: 00-%s-%s-%02x\r\n" % (
            format_trace_id(ctx.trace_id).encode(),
            format_span_id(ctx.span_id).encode(),
            int(ctx.trace_flags),
        )

    def attempt_end(self, outcome: str, status: int | None) -> None:
        span = self._attempt
        if span is None:
            return
        self._attempt = None
        span.set_attribute("plumbline.attempt.outcome", outcome)
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if outcome != "ok":
            span.set_attribute("error.type", outcome)
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    def end(self, record: Any) -> None:
        if self._attempt is not None:
            self.attempt_end("cancelled", None)
        root = self._root
        root.set_attributes(_usage(record))
        if record.upstream is not None and self._served is not None:
            root.set_attribute("gen_ai.response.model", self._served)
        if record.status >= 400 or record.error_class:
            kind = record.error_class or f"http_{record.status}"
            root.set_attribute("error.type", kind)
            root.set_status(Status(StatusCode.ERROR, kind))
        root.end()


def _usage(record: Any) -> dict[str, Any]:
    """The record's side of the root span: usage, finish reason, where it was served."""
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": record.prompt_tokens,
        "gen_ai.usage.output_tokens": record.completion_tokens,
        "gen_ai.response.id": record.request_id,
        "http.response.status_code": record.status,
        "plumbline.request_id": record.request_id,
        "plumbline.lane": record.lane,
        "plumbline.attempts": len(record.attempts),
    }
    if record.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = (record.finish_reason,)
    if record.cached_tokens:
        attributes["gen_ai.usage.cache_read.input_tokens"] = record.cached_tokens
    if record.reasoning_tokens:
        attributes["gen_ai.usage.reasoning.output_tokens"] = record.reasoning_tokens
    if record.upstream:
        attributes["plumbline.upstream"] = record.upstream
    if record.provider:
        attributes["gen_ai.provider.name"] = record.provider
        attributes["gen_ai.system"] = record.provider
    if record.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = record.max_tokens
    if record.ttft_s is not None and record.stream:
        attributes["plumbline.ttft_s"] = record.ttft_s
    if record.cost_usd is not None:
        attributes["plumbline.cost_usd"] = record.cost_usd
    return attributes


class OtelTracing:
    """The SDK's tracer provider, its batch processor and OTLP/HTTP exporter."""

    def __init__(
        self,
        endpoint: str,
        *,
        service_name: str,
        headers: dict[str, str],
        export_delay_s: float,
        export_timeout_s: float,
        max_queue: int,
        sample_ratio: float = 1.0,
    ):
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service_name}),
            sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
        )
        exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=export_timeout_s)
        self.provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                max_queue_size=max_queue,
                schedule_delay_millis=export_delay_s * 1000,
                max_export_batch_size=min(512, max_queue),
                export_timeout_millis=export_timeout_s * 1000,
            )
        )
        self.tracer = self.provider.get_tracer("plumbline")

    def begin(self, traceparent: str | None, door: str, model: str, stream: bool) -> OtelTrace:
        parent: Context | None = (
            _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None
        )
        operation = OPERATIONS.get(door, door)
        root = self.tracer.start_span(
            f"{operation} {model}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "gen_ai.operation.name": operation,
                "gen_ai.request.model": model,
                "plumbline.door": door,
                "plumbline.stream": stream,
            },
        )
        return OtelTrace(self.tracer, root, operation, model)

    def close(self) -> None:
        self.provider.shutdown()
