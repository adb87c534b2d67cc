"""OpenTelemetry traces (gateway/telemetry.py, gateway/otel.py), exported to a real OTLP/HTTP
receiver in this process (POST /v1/traces, protobuf, decoded with opentelemetry-proto): one
trace per request under the client's `traceparent`, a child span per upstream attempt (a retry
and a fallback each their own, named by upstream and outcome), GenAI attributes, the trace id on
the record, and the upstream's request carrying a `traceparent` of the client's trace. Streamed
and whole answers. Off (the default), importing and serving never loads OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from gateway import telemetry
from plumbline_kit.fakes.upstream import FakeHandle
from tests.harness import ListSink, config_from, serving, wait_for

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01"
HI = [{"role": "user", "content": "hi"}]


class Receiver:
    """An OTLP/HTTP traces endpoint: every span it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = self.path == "/v1/traces"
                if ok:
                    assert self.headers["Content-Type"] == "application/x-protobuf"
                    export = ExportTraceServiceRequest.FromString(body)
                    with receiver.lock:
                        for resource in export.resource_spans:
                            for scope in resource.scope_spans:
                                receiver.spans.extend(scope.spans)
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def trace(self, trace_id: str, spans: int, timeout: float = 15.0) -> list[Span]:
        """The spans of `trace_id` once `spans` of them have come (or what came by then)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                got = [s for s in self.spans if s.trace_id.hex() == trace_id]
            if len(got) >= spans or time.monotonic() > deadline:
                return got
            time.sleep(0.05)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def attrs(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [v.string_value for v in value.array_value.values]
        else:
            out[kv.key] = getattr(value, kind)
    return out


def traced(fake: FakeHandle, down: FakeHandle, receiver: Receiver, ratio: float = 1.0) -> Any:
    return config_from(
        {
            "server": {"health_interval_s": 0, "retry_backoff_s": 0, "retries": 1},
            "upstreams": [
                {"name": "down", "kind": "vllm", "base_url": down.base_url, "model": "m-down"},
                {"name": "a", "kind": "openai", "base_url": fake.base_url, "model": "m-a"},
            ],
            "models": {
                "smol": {"upstreams": ["a"]},
                "fallback": {"upstreams": ["down"], "fallback": ["a"]},
            },
            "telemetry": {
                "endpoint": receiver.url,
                "export_delay_s": 0.05,
                "sample_ratio": ratio,
            },
        }
    )


def split(spans: list[Span]) -> tuple[Span, list[Span]]:
    roots = [s for s in spans if s.kind == Span.SPAN_KIND_SERVER]
    assert len(roots) == 1, spans
    attempts = sorted(
        (s for s in spans if s.kind == Span.SPAN_KIND_CLIENT), key=lambda s: s.start_time_unix_nano
    )
    assert all(s.parent_span_id == roots[0].span_id for s in attempts)
    return roots[0], attempts


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_retry_is_a_child_span_and_the_upstream_continues_the_clients_trace(
    fake: FakeHandle, fake2: FakeHandle, receiver: Receiver, stream: bool
) -> None:
    fake.script({"status": 503})  # the first attempt fails, the retry serves
    sink = ListSink()
    with serving(traced(fake, fake2, receiver), sinks=[sink]) as (url, _app):
        client = openai.OpenAI(
            base_url=url, api_key="x", default_headers={"traceparent": TRACEPARENT}
        )
        if stream:
            chunks = client.chat.completions.create(
                model="smol", messages=HI, stream=True, stream_options={"include_usage": True}
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            answer = client.chat.completions.create(model="smol", messages=HI, max_tokens=8)
            text = answer.choices[0].message.content or ""
        assert text
        spans = receiver.trace(CLIENT_TRACE, 3)
    root, attempts = split(spans)
    assert root.parent_span_id.hex() == CLIENT_PARENT
    assert root.name == "chat smol"
    a = attrs(root)
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "smol"
    assert a["gen_ai.response.model"] == "m-a"
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] in (["stop"], ["length"])
    assert a["plumbline.stream"] is stream
    assert a["plumbline.upstream"] == "a"
    assert [
        (attrs(s)["plumbline.upstream"], attrs(s)["plumbline.attempt.outcome"]) for s in attempts
    ] == [
        ("a", "http_503"),
        ("a", "ok"),
    ]
    assert attrs(attempts[0])["http.response.status_code"] == 503
    assert attempts[0].status.code == attempts[0].status.STATUS_CODE_ERROR
    assert attrs(attempts[1])["gen_ai.provider.name"] == "openai"
    # Each attempt's request carried its own span as the parent, in the client's trace.
    sent = [
        r["headers"].get("traceparent") or r["headers"].get("Traceparent") for r in fake.requests()
    ]
    assert sent == [f"00-{CLIENT_TRACE}-{s.span_id.hex()}-01" for s in attempts]
    (record,) = sink.records
    assert record.trace_id == CLIENT_TRACE
    assert record.trace is None  # ended with the record


def test_a_fallback_is_a_span_named_by_its_upstream(
    fake: FakeHandle, fake2: FakeHandle, receiver: Receiver
) -> None:
    fake2.set_default(status=500)
    sink = ListSink()
    with serving(traced(fake, fake2, receiver), sinks=[sink]) as (url, _app):
        client = openai.OpenAI(base_url=url, api_key="x")  # no traceparent: a new trace
        client.completions.create(model="fallback", prompt="hi", max_tokens=4)
        (record,) = sink.records
        assert record.trace_id is not None and len(record.trace_id) == 32
        spans = receiver.trace(record.trace_id, 4)
    root, attempts = split(spans)
    assert not root.parent_span_id
    assert attrs(root)["gen_ai.operation.name"] == "text_completion"
    assert [
        (attrs(s)["plumbline.upstream"], attrs(s)["plumbline.attempt.outcome"]) for s in attempts
    ] == [
        ("down", "http_500"),
        ("down", "http_500"),
        ("a", "ok"),
    ]
    assert attrs(attempts[0])["gen_ai.provider.name"] == "vllm"
    assert attrs(attempts[0])["gen_ai.request.model"] == "m-down"
    (sent,) = fake.requests()
    assert sent["headers"]["traceparent"].split("-")[1] == record.trace_id


def test_requests_are_each_their_own_trace_and_the_store_keeps_its_id(
    fake: FakeHandle, fake2: FakeHandle, receiver: Receiver
) -> None:
    sink = ListSink()
    config = traced(fake, fake2, receiver)
    config = config.model_copy(
        update={"store": config.store.model_copy(update={"url": "sqlite:///var/records.db"})}
    )
    with serving(config, sinks=[sink], record=True) as (url, app):
        client = openai.OpenAI(base_url=url, api_key="x")
        for _ in range(3):
            client.chat.completions.create(model="smol", messages=HI, max_tokens=4)
        store = app.state.gateway.store
        wait_for(lambda: store.count() == 3, timeout=30)
        stored = {r.request_id: store.get(r.request_id) for r in sink.records}
    ids = {r.trace_id for r in sink.records}
    assert len(ids) == 3
    for r in sink.records:
        assert stored[r.request_id]["trace_id"] == r.trace_id  # beside its request id
    for trace_id in ids:
        _root, attempts = split(receiver.trace(str(trace_id), 2))
        assert len(attempts) == 1


def test_off_by_default_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys\n"
        "from gateway.edge.app import Gateway, create_app\n"
        "from gateway.config import parse_config\n"
        "config = parse_config({})\n"
        "create_app(config)\n"
        "assert Gateway(config).tracing is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_an_endpoint_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert telemetry.tracing(None) is None
    monkeypatch.setattr(telemetry, "missing", lambda: ["opentelemetry.sdk"])
    with pytest.raises(RuntimeError, match=r"install plumbline\[telemetry\]"):
        telemetry.tracing("http://127.0.0.1:4318/v1/traces")


def test_an_unsampled_trace_still_reaches_the_upstream_and_the_record(
    fake: FakeHandle, fake2: FakeHandle, receiver: Receiver
) -> None:
    """`sample_ratio = 0`: the gateway's own traces are not sent, yet each has its id on the
    record and in the upstream's `traceparent` (not sampled); a client's sampled trace is."""
    sink = ListSink()
    with serving(traced(fake, fake2, receiver, ratio=0.0), sinks=[sink]) as (url, _app):
        openai.OpenAI(base_url=url, api_key="x").chat.completions.create(
            model="smol", messages=HI, max_tokens=4
        )
        openai.OpenAI(
            base_url=url, api_key="x", default_headers={"traceparent": TRACEPARENT}
        ).chat.completions.create(model="smol", messages=HI, max_tokens=4)
        assert len(receiver.trace(CLIENT_TRACE, 2)) == 2  # the client's sampled one is sent
    own, _client = sink.records
    assert own.trace_id is not None and own.trace_id != CLIENT_TRACE
    assert receiver.trace(own.trace_id, 1, timeout=0.5) == []
    first = fake.requests()[0]["headers"]["traceparent"]
    assert first.startswith(f"00-{own.trace_id}-")
    assert int(first.rsplit("-", 1)[1], 16) & 1 == 0  # the sampled flag is off
