"""Plain token events with logprobs, one to a block: the stream tap's one call for each.

A paced stream with logprobs sends each token in a block of its own: one event, the learnt bytes
around a plain text and the token's logprobs (`gateway/serving/plain_tokens.py`,
`PlainTokens._valued_event`). `StreamTap.feed` took it through five calls (`_shaped`,
`_valued_event`, `_plain_text`, `_plain_bytes`, `_plain_tokens`); `lone_valued` makes one
function that does all of it for a stream's learnt shape, with the shape's bytes held in its
closure. It takes exactly the blocks that path took relayed as received (`None` for any other: the
block then goes the way it went), and accounts for them as that path does; a stream whose events
are written anew (`encoded`, `_rewrite`) or whose texts are captured keeps that path.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from gateway.serving.plain_tokens import (
    _ESCAPED_OR_NOT_TEXT,
    _MOST_BRACKETS,
    _VALUE_HEADS,
    PlainTokens,
    _utf8,
)

# A block's relayed bytes, or None where it is not one shaped event with logprobs. The tap is
# an argument, not in the closure: a tap holds its taker, and a taker that held the tap would
# make a reference cycle a stream, freed only by the cyclic collector.
Taker = Callable[["PlainTokens", bytes, float], bytes | None]

# Bytes a text that `translate` alone finds plain holds none of: those no plain text holds
# unescaped, and `>` (so it holds no think tag either).
_NOT_LONE_TEXT = _ESCAPED_OR_NOT_TEXT + b">"


def lone_valued(tap: PlainTokens) -> Taker | None:
    """The taker of `tap`'s (a `StreamTap`'s) one-event blocks with logprobs, for the shape it
    has just learnt; None where its events are not relayed as received (or their texts are
    captured)."""
    valued, shape, text_pattern = tap._valued, tap._shape, tap._text
    if valued is None or shape is None or text_pattern is None:
        return None
    if tap._rewrite or tap._capture_text or valued[3] or tap._splitters:
        return None
    prefix, tail = shape[0], valued[1]  # the tail with the event's blank line
    head = _VALUE_HEADS[tap.chat]
    start, after_tail, after_head = len(prefix), len(tail), len(head)
    room, model = tap._room_for_two, tap._model is not None
    record, gaps, plain_text = tap.record, tap._gaps, text_pattern.fullmatch

    def take(tap: PlainTokens, block: bytes, now: float) -> bytes | None:
        """`_valued_event(block, now, ended=True)` for a block of one event, inlined."""
        size = len(block)
        if size >= room or not (block.startswith(prefix) and block.endswith(tail)):
            return None
        end = size - after_tail
        cut = block.find(head, start, end)
        if cut <= start:
            return None
        text = block[start:cut]
        n = len(text)
        if not (
            (
                len(text.translate(None, _NOT_LONE_TEXT)) == n
                or (plain_text(text) is not None and text.find(b"think>") < 0)
            )
            and (text.isascii() or _utf8(text))
        ):
            return None
        value = block[cut + after_head : end]
        if (
            len(value) > 2 * _MOST_BRACKETS
            and value.count(b"[") + value.count(b"{") > _MOST_BRACKETS
        ) or (model and value.find(b'"model":') >= 0):
            return None
        try:
            orjson.loads(value)  # read as the event path reads it: one it would not goes there
        except orjson.JSONDecodeError:
            return None
        record.chunks += 1
        tap._hits += 1
        tap._token_events += 1
        last = tap._last_token_at
        if last is not None:
            gaps.append(now - last)
        tap._last_token_at = now
        return block

    return take
