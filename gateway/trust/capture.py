"""What a request answered, kept for the checks that read it: tool calls, and a sample of text.

The taps hand every streamed delta or whole message of choice 0 to the request's `Capture` (if
it has one). `TextSampler` decides per request whether its text is kept: a share of requests
(`[watchdog].sample_rate`), every shadowed one, and always the tool calls of a request that
offered tools. At the end, `Capture.finish` sets the record's `sampled`, `degenerate` and
`tool_call_error` flags, which the watchdog (`gateway/trust/watchdog.py`) and the store read.

With `[store] store_content` on, the sampler also has a `ContentKeeper`: every request then gets
a capture that keeps its whole answer (to `content_max_bytes`), and `finish` hands the prompt
(the request body as received) and the response to the store's queue as a `contents` row. Off,
nothing of this exists and the taps see no capture more than before.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import orjson

from gateway.config.trust import WatchdogConfig
from gateway.ledger.content import capped
from gateway.ledger.record import Record
from gateway.serving.degeneration import reply_degeneration

# ---- tool calls ------------------------------------------------------------------------------


class ToolCall(NamedTuple):
    name: str | None
    arguments: str


def _tool_schemas(request_tools: Iterable[dict[str, Any]] | None) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for tool in request_tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            schemas[fn["name"]] = fn.get("parameters")
    return schemas


def check_tool_calls(
    request_tools: Sequence[dict[str, Any]] | None, calls: Sequence[ToolCall]
) -> list[str]:
    """Problems with the calls a model made, each "kind: detail" with kind one of
    invalid_json | unknown_tool | schema. Empty when every call is valid."""
    # jsonschema loads with the first schema checked (once: the first answer with tool calls
    # pays its import), not with every gateway that may never see a tool call.
    from jsonschema import SchemaError
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    schemas = _tool_schemas(request_tools)
    problems: list[str] = []
    for call in calls:
        if call.name not in schemas:
            problems.append(f"unknown_tool: {call.name!r} was not offered")
            continue
        raw = call.arguments if call.arguments.strip() else "{}"
        try:
            args = json.loads(raw)
        except json.JSONDecodeError as e:
            problems.append(f"invalid_json: {call.name}: {e.msg} at {e.pos}")
            continue
        if not isinstance(args, dict):
            problems.append(f"invalid_json: {call.name}: arguments are not a JSON object")
            continue
        schema = schemas[call.name]
        if not isinstance(schema, dict):
            continue
        cls = validator_for(schema)
        try:
            cls.check_schema(schema)
        except SchemaError:
            continue  # the client's schema is broken: not the model's fault
        error = best_match(cls(schema).iter_errors(args))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
            problems.append(f"schema: {call.name}: {where}: {error.message[:160]}")
    return problems


# ---- capturing answers -----------------------------------------------------------------------


class Capture:
    """What one request answered (choice 0): text when sampled, tool calls when tools were offered.

    The taps call `delta(index, delta)` per streamed chat choice (after the reasoning split),
    `message(index, message)` per non-streamed choice and `text(index, piece)` for completions;
    the relay calls `finish()` once before the record is handed on.

    With a `content` keeper (store_content) the text is kept whether sampled or not, up to the
    keeper's cap; the sampled checks still read only the first `sample_chars` of it. The relay
    keeps the body the client got where it has one (`answered`: a whole answer, an error)."""

    __slots__ = (
        "record",
        "tools",
        "keep_text",
        "max_chars",
        "sampled",
        "sample_chars",
        "content",
        "prompt",
        "sent",
        "_text",
        "_reasoning",
        "_size",
        "_calls",
    )

    def __init__(
        self,
        record: Record,
        tools: list[dict[str, Any]] | None,
        keep_text: bool,
        max_chars: int = 8192,
        content: ContentKeeper | None = None,
        prompt: bytes | None = None,
    ):
        self.record = record
        self.tools = tools
        self.sampled = keep_text  # the text is checked for degeneration
        self.sample_chars = max_chars
        self.keep_text = keep_text or content is not None
        self.max_chars = max(max_chars, content.max_bytes) if content is not None else max_chars
        self.content = content
        self.prompt = prompt
        self.sent: bytes | None = None
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._size = 0
        self._calls: dict[int, list[Any]] = {}

    def _keep(self, parts: list[str], piece: Any) -> None:
        if self.keep_text and isinstance(piece, str) and piece and self._size < self.max_chars:
            piece = piece[: self.max_chars - self._size]
            parts.append(piece)
            self._size += len(piece)

    def text(self, index: int, piece: Any) -> None:
        if index == 0:
            self._keep(self._text, piece)

    def delta(self, index: int, delta: dict[str, Any]) -> None:
        if index != 0:
            return
        self._keep(self._text, delta.get("content"))
        self._keep(self._reasoning, delta.get("reasoning_content") or delta.get("reasoning"))
        for tc in delta.get("tool_calls") or ():
            slot = self._calls.setdefault(tc.get("index", 0), [None, []])
            fn = tc.get("function") or {}
            if fn.get("name"):
                slot[0] = fn["name"]
            args = fn.get("arguments")
            if isinstance(args, str) and sum(map(len, slot[1])) < 4 * self.max_chars:
                slot[1].append(args)

    def message(self, index: int, message: dict[str, Any]) -> None:
        if index != 0:
            return
        self._keep(self._text, message.get("content"))
        self._keep(self._reasoning, message.get("reasoning_content") or message.get("reasoning"))
        for i, tc in enumerate(message.get("tool_calls") or ()):
            fn = tc.get("function") or {}
            args = fn.get("arguments")
            self._calls[i] = [fn.get("name"), [args if isinstance(args, str) else json.dumps(args)]]

    @property
    def answer(self) -> str:
        """The sampled answer text (its first `sample_chars`)."""
        text = "".join(self._text)
        return text if self.content is None else text[: self.sample_chars]

    @property
    def reasoning(self) -> str:
        text = "".join(self._reasoning)
        return text if self.content is None else text[: self.sample_chars]

    def tool_calls(self) -> list[ToolCall]:
        return [ToolCall(name, "".join(parts)) for _, (name, parts) in sorted(self._calls.items())]

    def finish(self) -> None:
        """Set the record's `sampled`, `degenerate` and `tool_call_error` flags."""
        record = self.record
        if self.sampled and (self._text or self._reasoning):
            record.sampled = True
            record.degenerate = reply_degeneration(self.answer, self.reasoning) is not None
        calls = self.tool_calls()
        if calls:
            problems = check_tool_calls(self.tools, calls)
            record.tool_call_error = problems[0].split(":", 1)[0] if problems else None
        if self.content is not None:
            self.content.keep(self)

    def answered(self, body: bytes, *, failed: bool = False) -> None:
        """What the client got in one piece: a whole answer, or the error that ended the request
        (`failed`: before any answer, so `finish` comes from here). It is the stored response
        with store_content on (and nothing is kept off); a stream's is put back together from its
        deltas (`streamed`)."""
        if self.content is None:
            return
        self.sent = body
        if failed:
            self.finish()

    def streamed(self) -> bytes:
        """A stream's answer put back together, as stored: JSON with `content` (the text),
        `reasoning` and `tool_calls` ([{name, arguments}]) where there were any,
        `finish_reason`, `truncated: true` where the text passed the cap, and `error` (status,
        class) where the request failed."""
        record = self.record
        out: dict[str, Any] = {"content": "".join(self._text)}
        if self._reasoning:
            out["reasoning"] = "".join(self._reasoning)
        calls = self.tool_calls()
        if calls:
            out["tool_calls"] = [{"name": c.name, "arguments": c.arguments} for c in calls]
        out["finish_reason"] = record.finish_reason
        if self._size >= self.max_chars:
            out["truncated"] = True
        if record.error_class is not None:
            out["error"] = {"status": record.status, "class": record.error_class}
        return orjson.dumps(out)


