"""A stream's first data event (gateway/serving/first_event.py): read past comments in the
dispatching task (`first_block`), or checked and begun in the callback that completes it
(`FirstEvent`)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.errors import AttemptError
from gateway.serving.first_event import FirstEvent, first_block


class Blocks:
    """The reading side of a reply (`read_some`), fed scripted blocks as a socket would."""

    def __init__(self, *blocks: bytes):
        self.blocks = list(blocks)
        self.released = False

    async def read_some(self) -> bytes:
        return self.blocks.pop(0) if self.blocks else b""

    def release(self) -> None:
        self.released = True


@pytest.mark.parametrize("crlf", [False, True])
def test_first_block_reads_past_comments_to_the_first_data_event(crlf: bool) -> None:
    """Comments (whole, or cut anywhere) are not a first event; reading stops at the end of the
    first data event, however it is cut, and not later."""
    blocks = [
        b": OPENROUTER PROC",
        b"ESSING\n\n: OPENROUTER PROCESSING\n",
        b"\nda",
        b'ta: {"choices": []}\n',
        b"\n",
        b'data: {"later": 1}\n\n',
    ]
    if crlf:
        blocks = [b.replace(b"\n", b"\r\n") for b in blocks]
    reply = Blocks(*blocks)
    first = asyncio.run(first_block(reply))  # type: ignore[arg-type]
    assert first == b"".join(blocks[:5])
    assert reply.blocks == blocks[5:]


def test_first_block_of_a_stream_that_ends_at_once() -> None:
    reply = Blocks()
    with pytest.raises(AttemptError) as caught:
        asyncio.run(first_block(reply))  # type: ignore[arg-type]
    assert caught.value.outcome == "stream_error" and reply.released


class Piped:
    """The callback side of a reply (`pipe`): the test calls what was piped, as a socket would."""

    def pipe(self, on_data: Any, on_end: Any, on_error: Any) -> None:
        self.on_data, self.on_end, self.on_error = on_data, on_end, on_error


def first_event(check: Any = orjson.loads) -> tuple[Piped, FirstEvent, list[tuple[bytes, Any]]]:
    begun: list[tuple[bytes, Any]] = []
    reply = Piped()
    waiting = FirstEvent(
        reply,  # type: ignore[arg-type]
        lambda first: check(first[first.index(b"data:") + 5 :]),
        lambda first, parsed: begun.append((first, parsed)),
    )
    return reply, waiting, begun


@pytest.mark.parametrize("crlf", [False, True])
def test_the_first_event_begins_the_stream_in_the_callback_that_completes_it(crlf: bool) -> None:
    """Waited for in the connection's callbacks: comments and a cut event begin nothing; the
    block that completes the first data event begins the stream there and then, with everything
    that came (the head's `begin`), before the dispatching task has run again."""

    async def main() -> None:
        reply, waiting, begun = first_event()
        blocks = [b": OPENROUTER PROC", b"ESSING\n\n", b'data: {"choices"', b": []}\n\n"]
        if crlf:
            blocks = [b.replace(b"\n", b"\r\n") for b in blocks]
        for block in blocks[:3]:
            reply.on_data(block)
        assert begun == [] and not waiting.done.done()
        reply.on_data(blocks[3])
        assert begun == [(b"".join(blocks), {"choices": []})]  # no await in between
        assert waiting.done.result() == begun[0]
        reply.on_data(b'data: {"later": 1}\n\n')  # the head's from now on: not seen here
        reply.on_end()
        assert len(begun) == 1

    asyncio.run(main())


def test_a_first_event_that_fails_its_check_begins_nothing() -> None:
    """The check's AttemptError is the attempt's (dispatch moves on): nothing reached the client,
    and what the closed attempt still sends is ignored."""

    def check(payload: bytes) -> Any:
        raise AttemptError("upstream_error", "upstream answered 200 with an error")

    async def main() -> None:
        reply, waiting, begun = first_event(check)
        reply.on_data(b'data: {"error": "no"}\n\n')
        reply.on_error(OSError("closed by the gateway"))
        with pytest.raises(AttemptError) as caught:
            await waiting.done
        assert caught.value.outcome == "upstream_error" and begun == []

    asyncio.run(main())


def test_a_stream_that_ends_before_or_inside_its_first_event() -> None:
    """No byte at all: the attempt's stream_error. A first event cut off by the end is checked as
    it came (as `first_block` reads it)."""

    async def main() -> None:
        reply, waiting, begun = first_event()
        reply.on_end()
        with pytest.raises(AttemptError) as caught:
            await waiting.done
        assert caught.value.outcome == "stream_error" and begun == []
        reply, waiting, begun = first_event()
        reply.on_data(b'data: {"choices": []}')
        reply.on_end()
        assert begun == [(b'data: {"choices": []}', {"choices": []})]

    asyncio.run(main())
