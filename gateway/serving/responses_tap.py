"""The tap for a Responses API answer passed through from an upstream that speaks it natively.

When an upstream implements `POST /v1/responses` (vLLM does; `responses_api = true` on the
upstream), a `/v1/responses` request is relayed as is instead of being translated to chat
completions. The bytes go to the client unchanged but for the `response` object's `model`, which
names the route the client asked for (`record.model`), not the upstream's id; this tap reads
them for the record:

    response.output_text.delta           an answer token (time to first token / first answer)
    response.reasoning_text.delta        a reasoning token (time to first token)
    response.function_call_arguments.*   a tool call
    response.completed / .incomplete     usage (input, cached, output, reasoning) and status;
                                         `incomplete` for max_output_tokens is a truncation
    response.failed / error              the upstream failed mid-stream (relayed as sent)

The record's `finish_reason` uses the chat names (stop, length, tool_calls) so every door's rows
read the same.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.errors import GatewayError, MalformedStream, UpstreamCut
from gateway.ledger.percentile import percentile
from gateway.ledger.record import Record
from gateway.serving.hooks import AnswerSink
from gateway.serving.sse import cut_events

TOKEN_EVENTS = {
    "response.output_text.delta": "answer",
    "response.reasoning_text.delta": "reasoning",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool",
}
# The events that end a Responses stream: the upstream said it finished (or failed).
LAST_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})


def account(record: Record, response: dict[str, Any]) -> None:
    """Usage, status and tool calls of a whole `response` object onto the record."""
    usage = response.get("usage") or {}
    if usage:
        record.prompt_tokens = int(usage.get("input_tokens") or 0)
        record.completion_tokens = int(usage.get("output_tokens") or 0)
        record.cached_tokens = int(
            (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
        )
        record.reasoning_tokens = int(
            (usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
        )
        record.usage_estimated = False
    else:
        record.usage_estimated = True
    output = response.get("output") or []
    calls = sum(
        1 for item in output if isinstance(item, dict) and item.get("type") == "function_call"
    )
    record.tool_calls = max(record.tool_calls, calls)
    status = response.get("status")
    reason = (response.get("incomplete_details") or {}).get("reason")
    if status == "incomplete" and reason == "max_output_tokens":
        record.finish_reason, record.truncated = "length", True
    elif status == "completed":
        record.finish_reason = "tool_calls" if calls else "stop"
    elif status:
        record.finish_reason = status
    record.check_invariants()


def tap_whole(record: Record, raw: bytes) -> bytes:
    """A non-streamed native response: account for it; the bytes pass unchanged."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise MalformedStream("upstream sent a body that is not JSON") from None
    if not isinstance(obj, dict) or obj.get("object") != "response":
        raise MalformedStream("upstream sent JSON that is not a response object")
    account(record, obj)
    record.e2e_s = time.perf_counter() - record.t0
    if obj.get("model") not in (None, record.model):
        obj["model"] = record.model
        return orjson.dumps(obj)
    return raw


