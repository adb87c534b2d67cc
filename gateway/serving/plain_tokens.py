"""Plain token events: the stream tap's fast path.

Most events of a stream are the same bytes around a different bit of text. Once the event path
(`gateway/serving/tap.py`) has handled one such plain token event, `PlainTokens._learn` remembers
its shape and the tap accounts for the next ones by comparing bytes instead of parsing JSON: a
whole block of them at once (`_block`: its texts cut out and checked, the rest compared), a run of
them with one regular expression (`_plain`), or one at a time (`_shaped`). `bench/tap_speed.py`
measures them; a Hypothesis test (`tests/gateway/serving/test_tap.py`) holds all three to exactly
what the event path does.

Events that carry logprobs differ in one more place: the token's logprobs, after the text. For
them the shape is learnt in two parts around that one JSON value (`_VALUE_HEADS`), and each
event is checked by its bytes, its text and a parse of just the value (`_valued_event`). A shape
that keeps missing anyway (another server's key order, say) is given up for the rest of the
stream (`_missed`): every event then pays only for the event path, not for failed tries first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import repeat
from typing import Any

import orjson

from gateway.ledger.record import Record
from gateway.serving.hooks import AnswerSink
from gateway.serving.reasoning import ThinkSplitter

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
    every stream (rather than a pattern compiled per stream), the caller compares `p` and
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

# What follows the text of a chat delta's and of a completion's plain token event when the
# choice's next key is its logprobs (as vLLM writes them), and the key after those.
_VALUE_HEADS = {True: b'"},"logprobs":', False: b'","logprobs":'}
_VALUE_END = b',"finish_reason":'
# A value with more brackets than this goes to the event path: the parse of the whole event
# nests it deeper than a parse of the value alone, and orjson limits how deep it reads and writes.
_MOST_BRACKETS = 200
# Failed tries after which a shape that misses more often than it hits is given up.
_MOST_MISSES = 8


def _plain_bytes(data: bytes) -> bool:
    """No think tag, and valid UTF-8 (as orjson requires)."""
    # `find`, not `in`: `in` tries the operand as an int first, and fails (twice the cost).
    if data.find(b"think>") >= 0:
        return False
    return data.isascii() or _utf8(data)


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


class PlainTokens:
    """The fast path's state and its takers, a base of `StreamTap` (which owns the event path,
    the record and the token clock these share)."""

    record: Record
    capture: AnswerSink | None
    chat: bool
    _token_key: bytes
    _splitters: dict[int, ThinkSplitter]
    _token_events: int
    _gaps: list[float]
    _last_token_at: float | None
    _model: str | None

    def __init__(self, fast: bool) -> None:
        # Shaped events (see `_learn`); off in tests that compare them with the event path.
        self.fast = fast
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
        # The learnt suffix with the event's end (the blank line) on it.
        self._ends = b""
        # For events that carry logprobs (see `_learn_valued`): the bytes after the value, as
        # received (without and with the blank line) and as relayed; whether the value is
        # relayed written anew by orjson.
        self._valued: tuple[bytes, bytes, bytes, bool] | None = None
        # Events the fast path took, and tries that failed (see `_missed`).
        self._hits = 0
        self._misses = 0
        # What `StreamTap.feed` checks a block of exactly one shaped event against, in place
        # of `_one` (see `_arm_lone`): set only where `_one` would take it alone.
        self._lone: tuple[bytes, bytes, bytes | None, bytes, int, int, re.Pattern[bytes]] | None
        self._lone = None
        self._lone_valued: Callable[[Any, bytes, float], bytes | None] | None = None  # valued

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
        self._ends = suffix + b"\n\n"
        self._rewrite = (prefix, self._ends) != (out_prefix, out_suffix)
        capture = self.capture
        self._capture_text = (
            capture is not None and capture.keep_text and choice.get("index", 0) == 0
        )
        self._text = _CANONICAL_PLAIN_TEXT if encoded else _PLAIN_TEXT
        self._run = _CANONICAL_RUN if encoded else _RUN
        self._learn_valued(choice.get("logprobs"), suffix, out_suffix, encoded)
        self._arm_lone()

    def _arm_lone(self) -> None:
        """What a paced stream's every block is, one shaped event and its blank line, taken by
        `StreamTap.feed` itself (one call per chunk instead of five): the learnt prefix and
        end, the relayed prefix (None: relayed as received) and suffix, the least and most
        (exclusive) bytes such a block holds, and the pattern of a text. Not for events with
        logprobs (`_valued`) nor for a sampled answer's texts, which `_one` and
        `_valued_event` take."""
        assert self._shape is not None and self._text is not None
        prefix, _, out_prefix, out_suffix = self._shape
        if self._valued is not None or self._capture_text:
            return
        least = len(prefix) + len(self._ends)
        relayed = out_prefix if self._rewrite else None
        room = self._room_for_two
        self._lone = (prefix, self._ends, relayed, out_suffix, least, room, self._text)

    def _learn_valued(self, value: Any, suffix: bytes, out_suffix: bytes, encoded: bool) -> None:
        """The learnt event carries logprobs right after its text: remember the bytes after
        them (received and relayed), so that `_valued_event` takes the next such events. Only when
        the bytes between are exactly that value, and relayed as received or as orjson writes
        it. Runs of whole events (`_block`, `_plain`) never match such events, so are off."""
        head = _VALUE_HEADS[self.chat]
        if value is None or not (suffix.startswith(head) and out_suffix.startswith(head)):
            return
        cut, out_cut = suffix.rfind(_VALUE_END), out_suffix.rfind(_VALUE_END)
        if cut <= len(head) or out_cut <= len(head):
            return
        if self._model is not None and b'"model":' in suffix[len(head) : cut]:
            return  # whether the model id is swapped in the bytes would depend on the value
        try:
            if orjson.loads(suffix[len(head) : cut]) != value:
                return
        except orjson.JSONDecodeError:
            return
        relayed = out_suffix[len(head) : out_cut]
        if relayed != (orjson.dumps(value) if encoded else suffix[len(head) : cut]):
            return
        tail = suffix[cut:]
        self._valued = (tail, tail + b"\n\n", out_suffix[out_cut:], encoded)
        self._run = None

    def _block(self, whole: bytes, pos: int, now: float) -> tuple[int, bytes] | None:
        """`_plain` for the common block: from `pos` to the last shaped event's end, nothing
        but shaped events. Checked without a regular expression over the shape's bytes (half
        the cost per event): the texts are cut out at the token key, each loses the bytes that
        follow every text, and the events put back together from them must be the bytes
        received. Then only the texts are checked, all at once (`_all_plain`). None when
        anything else is there; `_plain` then finds the run."""
        assert self._shape is not None
        prefix, suffix, out_prefix, out_suffix = self._shape
        ends = self._ends
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
        out = taken.replace(self._ends, out_suffix)
        if prefix != out_prefix:
            out = out_prefix + out[len(prefix) :].replace(b"\n\n" + prefix, b"\n\n" + out_prefix)
        return stop, out

    def _shaped(
        self, event: bytes, now: float, ended: bool = False, count: bool = True
    ) -> bytes | None:
        """An event that is the learnt bytes around a plain text: accounted for as the event
        path would (one chunk, one token) and relayed. None when it is anything else: the text
        is not a plain one (`_TEXT`, `_plain_bytes`). `ended`: the event's blank line is on it
        (and nothing else). `count`: a miss counts towards giving the shape up (`_missed`); a
        first try that the event path's own try follows does not count, or one event would
        count twice."""
        if self._splitters:
            return None
        taken = self._valued_event if self._valued is not None else self._one
        relayed = taken(event, now, ended)
        if relayed is None and count:
            self._missed()
        return relayed

    def _one(self, event: bytes, now: float, ended: bool) -> bytes | None:
        """`_shaped` for events that carry no logprobs: the learnt bytes around a text."""
        prefix, suffix, out_prefix, out_suffix = self._shape  # type: ignore[misc]
        if ended:
            suffix = self._ends
        end = len(event) - len(suffix)
        if end <= len(prefix) or not (event.startswith(prefix) and event.endswith(suffix)):
            return None
        text = event[len(prefix) : end]
        if not self._plain_text(text):
            return None
        self._plain_tokens(1, now)
        if self._capture_text:
            self._captured(text)
        if ended and not self._rewrite:
            return event
        return out_prefix + text + out_suffix

    def _valued_event(self, event: bytes, now: float, ended: bool) -> bytes | None:
        """`_shaped` for events that carry logprobs: the learnt prefix, a plain text, the
        value's key, one JSON value (parsed: one the event path would not read goes there, to
        fail as it fails) and the learnt tail. The text holds no unescaped quote, so the first
        key after it is the one that ends it."""
        assert self._shape is not None and self._valued is not None
        prefix, _, out_prefix, _ = self._shape
        tail, ended_tail, out_tail, encoded = self._valued
        if ended:
            tail = ended_tail
        end = len(event) - len(tail)
        if not (event.startswith(prefix) and event.endswith(tail)):
            return None
        head = _VALUE_HEADS[self.chat]
        cut = event.find(head, len(prefix), end)
        if cut <= len(prefix):
            return None
        text, value = event[len(prefix) : cut], event[cut + len(head) : end]
        if (
            not self._plain_text(text)
            # Too short to nest that deep, or counted (which costs as much as the rest).
            or (
                len(value) > 2 * _MOST_BRACKETS
                and value.count(b"[") + value.count(b"{") > _MOST_BRACKETS
            )
            # The model id is swapped in the bytes only where it is there once.
            or (self._model is not None and b'"model":' in value)
        ):
            return None
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        self._plain_tokens(1, now)
        if self._capture_text:
            self._captured(text)
        if encoded:
            value = orjson.dumps(parsed)
        elif not self._rewrite:
            return event if ended else event + b"\n\n"
        return out_prefix + text + head + value + out_tail

    def _plain_text(self, text: bytes) -> bool:
        """A plain text (`_TEXT`, `_plain_bytes`); the regular expression only for a text
        that holds what `bytes.translate` finds (an escape, say)."""
        if len(text.translate(None, _ESCAPED_OR_NOT_TEXT)) != len(text):
            assert self._text is not None
            if self._text.fullmatch(text) is None:
                return False
        return _plain_bytes(text)

    def _missed(self) -> None:
        """A failed try: once there have been more than `_MOST_MISSES` of them, and more than
        events taken, the shape is given up for the rest of the stream."""
        self._misses += 1
        if self._misses > _MOST_MISSES and self._misses > self._hits:
            self.fast = False
            self._shape = self._valued = self._lone = self._lone_valued = None
            self._run = self._text = None

    def _captured(self, text: bytes) -> None:
        """Shaped events' text (as escaped in JSON, checked plain) for a sampled answer."""
        assert self.capture is not None
        self.capture.text(0, orjson.loads(b'"' + text + b'"'))

    def _plain_tokens(self, n: int, now: float) -> None:
        """`n` plain token events arrived at `now`: one chunk and one token each, as the event
        path counts them (the first gap since the last token, then none between them)."""
        self.record.chunks += n
        self._hits += n
        self._token_events += n
        if self._last_token_at is not None:
            self._gaps.append(now - self._last_token_at)
        if n > 1:
            self._gaps.extend([0.0] * (n - 1))
        self._last_token_at = now
