"""Taps: watch what the upstream sends, fill in the record, rewrite only what must change.

`StreamTap` sits in the byte relay. It cuts the byte stream into SSE events, reads each event's
JSON (usage, finish_reason, provider, which kind of token arrived and when), and passes the
original bytes through untouched unless something must change:

- the usage chunk the gateway asked for is removed again when the client did not ask for it;
- `reasoning` / `reasoning_content` are both present whenever either is (vLLM renamed it);
- content that leaks `<think>` is split into reasoning and answer.

`tap_body` does the same for a whole non-streamed response.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.reasoning import ThinkSplitter, split_text
from gateway.record import Record
from gateway.watchdog import Capture

DONE = b"[DONE]"


# The checks cost about as much as parsing two or three events (a substring search is ~0.2 µs
# here): smaller blocks go through the event path (bench/tap_speed.py).
PLAIN_MIN_EVENTS = 4
PLAIN_MIN_BYTES = 4 * 96
# Substrings that send a block through the event path (see `StreamTap._plain`).
_EVENT_PATH_MARKERS = (
    b'"error"',
    b'"reasoning',
    b'"tool_calls"',
    b'"function_call"',
    b'"provider"',
    b'"role"',
    b'"refusal"',
    b'"audio"',
)


class MalformedStream(Exception):
    """The upstream sent an event that is not valid JSON. `partial` holds the output of the
    events before it in the same block, which the client must still get."""

    partial = b""


def _apply_usage(record: Record, usage: dict[str, Any]) -> None:
    record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    record.completion_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    record.cached_tokens = int(details.get("cached_tokens") or 0)
    cdetails = usage.get("completion_tokens_details") or {}
    reasoning = cdetails.get("reasoning_tokens")
    if reasoning is not None:
        record.reasoning_tokens = int(reasoning)
    cost = usage.get("cost")
    if isinstance(cost, int | float):
        record.charged_cost_usd = float(cost)
    record.usage_estimated = False


def _finish(record: Record, reason: str | None) -> None:
    if not reason:
        return
    # With n > 1 any truncated choice marks the request.
    if record.finish_reason is None or reason == "length":
        record.finish_reason = reason
    if reason == "length":
        record.truncated = True


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[index]


class StreamTap:
    def __init__(
        self,
        record: Record,
        *,
        client_wants_usage: bool,
        split_think: bool,
        opened_in_prompt: bool = False,
        chat: bool = True,
        capture: Capture | None = None,
    ):
        self.record = record
        self.capture = capture
        self.client_wants_usage = client_wants_usage
        self.chat = chat
        self._token_key = b'"content":"' if chat else b'"text":"'
        self._empty_token = self._token_key + b'"'
        self._split = split_think
        self._opened = opened_in_prompt
        self._splitters: dict[int, ThinkSplitter] = {}
        self._buffer = b""
        self._last_token_at: float | None = None
        self._gaps: list[float] = []
        self._saw_usage = False
        self._reasoning_events = 0
        self._token_events = 0
        self.done = False
        # The plain-block path (see `_plain`); off in tests that compare it with the event path.
        self.fast = capture is None and not split_think
        self._relayed = b""

    # -- bytes in, bytes out -------------------------------------------------------------
    def feed(self, block: bytes) -> bytes:
        data = self._buffer + block
        if b"\r\n" in data:
            data = data.replace(b"\r\n", b"\n")
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._buffer = data
            return b""
        self._buffer = data[cut + 2 :]
        now = time.perf_counter()
        if self.fast and cut >= PLAIN_MIN_BYTES and self._plain(data, cut, now):
            return self._relayed
        out: list[bytes] = []
        try:
            for event in data[:cut].split(b"\n\n"):
                rendered = self._event(event, now)
                if rendered:
                    out.append(rendered)
        except MalformedStream as e:
            e.partial = b"".join(out)
            raise
        return b"".join(out)

    def finish(self) -> bytes:
        """End of the upstream stream: flush held text, close with [DONE]."""
        out = []
        if self._buffer.strip():
            out.append(self.feed(b"\n\n"))
        out.append(self._flush_splitters())
        self._close_clocks()
        if self.record.truncated:
            out.append(
                b": plumbline truncated finish_reason=length max_tokens="
                + str(self.record.max_tokens).encode()
                + b"\n\n"
            )
        out.append(b"data: [DONE]\n\n")
        self.done = True
        return b"".join(out)

    def abort(self) -> bytes:
        """The stream broke: flush what is held so the client keeps every token it was sent."""
        out = self._flush_splitters()
        self._close_clocks()
        return out

    # -- a block of plain token events, without parsing -------------------------------------
    def _plain(self, data: bytes, cut: int, now: float) -> bool:
        """Account for a block of ordinary token events without parsing them; False when the
        block needs the event path.

        After the first answer token, nearly every event is `data: {…}` carrying one non-empty
        `content` (or `text`) delta and nothing the tap acts on. Such a block is recognised with
        a few C-speed substring counts and relayed as is (minus `"usage":null` when the client
        did not ask for usage); its effect on the record is exactly what the event path would
        have had: one chunk and one token event per event, the block's arrival as their clock.
        Anything else in the block — a finish reason, usage, an error, reasoning, tool calls, a
        provider, `<think>`, an empty delta, comments, other SSE fields, an event that does not
        end its JSON object — sends the whole block through the event path."""
        record = self.record
        if self._splitters or record.ttfa_s is None:
            return False
        body = data[: cut + 2]
        n = body.count(b"\n\n")
        if (
            n < PLAIN_MIN_EVENTS
            or body.count(b"\n") != 2 * n
            or body.count(b"data: {") != n
            or body.count(b"}\n\n") != n
            or body.count(self._token_key) - body.count(self._empty_token) != n
            or body.count(b'"finish_reason"') != body.count(b'"finish_reason":null')
            or b"think>" in body
            or b"\\u003c" in body  # an escaped "<": perhaps <think>
        ):
            return False
        for marker in _EVENT_PATH_MARKERS:
            if marker in body:
                return False
        usage = body.count(b'"usage"')
        if usage:
            if usage != body.count(b'"usage":null'):
                return False
            if not self.client_wants_usage:
                body = body.replace(b',"usage":null', b"").replace(b'"usage":null,', b"")
                if b'"usage"' in body:
                    return False
        record.chunks += n
        self._token_events += n
        if self._last_token_at is not None:
            self._gaps.append(now - self._last_token_at)
            if n > 1:
                self._gaps.extend([0.0] * (n - 1))
        self._last_token_at = now
        self._relayed = body
        return True

    # -- one event -----------------------------------------------------------------------
    def _event(self, event: bytes, now: float) -> bytes:
        payload = None
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                payload = line[5:].strip()
        if payload is None:
            return b""  # comments / keep-alives / event names are not relayed
        if payload == DONE:
            return b""  # the tap writes its own [DONE] in finish()
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise MalformedStream("upstream sent an event that is not valid JSON") from None
        if not isinstance(obj, dict):
            raise MalformedStream("upstream sent an event that is not a JSON object")
        if "error" in obj and "choices" not in obj:
            raise MalformedStream("upstream reported an error mid-stream")
        record = self.record
        record.chunks += 1
        changed = False
        provider = obj.get("provider")
        if isinstance(provider, str):
            record.provider = provider
        usage = obj.get("usage")
        if usage:
            _apply_usage(record, usage)
            self._saw_usage = True
            if not self.client_wants_usage:
                if not obj.get("choices"):
                    return b""
                del obj["usage"]
                changed = True
        elif "usage" in obj and not self.client_wants_usage:
            # vLLM sends "usage": null on every chunk once include_usage is on.
            del obj["usage"]
            changed = True
        for choice in obj.get("choices") or ():
            changed |= self._choice(choice, now)
        if changed:
            return b"data: " + orjson.dumps(obj) + b"\n\n"
        return b"data: " + payload + b"\n\n"

    def _choice(self, choice: dict[str, Any], now: float) -> bool:
        record = self.record
        changed = False
        _finish(record, choice.get("finish_reason"))
        if self.chat:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            index = choice.get("index", 0)
            splitter = self._splitters.get(index)
            if (
                content
                and splitter is None
                and (self._split or "<think>" in content or "</think>" in content)
            ):
                splitter = self._splitters[index] = ThinkSplitter(self._opened)
            if content and splitter is not None:
                reasoning_piece, content = splitter.feed(content)
                delta["content"] = content
                if reasoning_piece:
                    delta["reasoning_content"] = delta["reasoning"] = reasoning_piece
                changed = True
                if splitter.leaked or self._split:
                    record.reasoning_leak = True
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and not (delta.get("reasoning_content") and delta.get("reasoning")):
                delta["reasoning_content"] = delta["reasoning"] = reasoning
                changed = True
            tools = delta.get("tool_calls")
            if self.capture is not None:
                self.capture.delta(index, delta)
            token = bool(reasoning or content or tools)
            if tools:
                record.tool_calls = max(record.tool_calls, len(tools))
        else:
            content = choice.get("text")
            if self.capture is not None:
                self.capture.text(choice.get("index", 0), content)
            reasoning = None
            token = bool(content)
        if token:
            self._token_events += 1
            if reasoning:
                self._reasoning_events += 1
            if record.ttft_s is None:
                record.ttft_s = now - record.t0
            if (content or (self.chat and delta.get("tool_calls"))) and record.ttfa_s is None:
                record.ttfa_s = now - record.t0
            if self._last_token_at is not None:
                self._gaps.append(now - self._last_token_at)
            self._last_token_at = now
        return changed

    def _flush_splitters(self) -> bytes:
        out = []
        for index, splitter in self._splitters.items():
            reasoning, content = splitter.flush()
            if not (reasoning or content):
                continue
            delta: dict[str, Any] = {}
            if content:
                delta["content"] = content
            if reasoning:
                delta["reasoning_content"] = delta["reasoning"] = reasoning
            if self.capture is not None:
                self.capture.delta(index, delta)
            event = {
                "object": "chat.completion.chunk",
                "choices": [{"index": index, "delta": delta}],
            }
            out.append(b"data: " + orjson.dumps(event) + b"\n\n")
        return b"".join(out)

    def _close_clocks(self) -> None:
        record = self.record
        record.e2e_s = time.perf_counter() - record.t0
        if self._gaps:
            record.itl_mean_s = sum(self._gaps) / len(self._gaps)
            record.itl_p99_s = _percentile(self._gaps, 0.99)
        if not self._saw_usage:
            # The upstream sent no usage (llama.cpp never does): count what streamed.
            record.completion_tokens = self._token_events
            record.reasoning_tokens = self._reasoning_events
            record.usage_estimated = True
        elif record.reasoning_tokens == 0 and self._reasoning_events:
            # vLLM reports no reasoning_tokens in usage: one streamed delta is one token.
            record.reasoning_tokens = self._reasoning_events
        record.check_invariants()


def tap_body(
    record: Record,
    raw: bytes,
    *,
    split_think: bool,
    opened_in_prompt: bool = False,
    chat: bool = True,
    capture: Capture | None = None,
) -> bytes:
    """Account for a non-streamed response and return the bytes to send to the client."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise MalformedStream("upstream sent a body that is not JSON") from None
    if not isinstance(obj, dict) or "choices" not in obj:
        raise MalformedStream("upstream sent a body without choices")
    changed = False
    if isinstance(obj.get("provider"), str):
        record.provider = obj["provider"]
    if obj.get("usage"):
        _apply_usage(record, obj["usage"])
    else:
        record.usage_estimated = True
    reasoning_chars = answer_chars = 0
    for choice in obj.get("choices") or ():
        _finish(record, choice.get("finish_reason"))
        if not chat:
            continue
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, str) and (
            split_think or "<think>" in content or "</think>" in content
        ):
            reasoning, answer, leaked = split_text(content, opened_in_prompt)
            if leaked or reasoning:
                record.reasoning_leak = True
                message["content"] = answer
                if reasoning:
                    message["reasoning_content"] = message["reasoning"] = reasoning
                changed = True
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning and not (message.get("reasoning_content") and message.get("reasoning")):
            message["reasoning_content"] = message["reasoning"] = reasoning
            changed = True
        if capture is not None:
            capture.message(choice.get("index", 0), message)
        if message.get("tool_calls"):
            record.tool_calls = max(record.tool_calls, len(message["tool_calls"]))
        reasoning_chars += len(reasoning or "")
        answer_chars += len(message.get("content") or "")
    if record.reasoning_tokens == 0 and reasoning_chars and record.completion_tokens:
        # No reasoning count from the upstream: apportion completion tokens by characters.
        share = reasoning_chars / (reasoning_chars + answer_chars)
        record.reasoning_tokens = round(record.completion_tokens * share)
        record.usage_estimated = True
    record.e2e_s = time.perf_counter() - record.t0
    record.check_invariants()
    return orjson.dumps(obj) if changed else raw


def tap_embeddings(record: Record, raw: bytes) -> bytes:
    """Embeddings carry only prompt tokens; the body passes through unchanged."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise MalformedStream("upstream sent a body that is not JSON") from None
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if usage:
        record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    else:
        record.usage_estimated = True
    record.e2e_s = time.perf_counter() - record.t0
    return raw