class StoredContent:
    """A `contents` row waiting in the store's queue: the strings are built (decoded, the stream
    put back together, capped) by the queue's writer thread when it turns it into a row, not on
    the event loop."""

    __slots__ = ("capture", "max_bytes", "request_id", "time")

    def __init__(self, capture: Capture, max_bytes: int):
        self.capture = capture
        self.max_bytes = max_bytes
        self.request_id = capture.record.request_id
        self.time = capture.record.time

    def as_row(self) -> dict[str, Any]:
        capture = self.capture
        sent = capture.sent if capture.sent is not None else capture.streamed()
        return {
            "request_id": self.request_id,
            "time": self.time,
            "prompt": capped(capture.prompt, self.max_bytes),
            "response": capped(sent, self.max_bytes),
        }


class ContentKeeper:
    """store_content: what `[store]` keeps of each request."""

    def __init__(self, submit: Callable[[StoredContent], None], max_bytes: int):
        self.submit = submit
        self.max_bytes = max_bytes

    def keep(self, capture: Capture) -> None:
        """The request has ended: its row to the store's queue (which never blocks)."""
        self.submit(StoredContent(capture, self.max_bytes))


class TextSampler:
    """Decides per request whether to capture its answer. Cheap when not: one random draw."""

    def __init__(
        self,
        rate: float,
        max_chars: int = 8192,
        rand: Callable[[], float] = random.random,
        content: ContentKeeper | None = None,
    ):
        self.rate = rate
        self.max_chars = max_chars
        self._rand = rand
        self.content = content  # store_content: every request gets a capture

    @classmethod
    def from_config(cls, cfg: WatchdogConfig, content: ContentKeeper | None = None) -> TextSampler:
        return cls(cfg.sample_rate if cfg.enabled else 0.0, cfg.sample_chars, content=content)

    def start(
        self,
        record: Record,
        body: dict[str, Any],
        *,
        always: bool = False,
        prompt: bytes | None = None,
    ) -> Capture | None:
        """A capture for this request, or None. `always`: a shadowed request (its answer is
        compared with the shadow's). Requests offering tools always get one (tool checks).
        `prompt`: the body as received, stored with the answer when store_content is on."""
        tools = body.get("tools")
        keep = always or (self.rate > 0 and self._rand() < self.rate)
        content = self.content
        if content is not None:
            offered = tools if isinstance(tools, list) else None
            return Capture(record, offered, keep, self.max_chars, content, prompt)
        if not keep and not tools:
            return None
        return Capture(record, tools if isinstance(tools, list) else None, keep, self.max_chars)