class ResponsesStreamTap:
    """Same interface as `StreamTap` (feed / finish / abort / done); bytes are not rewritten.
    `capture`: the answer's text, reasoning and tool calls go to it as they stream (the
    watchdog's sample, store_content's stored answer), as `StreamTap` hands a chat stream's."""

    unlearnt = None  # it learns no shape (`StreamTap.learn`)

    def __init__(self, record: Record, capture: AnswerSink | None = None):
        self.record = record
        self.capture = capture
        self._buffer = b""
        self._last: float | None = None
        self._gaps: list[float] = []
        self._tokens = 0
        self._ended = False  # a last event (`LAST_EVENTS`) came
        self._sequence = -1  # the last event's sequence_number
        self._response: dict[str, Any] | None = None  # the last response object sent
        self.done = False

    def learn(self) -> None:
        """Nothing to learn (`StreamTap.learn`)."""

    def feed(self, block: bytes, now: float | None = None) -> bytes:
        """`now`: when `block` arrived (the relay's clock), else read here."""
        whole, self._buffer = cut_events(self._buffer, block)
        if not whole:
            return b""
        if now is None:
            now = time.perf_counter()
        events = whole[:-2].split(b"\n\n")
        renamed = False
        for i, event in enumerate(events):
            named = self._event(event, now)
            if named is not None:
                events[i], renamed = named, True
        return b"\n\n".join(events) + b"\n\n" if renamed else whole

    def _event(self, event: bytes, now: float) -> bytes | None:
        """Account for one event; the event again when its response's `model` was renamed."""
        payload = None
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            return None
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise MalformedStream("upstream sent an event that is not valid JSON") from None
        renamed = self._renamed(event, obj)
        self._account(obj, now)
        if isinstance(obj, dict) and isinstance(obj.get("type"), str):
            self._note(obj, obj["type"])
        return renamed

    def _renamed(self, event: bytes, obj: Any) -> bytes | None:
        response = obj.get("response") if isinstance(obj, dict) else None
        if not isinstance(response, dict) or response.get("model") in (None, self.record.model):
            return None
        response["model"] = self.record.model
        kept = [line for line in event.split(b"\n") if not line.startswith(b"data:")]
        return b"\n".join([*kept, b"data: " + orjson.dumps(obj)])

    def _account(self, obj: Any, now: float) -> None:
        record = self.record
        record.chunks += 1
        kind = obj.get("type") if isinstance(obj, dict) else None
        token = TOKEN_EVENTS.get(kind or "")
        if token is not None:
            self._tokens += 1
            if record.ttft_s is None:
                record.ttft_s = now - record.t0
            if token != "reasoning" and record.ttfa_s is None:
                record.ttfa_s = now - record.t0
            if self._last is not None:
                self._gaps.append(now - self._last)
            self._last = now
            if self.capture is not None:
                self._capture(token, obj)
        elif kind == "response.output_item.added" and self.capture is not None:
            item = obj.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                self._tool(obj.get("output_index"), {"name": item.get("name")})
        elif kind in ("response.completed", "response.incomplete"):
            account(record, obj.get("response") or {})
        elif kind in ("response.failed", "error"):
            # The upstream's own failure event reaches the client unchanged; the record says so.
            record.status = 502
            record.error_class = kind

    def _capture(self, token: str, obj: dict[str, Any]) -> None:
        """One token event's piece of the answer, in the chat delta's shape the capture reads."""
        assert self.capture is not None
        piece = obj.get("delta")
        if token == "answer":
            self.capture.delta(0, {"content": piece})
        elif token == "reasoning":
            self.capture.delta(0, {"reasoning": piece})
        elif isinstance(piece, str):  # a function call's arguments
            self._tool(obj.get("output_index"), {"arguments": piece})

    def _tool(self, index: Any, function: dict[str, Any]) -> None:
        """A function call's name (when its item is added) or arguments, by its output index."""
        assert self.capture is not None
        call = {"index": index if isinstance(index, int) else 0, "function": function}
        self.capture.delta(0, {"tool_calls": [call]})

    def _note(self, obj: dict[str, Any], kind: str) -> None:
        """Where the stream has got to: its sequence number, its response, whether it ended."""
        sequence = obj.get("sequence_number")
        if isinstance(sequence, int) and not isinstance(sequence, bool):
            self._sequence = sequence
        if isinstance(obj.get("response"), dict):
            self._response = obj["response"]
        self._ended = self._ended or kind in LAST_EVENTS

    def finish(self) -> bytes:
        """The upstream's stream ended: what was held, passed on; `UpstreamCut` when it had not
        sent its last event (`LAST_EVENTS`)."""
        out = self._buffer
        self._buffer = b""
        if out.strip():
            out = self.feed(b"\n\n")
        if not self._ended:
            cut = UpstreamCut(
                "the upstream ended the stream before it finished"
                if self.record.chunks
                else "the upstream ended the stream without any event"
            )
            cut.partial = out
            raise cut
        self._close()
        self.done = True
        return out

    def abort(self) -> bytes:
        self._close()
        return b""

    def error_event(self, error: GatewayError) -> bytes:
        """The events that end this stream in failure, as the Responses API sends them: `error`,
        then `response.failed` with the response as it stood."""
        failure = {"code": error.code or "upstream_failed", "message": error.message}
        response = dict(self._response or {"object": "response", "output": []})
        response.update(status="failed", error=failure, model=self.record.model)
        response.setdefault("id", f"resp_{self.record.request_id}")
        first = self._sequence + 1
        events = [
            ("error", {"type": "error", **failure, "param": None, "sequence_number": first}),
            (
                "response.failed",
                {"type": "response.failed", "sequence_number": first + 1, "response": response},
            ),
        ]
        return b"".join(
            b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
            for kind, data in events
        )

    def _close(self) -> None:
        record = self.record
        record.e2e_s = time.perf_counter() - record.t0
        if self._gaps:
            record.itl_mean_s = sum(self._gaps) / len(self._gaps)
            record.itl_p99_s = percentile(self._gaps, 0.99)
        if record.completion_tokens == 0 and self._tokens:
            record.completion_tokens = self._tokens
            record.usage_estimated = True
