"""Taps: watch what the upstream sends, fill in the record, rewrite only what must change.

`StreamTap` sits in the byte relay. It cuts the byte stream into SSE events, reads each event's
JSON (usage, finish_reason, provider, which kind of token arrived and when), and passes the
original bytes through untouched unless something must change:

- the usage chunk the gateway asked for is removed again when the client did not ask for it;
- `reasoning` / `reasoning_content` are both present whenever either is (vLLM renamed it);
- content that leaks `<think>` is split into reasoning and answer.

Most events of a stream are the same bytes around a different bit of text. Once the event path
has handled one such plain token event, the tap remembers its shape and accounts for the next
ones by comparing bytes instead of parsing JSON: a whole block of them at once (its texts cut
out and checked, the rest compared), a run of them with one regular expression, or one at a
time (`bench/tap_speed.py`: 1.5 µs per event one to a block, 0.49 with 16, 0.30 with 256). A
Hypothesis test holds all three to exactly what the event path does.

`gateway/serving/accounting.py` reads usage, finish reasons and errors, for streams and (`tap_body`)
whole answers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from itertools import repeat
from typing import Any

import orjson

from gateway.ledger.record import Record
from gateway.serving.accounting import (
    MalformedStream,
    apply_usage,
    note_finish,
    stream_error,
    swap_model,
)
from gateway.serving.reasoning import ThinkSplitter
from gateway.trust.capture import Capture

DONE = b"[DONE]"


# The text of an event that fits the learnt shape: a JSON string's inside that orjson reads as
# a plain non-empty text. No quote (which would end it), no control character (line breaks add SSE
# fields), only valid escapes, and none of an ASCII character (`\u003c` may hide a think tag) or
# of a surrogate (a lone one is invalid). What may be or hide a think tag, and bytes that may not
# be UTF-8, are checked besides (`_plain_bytes`).
_TEXT = rb'(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u(?!00|[dD][89abAB])[0-9a-fA-F]{4}))++'
# The same, escaped only as orjson escapes: when the tap rewrites an event (dropping `"usage":
# null`) the event path re-encodes its text, so a text copied as received must read the same.
_CANONICAL_TEXT = rb'(?:[^"\\\x00-\x1f]|\\["\\bfnrt])++'


def _run_of(text: bytes) -> re.Pattern[bytes]:
    """Whole events that are all the same bytes (`p`, `s`) around a text: compiled once for
    every stream (a stream's own pattern cost 0.4 ms to compile), the caller compares `p` and
    `s` with the shape it learnt."""
    return re.compile(
        rb'(?P<p>data: \{[^\n]*?"(?:content|text)":")'
        + text
        + rb'(?P<s>"[^\n]*)\n\n(?:(?P=p)'
        + text
        + rb"(?P=s)\n\n)*"
    )


_RUN = _run_of(_TEXT)
_CANONICAL_RUN = _run_of(_CANONICAL_TEXT)
_PLAIN_TEXT = re.compile(_TEXT)
# Bytes no text holds unescaped (a quote, a backslash, a control character): a text without any
# is plain for both patterns, and `bytes.translate` finds them at a fraction of a regex's cost.
_ESCAPED_OR_NOT_TEXT = b'"\\' + bytes(range(0x20))
_CANONICAL_PLAIN_TEXT = re.compile(_CANONICAL_TEXT)


def _plain_bytes(data: bytes) -> bool:
    """No think tag, and valid UTF-8 (as orjson requires)."""
    if b"think>" in data:
        return False
    if data.isascii():
        return True
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def cut_events(held: bytes, block: bytes) -> tuple[bytes, bytes]:
    """(the whole SSE events in `held + block`, line ends made `\n`, ending with the blank line
    after the last; what is left of a partial event, to hold until the next block)."""
    data = held + block
    if b"\r" in data:  # one byte is looked for with memchr; two are not
        data = data.replace(b"\r\n", b"\n")
    cut = data.rfind(b"\n\n")
    if cut < 0:
        return b"", data
    return data[: cut + 2], data[cut + 2 :]


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
        self._reasoning_events = 0
        self._token_events = 0
        self.done = False
        # Shaped events (see `_learn`); off in tests that compare them with the event path.
        self.fast = not split_think
        # Whether shaped events' texts go to the capture (a sampled answer's choice 0).
        self._capture_text = False
        # (prefix, suffix, output prefix, output suffix) of this stream's plain token events,
        # learnt from the first one the event path handled (see `_learn`).
        self._shape: tuple[bytes, bytes, bytes, bytes] | None = None
        # How their text and whole blocks of them are matched (see `_plain`): escaped in any
        # valid way, or as orjson would when the tap rewrites them.
        self._text: re.Pattern[bytes] | None = None
        self._run: re.Pattern[bytes] | None = None
        self._rewrite = False
        self._room_for_two = 0

    # -- bytes in, bytes out -------------------------------------------------------------
    def feed(self, block: bytes) -> bytes:
        now = time.perf_counter()
        if self._shape is not None and len(block) < self._room_for_two and not self._buffer:
            # The common block of a paced stream: one whole event (too short for two).
            plain = self._shaped(block, now, ended=True)
            if plain is not None:
                return plain
        whole, self._buffer = cut_events(self._buffer, block)
        if not whole:
            return b""
        out: list[bytes] = []
        pos, end = 0, len(whole)
        # Whether a run of shaped events may start here: at the block's start, after a shaped
        # event, and after the event the shape was learnt from (not after a failed try).
        may_run = True
        tried_block = False  # the whole block's run, tried once (`_block`)
        try:
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
                may_run = may_run or (not learnt and self._shape is not None)
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
        if self.client_wants_usage and not self._saw_usage:
            out.append(self._usage_chunk())
        if self.record.truncated:
            out.append(
                b": plumbline truncated finish_reason=length max_tokens="
                + str(self.record.max_tokens).encode()
                + b"\n\n"
            )
        out.append(b"data: [DONE]\n\n")
        self.done = True
        return b"".join(out)

    def _usage_chunk(self) -> bytes:
        """The usage chunk a client that asked for one gets when the upstream sent none
        (llama.cpp): the gateway's counts, in OpenAI's shape, after a comment saying they are
        estimated (the record says so too)."""
        record = self.record
        usage: dict[str, Any] = {
            "prompt_tokens": record.prompt_tokens,
            "completion_tokens": record.completion_tokens,
            "total_tokens": record.prompt_tokens + record.completion_tokens,
        }
        if record.reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": record.reasoning_tokens}
        rid, created = self._head or (None, None)
        chunk: dict[str, Any] = {
            "id": rid or f"chatcmpl-{record.request_id}",
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": created if isinstance(created, int) else int(record.time),
            "model": self._model or record.model,
            "choices": [],
            "usage": usage,
        }
        return b": plumbline usage estimated\n\ndata: " + orjson.dumps(chunk) + b"\n\n"

    def abort(self) -> bytes:
        """The stream broke: flush what is held so the client keeps every token it was sent."""
        out = self._flush_splitters()
        self._close_clocks()
        return out

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
        record = self.record
        error = stream_error(obj)
        if error is not None:
            record.finish_reason = "error"
            raise error
        if self._head is None:
            self._head = (obj.get("id"), obj.get("created"))
        record.chunks += 1
        changed = False
        provider = obj.get("provider")
        if isinstance(provider, str):
            record.provider = provider
        usage = obj.get("usage")
        if usage:
            apply_usage(record, usage)
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
        model = obj.get("model")
        if self._model is not None and isinstance(model, str) and model != self._model:
            swapped = None if changed else swap_model(payload, model, self._model_json)
            if swapped is None:
                obj["model"] = self._model
                changed = True
            else:
                payload = swapped
        rendered = b"data: " + (orjson.dumps(obj) if changed else payload) + b"\n\n"
        if self.fast and self._shape is None and not self._splitters:
            self._learn(event, obj, rendered, changed)
        return rendered

    # -- events shaped like the stream's plain token events ------------------------------------
    def _learn(self, event: bytes, obj: dict[str, Any], rendered: bytes, encoded: bool) -> None:
        """Remember the bytes around the text of a plain token event (one choice, a delta of
        only non-empty `content` — or a completion's `text` —, no finish reason, usage,
        provider or error), as received and as relayed. Within one stream every such event is
        the same bytes around a different text, so `_shaped` can account for and relay the next
        ones without parsing them. `encoded`: the event path wrote the event anew with orjson
        (its text as orjson escapes it), rather than as received (perhaps a model id swapped)."""
        choices = obj.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            return
        if obj.get("usage") or "provider" in obj or "error" in obj:
            return
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            return
        if self.chat:
            delta = choice.get("delta")
            if not isinstance(delta, dict) or list(delta) != ["content"]:
                return
            text, key = delta["content"], b'"content":'
        else:
            text, key = choice.get("text"), b'"text":'
        if not isinstance(text, str) or not text:
            return
        needle = key + orjson.dumps(text)
        if event.count(needle) != 1 or rendered.count(needle) != 1:
            return  # the upstream escapes differently, or the text is ambiguous
        i, o = event.find(needle) + len(key) + 1, rendered.find(needle) + len(key) + 1
        j, p = i + len(needle) - len(key) - 2, o + len(needle) - len(key) - 2
        self._shape = prefix, suffix, out_prefix, out_suffix = (
            event[:i],
            event[j:],
            rendered[:o],
            rendered[p:],
        )
        self._room_for_two = 2 * (len(prefix) + len(suffix) + 3)
        self._rewrite = (prefix, suffix + b"\n\n") != (out_prefix, out_suffix)
        capture = self.capture
        self._capture_text = (
            capture is not None and capture.keep_text and choice.get("index", 0) == 0
        )
        self._text = _CANONICAL_PLAIN_TEXT if encoded else _PLAIN_TEXT
        self._run = _CANONICAL_RUN if encoded else _RUN

    def _block(self, whole: bytes, pos: int, now: float) -> tuple[int, bytes] | None:
        """`_plain` for the common block: from `pos` to the last shaped event's end, nothing
        but shaped events. Checked without a regular expression over the shape's bytes (half
        the cost per event): the texts are cut out at the token key, each loses the bytes that
        follow every text, and the events put back together from them must be the bytes
        received. Then only the texts are checked, all at once (`_all_plain`). None when
        anything else is there; `_plain` then finds the run."""
        assert self._shape is not None
        prefix, suffix, out_prefix, out_suffix = self._shape
        ends = suffix + b"\n\n"
        stop = whole.rfind(ends) + len(ends)
        if stop <= pos or not whole.startswith(prefix, pos):
            return None
        taken = whole if pos == 0 and stop == len(whole) else whole[pos:stop]
        key = self._token_key
        pieces = taken.split(key)
        if len(pieces) < 2:
            return None
        texts = list(map(bytes.removesuffix, pieces[1:], repeat(ends + prefix[: -len(key)])))
        texts[-1] = pieces[-1].removesuffix(ends)
        if prefix + (ends + prefix).join(texts) + ends != taken or not self._all_plain(texts):
            return None
        self._plain_tokens(len(texts), now)
        if self._capture_text:
            self._captured(b"".join(texts))  # escaped texts put together: their texts together
        if self._rewrite:
            return stop, out_prefix + (out_suffix + out_prefix).join(texts) + out_suffix
        return stop, taken

    def _all_plain(self, texts: list[bytes]) -> bool:
        """Each one a plain text (`_TEXT`, `_plain_bytes`), checked at once: joined by DEL, which
        is a plain character, finishes no text's unfinished escape, and makes no think tag."""
        if not all(texts):
            return False
        joined = b"\x7f".join(texts)
        if len(joined.translate(None, _ESCAPED_OR_NOT_TEXT)) != len(joined):
            assert self._text is not None
            if self._text.fullmatch(joined) is None:
                return False
        return _plain_bytes(joined)

    def _plain(self, whole: bytes, pos: int, now: float) -> tuple[int, bytes] | None:
        """The run of whole events from `pos` that are all shaped like the learnt one,
        accounted for at once (one chunk and one token each, the block's clock for all): where
        it stops, and its bytes to relay. None when the event at `pos` is something else."""
        assert self._run is not None and self._shape is not None
        prefix, suffix, out_prefix, out_suffix = self._shape
        run = self._run.match(whole, pos)
        if run is None or run["p"] != prefix or run["s"] != suffix:
            return None
        stop = run.end()
        taken = whole if pos == 0 and stop == len(whole) else whole[pos:stop]
        if not _plain_bytes(taken):
            return None
        self._plain_tokens(taken.count(b"\n") >> 1, now)  # no line break but the events' ends
        if self._capture_text:
            # A text holds no quote, and each suffix starts with one: the joins are exactly
            # the events' ends. Escaped texts put together are their texts put together.
            texts = taken[len(prefix) : -len(suffix) - 2].split(suffix + b"\n\n" + prefix)
            self._captured(b"".join(texts))
        if not self._rewrite:
            return stop, taken
        # Each event's only "\n\n" ends it, so these replace exactly each event's suffix and
        # (after the first) prefix.
        out = taken.replace(suffix + b"\n\n", out_suffix)
        if prefix != out_prefix:
            out = out_prefix + out[len(prefix) :].replace(b"\n\n" + prefix, b"\n\n" + out_prefix)
        return stop, out

    def _shaped(self, event: bytes, now: float, ended: bool = False) -> bytes | None:
        """An event that is the learnt bytes around a plain text: accounted for as the event
        path would (one chunk, one token) and relayed. None when it is anything else: the text
        is not a plain one (`_TEXT`, `_plain_bytes`). `ended`: the event's blank line is on it
        (and nothing else)."""
        if self._splitters:
            return None
        prefix, suffix, out_prefix, out_suffix = self._shape  # type: ignore[misc]
        if ended:
            suffix += b"\n\n"
        end = len(event) - len(suffix)
        if end <= len(prefix) or not (event.startswith(prefix) and event.endswith(suffix)):
            return None
        text = event[len(prefix) : end]
        assert self._text is not None
        if self._text.fullmatch(text) is None or not _plain_bytes(text):
            return None
        self._plain_tokens(1, now)
        if self._capture_text:
            self._captured(text)
        if ended and not self._rewrite:
            return event
        return out_prefix + text + out_suffix

    def _captured(self, text: bytes) -> None:
        """Shaped events' text (as escaped in JSON, checked plain) for a sampled answer."""
        assert self.capture is not None
        self.capture.text(0, orjson.loads(b'"' + text + b'"'))

    def _plain_tokens(self, n: int, now: float) -> None:
        """`n` plain token events arrived at `now`: one chunk and one token each, as the event
        path counts them (the first gap since the last token, then none between them)."""
        self.record.chunks += n
        self._token_events += n
        if self._last_token_at is not None:
            self._gaps.append(now - self._last_token_at)
        if n > 1:
            self._gaps.extend([0.0] * (n - 1))
        self._last_token_at = now

    def _choice(self, choice: dict[str, Any], now: float) -> bool:
        record = self.record
        changed = False
        note_finish(record, choice.get("finish_reason"))
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
            # The upstream sent no usage (llama.cpp never does, a broken stream may not have):
            # count what streamed, and estimate the prompt from the request.
            record.completion_tokens = self._token_events
            record.reasoning_tokens = self._reasoning_events
            if record.prompt_tokens == 0 and self._prompt_tokens is not None:
                record.prompt_tokens = self._prompt_tokens()
            record.usage_estimated = True
        elif record.reasoning_tokens == 0 and self._reasoning_events:
            # vLLM reports no reasoning_tokens in usage: one streamed delta is one token.
            record.reasoning_tokens = self._reasoning_events
        record.check_invariants()
