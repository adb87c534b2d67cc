"""A stream's first data event, or a whole answer's head: what dispatch waits for before an
attempt is the client's (gateway/serving/dispatch.py).

`validate` fails an attempt whose 200 is not what was asked for (not JSON, an error, no
choices) while fallback is still possible. `Scan` finds where a stream's first data event is
whole (comments and keep-alives before it, like OpenRouter's `: OPENROUTER PROCESSING`, are not
a first byte); `first_block` reads up to it in the dispatching task, `FirstEvent` in the
connection's callbacks (a stream with a head: checked and handed on in the callback that brings
it). `Exchange` is how far one attempt's exchange got.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import AttemptError
from gateway.serving.call import Call
from gateway.serving.reply import Reply
from gateway.serving.upstream import Opened

log = logging.getLogger("plumbline")


@dataclass(slots=True)
class Exchange:
    """What one attempt's exchange got to before it ended (for closing and for its outcome)."""

    resp: Reply | None = None
    answered: bool = False  # a whole answer's headers came: a timeout now is the body's
    opened: Opened | None = None  # accepted (a stream with a head: begun, the client's now)


class FirstEvent:
    """A stream's first data event, waited for in the upstream connection's callbacks rather
    than in the dispatching task: checked (`check` raises AttemptError) and handed on (`begin`)
    in the callback that completes it, so that nothing waits for the task to wake between the
    event's arrival and the client's write. `done` is the (first block, its JSON), or the
    attempt's error; blocks after a failed check are the closed attempt's, ignored."""

    __slots__ = ("done", "_check", "_begin", "_chunks", "_scan")

    def __init__(
        self,
        resp: Reply,
        check: Callable[[bytes], Any],
        begin: Callable[[bytes, Any], None],
    ):
        self.done: asyncio.Future[tuple[bytes, Any]] = asyncio.get_running_loop().create_future()
        self._check = check
        self._begin = begin
        self._chunks: list[bytes] = []
        self._scan = Scan()
        resp.pipe(self._data, self._end, self._error)

    def _data(self, block: bytes) -> None:
        if self.done.done():
            return
        self._chunks.append(block)
        if self._scan.whole(block):
            self._complete(b"".join(self._chunks))

    def _complete(self, first: bytes) -> None:
        try:
            parsed = self._check(first)
        except AttemptError as e:
            self.done.set_exception(e)
            return
        try:
            self._begin(first, parsed)  # the stream's from here: the head takes the pipe
        except Exception as e:  # a fault of ours before the head went: the request fails
            log.exception("beginning a stream failed")
            self.done.set_exception(e)
            return
        self.done.set_result((first, parsed))

    def _end(self) -> None:
        if self.done.done():
            return
        if self._chunks:  # the stream ended inside its first event: checked as it came
            self._complete(b"".join(self._chunks))
            return
        self.done.set_exception(
            AttemptError("stream_error", "upstream closed the stream before any event")
        )

    def _error(self, error: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(error)


def first_data(block: bytes) -> int:
    """Where the first data line of `block` starts (SSE: a line that begins with `data:`), -1
    if none does; comments and other fields before it are skipped."""
    at = 0 if block.startswith(b"data:") else block.find(b"\ndata:") + 1
    return at if at > 0 or block.startswith(b"data:") else -1


def validate(call: Call, first: bytes, native: bool = False) -> Any:
    """A 200 that is not what was asked for fails the attempt while fallback is still possible.
    Returns the JSON read (a whole answer's, a stream's first event)."""
    if call.stream:
        start = first_data(first)
        end = first.find(b"\n", start) if start >= 0 else -1
        payload = first[start + 5 : end if end >= 0 else None].strip() if start >= 0 else b""
        if payload == b"[DONE]":
            return None
    else:
        payload = first
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise AttemptError("malformed", "upstream sent a response that is not valid JSON") from None
    if not isinstance(obj, dict):
        raise AttemptError("malformed", "upstream sent JSON that is not an object")
    if isinstance(obj.get("error"), dict | str):  # a 200 that is an error (OpenRouter does this)
        raise AttemptError("upstream_error", "upstream answered 200 with an error")
    if native:
        if "type" not in obj and obj.get("object") != "response":
            raise AttemptError("malformed", "upstream sent no Responses API event")
    elif "choices" not in obj and "data" not in obj:
        raise AttemptError("malformed", "upstream sent JSON without choices")
    elif not call.stream and any(
        isinstance(c, dict) and c.get("finish_reason") == "error" for c in obj.get("choices") or ()
    ):
        raise AttemptError("upstream_error", "upstream answered 200 with a choice that failed")
    return obj


class Scan:
    """A stream's blocks, one after another, until its first data event is whole: comments and
    keep-alives before it (OpenRouter's `: OPENROUTER PROCESSING`) are not a first byte."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = b""

    def whole(self, block: bytes) -> bool:
        """With `block`, the first data event is in hand."""
        held = self.held + block
        if b"\r" in held:
            held = held.replace(b"\r\n", b"\n")
        start = first_data(held)
        if start >= 0 and b"\n\n" in held[start:]:
            return True
        # nothing of a data event yet: keep only a partial line
        self.held = held if start >= 0 else held[held.rfind(b"\n") + 1 :]
        return False


async def first_block(resp: Reply) -> bytes:
    """Read until the first whole data event is in hand (or the stream ends; `Scan`)."""
    chunks: list[bytes] = []
    scan = Scan()
    while block := await resp.read_some():
        chunks.append(block)
        if scan.whole(block):
            break
    else:
        if not chunks:
            resp.release()
            raise AttemptError("stream_error", "upstream closed the stream before any event")
    return b"".join(chunks)
