"""Taps: watch what the upstream sends, fill in the record, rewrite only what must change.

`StreamTap` sits in the byte relay. It cuts the byte stream into SSE events, reads each event's
JSON (usage, finish_reason, provider, which kind of token arrived and when), and passes the
original bytes through untouched unless something must change:

- the usage chunk the gateway asked for is removed again when the client did not ask for it;
- `reasoning` / `reasoning_content` are both present whenever either is (vLLM renamed it);
- content that leaks `<think>` is split into reasoning and answer.

Most events of a stream are the same bytes around a different bit of text: once the event path
has handled one such plain token event, the tap accounts for the next ones by comparing bytes
instead of parsing JSON (`gateway/serving/plain_tokens.py`, its base class; `feed` checks first
for one event to a block, as a paced stream sends them; with logprobs only their value is
parsed; `bench/tap_speed.py` measures it). A Hypothesis test holds the fast path to exactly what
the event path does.

`gateway/serving/accounting.py` reads usage, finish reasons and errors, for streams and
(`tap_body`) whole answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.errors import GatewayError, MalformedStream, UpstreamCut, sse_error_event
from gateway.ledger.record import Record
from gateway.serving.accounting import (
    apply_usage,
    estimated_usage_chunk,
    note_finish,
    stream_error,
    swap_model,
)
from gateway.serving.hooks import AnswerSink
from gateway.serving.plain_tokens import PlainTokens, _utf8
from gateway.serving.reasoning import ThinkSplitter
from gateway.serving.sse import cut_events, data_of
from gateway.serving.token_clocks import TokenClocks
from gateway.serving.valued_tokens import _NOT_LONE_TEXT, lone_valued

DONE = b"[DONE]"
# A text `feed` takes at once holds none of these bytes (`in` would find a think tag at twice the
# cost of `translate`): see `gateway/serving/valued_tokens.py`.


class StreamTap(PlainTokens, TokenClocks):
    def __init__(
        self,
        record: Record,
        *,
        client_wants_usage: bool,
        split_think: bool,
        opened_in_prompt: bool = False,
        chat: bool = True,
        capture: AnswerSink | None = None,
        model: str | None = None,
        prompt_tokens: Callable[[], int] | None = None,
    ):
        self.record = record
        self.capture = capture
        self.client_wants_usage = client_wants_usage
        self.chat = chat
        # The public model name every event is to carry instead of the upstream's id.
        self._model = model
        self._model_json = orjson.dumps(model) if model is not None else b""
        # The request's prompt tokens, estimated, for a stream that reports no usage.
        self._prompt_tokens = prompt_tokens
        # The first event's id and created, for a usage chunk the gateway writes itself.
        self._head: tuple[Any, Any] | None = None
        self._token_key = b'"content":"' if chat else b'"text":"'
        self._empty_token = self._token_key + b'"'
        self._split = split_think
        self._opened = opened_in_prompt
        self._splitters: dict[int, ThinkSplitter] = {}
        self._buffer = b""
        self._last_token_at: float | None = None
        self._gaps: list[float] = []
        self._saw_usage = False
        self._saw_done = False  # the upstream sent its [DONE]
        self._reasoning_events = 0
        self._token_events = 0
        self.done = False
        # The event this stream's shape is to be learnt from, once the block that brought it has
        # been written (`learn`): the first token reaches the client before the tap studies it.
        # (Learnt at once when more events of the same block follow it.)
        self.unlearnt: tuple[bytes, dict[str, Any], bytes, bool] | None = None
        super().__init__(fast=not split_think)  # plain token events: see `PlainTokens`

    # -- bytes in, bytes out -------------------------------------------------------------
    def feed(self, block: bytes, now: float | None = None) -> bytes:  # noqa: C901 - inlined paths
        """The whole events of what arrived so far, relayed; `now`: when `block` arrived (the
        relay's clock), else read here."""
        if now is None:
            now = time.perf_counter()
        lone = self._lone
        if lone is not None and not self._buffer:
            # `_one` inlined for the block a paced stream sends each token in: one shaped event
            # and nothing else (`_arm_lone`). What it does not take goes the way it went.
            prefix, ends, out_prefix, out_suffix, least, room, plain_text = lone
            size = len(block)
            if least < size < room:
                # Cut at both ends where they are the learnt bytes (half the cost of
                # `startswith`, `endswith` and a slice); both were when it is that much shorter.
                text = block.removeprefix(prefix).removesuffix(ends)
                n = size - least
                # A plain text (`_plain_text`): most hold no escape, quote, control character
                # or `>` (so no think tag), which `translate` finds; the others are matched.
                if (
                    len(text) == n
                    and (
                        len(text.translate(None, _NOT_LONE_TEXT)) == n
                        or (plain_text.fullmatch(text) is not None and text.find(b"think>") < 0)
                    )
                    and (text.isascii() or _utf8(text))
                ):
                    self.record.chunks += 1
                    self._hits += 1
                    self._token_events += 1
                    last = self._last_token_at
                    if last is not None:
                        self._gaps.append(now - last)
                    self._last_token_at = now
                    return block if out_prefix is None else out_prefix + text + out_suffix
        valued = self._lone_valued  # the same for an event with logprobs (`lone_valued`)
        if valued is not None and not self._buffer:
            relayed = valued(self, block, now)
            if relayed is not None:
                return relayed
        if self.unlearnt is not None:  # the relay did not ask for it after the last block
            self.learn()
        if self._shape is not None and len(block) < self._room_for_two and not self._buffer:
            # The common block of a paced stream: one whole event (too short for two).
            plain = self._shaped(block, now, ended=True, count=False)
            if plain is not None:
                return plain
        whole, self._buffer = cut_events(self._buffer, block)
        if not whole:
            return b""
        out: list[bytes] = []
        try:
            self._events(whole, now, out)
        except MalformedStream as e:
            e.partial = b"".join(out)
            raise
        return b"".join(out)

    def _events(self, whole: bytes, now: float, out: list[bytes]) -> None:
        """The whole events of `whole`, relayed into `out`: runs of plain token events taken at
        once where one may start, every other event through the event path."""
        pos, end = 0, len(whole)
        # Whether a run of shaped events may start here: at the block's start, after a shaped
        # event, and after the event the shape was learnt from (not after a failed try).
        may_run = True
        tried_block = False  # the whole block's run, tried once (`_block`)
        while pos < end:
            if may_run and self._run is not None and not self._splitters:
                taken = None
                if not tried_block:
                    tried_block = True
                    taken = self._block(whole, pos, now)
                if taken is None:
                    taken = self._plain(whole, pos, now)
                if taken is not None:
                    pos, rendered = taken
                    out.append(rendered)
                    continue
                may_run = False
            stop = whole.index(b"\n\n", pos)
            event = whole[pos:stop]
            pos = stop + 2
            if self._shape is not None:
                shaped = self._shaped(event, now)
                if shaped is not None:
                    out.append(shaped)
                    may_run = True
                    continue
            learnt = self._shape is not None
            rendered = self._event(event, now)
            if self.unlearnt is not None and pos < end:  # more of this block to take with it
                self.learn()
            may_run = may_run or (not learnt and self._shape is not None)
            if rendered:
                out.append(rendered)

    @property
    def complete(self) -> bool:
        """The upstream said it finished: a choice's finish reason, or `[DONE]`, after at least
        one event."""
        record = self.record
        return record.chunks > 0 and (self._saw_done or record.finish_reason is not None)

    def finish(self) -> bytes:
        """End of the upstream stream: flush held text, close with [DONE]. A stream the
        upstream did not say it finished raises `UpstreamCut` (with what was held, to relay
        before the error)."""
        out = []
        if self._buffer.strip():
            out.append(self.feed(b"\n\n"))
        if not self.complete:
            cut = UpstreamCut(
                "the upstream ended the stream before it finished"
                if self.record.chunks
                else "the upstream ended the stream without any event"
            )
            cut.partial = b"".join(out)
            raise cut
        out.append(self._flush_splitters())
        self._close_clocks()
        if self.client_wants_usage and not self._saw_usage:
            out.append(estimated_usage_chunk(self.record, self._head, self.chat, self._model))
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

    @staticmethod
    def error_event(error: GatewayError) -> bytes:
        """The event that ends this stream in failure: an OpenAI error event (a door that speaks
        another API translates it)."""
        return sse_error_event(error)

    # -- one event -----------------------------------------------------------------------
    def _event(self, event: bytes, now: float) -> bytes:
        payload = data_of(event)
        if payload is None or payload == DONE:
            # Comments, keep-alives and event names are not relayed; the tap writes its own
            # [DONE] in finish().
            self._saw_done = self._saw_done or payload == DONE
            return b""
        obj, changed = self._read(payload)
        if changed is None:
            return b""
        for choice in obj.get("choices") or ():
            changed |= self._choice(choice, now)
        model = obj.get("model")
        if self._model is not None and isinstance(model, str) and model != self._model:
            swapped = None if changed else swap_model(payload, model, self._model_json)
            if swapped is None:
                obj["model"] = self._model
                changed = True
            else:
                payload = swapped
        if changed:
            try:
                payload = orjson.dumps(obj)
            except orjson.JSONEncodeError:  # nested deeper than orjson writes
                raise MalformedStream("upstream sent an event nested too deep") from None
        rendered = b"data: " + payload + b"\n\n"
        if self.fast and self._shape is None and not self._splitters and self.unlearnt is None:
            self.unlearnt = (event, obj, rendered, changed)
        return rendered

    def learn(self) -> None:
        """Learn the stream's shape from the event kept for it (`_learn`); the relay asks once
        it has written the block, `feed` before the next one where it did not."""
        unlearnt, self.unlearnt = self.unlearnt, None
        if unlearnt is not None and self._shape is None and not self._splitters:
            self._learn(*unlearnt)
            self._lone_valued = lone_valued(self)

    def _read(self, payload: bytes) -> tuple[dict[str, Any], bool | None]:
        """An event's JSON object, counted as a chunk (its provider, usage and the stream's
        head noted), its usage removed for a client that did not ask for it; and whether that
        changed it, None when nothing of it is left to relay. An error the upstream reported in
        it is raised."""
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise MalformedStream("upstream sent an event that is not valid JSON") from None
        if not isinstance(obj, dict):
            raise MalformedStream("upstream sent an event that is not a JSON object")
        record = self.record
        error = stream_error(obj)
        if error is not None:
            record.finish_reason = "error"
            raise error
        if self._head is None:
            self._first(obj)
        record.chunks += 1
        provider = obj.get("provider")
        if isinstance(provider, str):
            record.provider = provider
        usage = obj.get("usage")
        if usage:
            apply_usage(record, usage)
            self._saw_usage = True
        elif "usage" not in obj:
            return obj, False
        if self.client_wants_usage:
            return obj, False
        if usage and not obj.get("choices"):
            return obj, None
        # vLLM sends "usage": null on every chunk once include_usage is on.
        del obj["usage"]
        return obj, True

    def _first(self, obj: dict[str, Any]) -> None:
        """The stream's first event: checked as dispatch checks one it waits for (it did not
        with `stream_head = "at_once"`), its id and created kept."""
        if "choices" not in obj:
            raise MalformedStream("upstream sent a first event without choices")
        self._head = (obj.get("id"), obj.get("created"))

    def _choice(self, choice: dict[str, Any], now: float) -> bool:
        """Account for one choice of an event: its think tags split out and its reasoning under
        both names (a chat delta); whether that changed it."""
        note_finish(self.record, choice.get("finish_reason"))
        if not self.chat:
            return self._text_choice(choice, now)
        index = choice.get("index", 0)
        delta = choice.get("delta") or {}
        content = delta.get("content")
        changed = False
        if content and (
            self._splitters or self._split or "<think>" in content or "</think>" in content
        ):
            changed, content = self._split_think(index, delta, content)
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and not (delta.get("reasoning_content") and delta.get("reasoning")):
            delta["reasoning_content"] = delta["reasoning"] = reasoning
            changed = True
        tools = delta.get("tool_calls")
        if self.capture is not None:
            self.capture.delta(index, delta)
        if tools:
            self.record.tool_calls = max(self.record.tool_calls, len(tools))
        if reasoning or content or tools:
            self._token(now, reasoning, bool(content or tools))
        return changed

    def _text_choice(self, choice: dict[str, Any], now: float) -> bool:
        """A completion's choice: its text is the token (never changed)."""
        content = choice.get("text")
        if self.capture is not None:
            self.capture.text(choice.get("index", 0), content)
        if content:
            self._token(now, None, True)
        return False

    def _split_think(self, index: int, delta: dict[str, Any], content: str) -> tuple[bool, str]:
        """Content that leaks `<think>` (or all of it, when the template thinks in the prompt)
        split into reasoning and answer: (whether the delta changed, its content now)."""
        splitter = self._splitters.get(index)
        if splitter is None:
            if not (self._split or "<think>" in content or "</think>" in content):
                return False, content
            splitter = self._splitters[index] = ThinkSplitter(self._opened)
            # Shaped events are the event path's while text is split.
            self._lone = self._lone_valued = None
        reasoning_piece, content = splitter.feed(content)
        delta["content"] = content
        if reasoning_piece:
            delta["reasoning_content"] = delta["reasoning"] = reasoning_piece
        if splitter.leaked or self._split:
            self.record.reasoning_leak = True
        return True, content

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
