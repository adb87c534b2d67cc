"""The outlet runs the server's `send` in place and falls back to a task only when it waits."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from gateway.serving.outlet import Direct, Outlet


class Sender:
    """An ASGI `send` that waits while `open` is clear, as uvicorn's does when the client's
    socket buffer is full."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.sent: list[tuple[bytes, bool]] = []
        self.fail = False

    async def __call__(self, message: dict[str, Any]) -> None:
        if not self.open.is_set():
            await self.open.wait()
        if self.fail:
            raise RuntimeError("the client is gone")
        self.sent.append((message["body"], message["more_body"]))


async def test_writes_in_place_then_queue_behind_a_waiting_send() -> None:
    sender = Sender()
    reading = ["on"]
    outlet = Outlet(sender, lambda: reading.append("paused"), lambda: reading.append("resumed"))
    outlet.write(b"a")
    assert sender.sent == [(b"a", True)]  # written at once, no task
    sender.open.clear()
    outlet.write(b"b")
    outlet.write(b"c")
    outlet.write(b"", more=False)
    assert sender.sent == [(b"a", True)] and reading == ["on", "paused"]
    sender.open.set()
    await outlet.drained()
    assert sender.sent == [(b"a", True), (b"b", True), (b"c", True), (b"", False)]
    assert reading == ["on", "paused", "resumed"] and outlet.closed
    outlet.write(b"late")  # after the last block: dropped
    assert len(sender.sent) == 4


async def test_a_failing_send_is_kept_as_the_error() -> None:
    sender = Sender()
    outlet = Outlet(sender, lambda: None, lambda: None)
    sender.fail = True
    outlet.write(b"a")
    assert isinstance(outlet.error, RuntimeError)
    sender.open.clear()
    outlet2 = Outlet(sender, lambda: None, lambda: None)
    outlet2.write(b"b")
    sender.open.set()
    await outlet2.drained()
    assert isinstance(outlet2.error, RuntimeError) and sender.sent == []


async def test_a_send_that_returns_another_awaitable_is_awaited() -> None:
    """ASGI types `send` as returning an Awaitable, not always a coroutine: a future that is
    done at once is written in place, one still pending makes the outlet wait for it."""
    loop = asyncio.get_running_loop()
    sent: list[bytes] = []
    pending: list[asyncio.Future[None]] = []

    def send(message: dict[str, Any]) -> asyncio.Future[None]:
        sent.append(message["body"])
        done = loop.create_future()
        if message["body"] == b"slow":
            pending.append(done)
        else:
            done.set_result(None)
        return done

    reading: list[str] = []
    outlet = Outlet(send, lambda: reading.append("paused"), lambda: reading.append("resumed"))
    outlet.write(b"a")
    outlet.write(b"slow")
    outlet.write(b"b")
    assert sent == [b"a", b"slow"] and reading == ["paused"]
    pending[0].set_result(None)
    await outlet.drained()
    assert sent == [b"a", b"slow", b"b"] and reading == ["paused", "resumed"]


async def test_writes_go_on_after_a_waiting_send_was_cancelled() -> None:
    """A send cancelled while it waited (the server stopping) ends that wait, not the outlet:
    what is written next is sent."""
    sender = Sender()
    outlet = Outlet(sender, lambda: None, lambda: None)
    sender.open.clear()
    outlet.write(b"a")
    await asyncio.sleep(0)  # the task finishing that send waits in it
    waiting = outlet._task
    assert waiting is not None
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await outlet.drained()
    assert outlet.error is None and sender.sent == [] and outlet._task is None
    sender.open.set()
    outlet.write(b"b")
    outlet.write(b"", more=False)
    assert sender.sent == [(b"b", True), (b"", False)] and outlet.closed


class Writer:
    """A server's direct writer of body blocks (`BodyWriter`): takes blocks while `takes`."""

    def __init__(self) -> None:
        self.takes = True
        self.written: list[bytes] = []

        self.corks: list[str] = []

    def __call__(self, data: bytes) -> bool:
        if not self.takes:
            return False
        self.written.append(data)
        return True

    def cork(self) -> Any:
        self.corks.append("corked")
        return lambda: self.corks.append("uncorked")

    def direct(self) -> Direct:
        return Direct(self, self.cork)


async def test_blocks_go_to_the_direct_writer_and_the_last_one_to_send() -> None:
    sender, writer = Sender(), Writer()
    outlet = Outlet(sender, lambda: None, lambda: None, writer.direct())
    outlet.write(b"a")
    outlet.write(b"b")
    assert writer.written == [b"a", b"b"] and sender.sent == []
    writer.takes = False  # the client's socket is full, say: the awaited way
    outlet.write(b"c")
    writer.takes = True
    outlet.write(b"", more=False)  # the server ends the response in its `send`
    assert writer.written == [b"a", b"b"] and sender.sent == [(b"c", True), (b"", False)]
    assert outlet.closed


async def test_the_direct_writer_waits_behind_a_waiting_send() -> None:
    """While a send waits, later blocks queue behind it even where the writer would take them,
    so the client gets them in order; once it is done they go straight again."""
    sender, writer = Sender(), Writer()
    reading: list[str] = []
    outlet = Outlet(
        sender, lambda: reading.append("paused"), lambda: reading.append("resumed"), writer.direct()
    )
    writer.takes = False
    sender.open.clear()
    outlet.write(b"a")  # declined, then the send waits
    writer.takes = True
    outlet.write(b"b")
    assert writer.written == [] and reading == ["paused"]
    sender.open.set()
    await outlet.drained()
    assert sender.sent == [(b"a", True), (b"b", True)] and reading == ["paused", "resumed"]
    outlet.write(b"c")
    assert writer.written == [b"c"]


async def test_nothing_is_written_after_the_send_failed() -> None:
    sender, writer = Sender(), Writer()
    outlet = Outlet(sender, lambda: None, lambda: None, writer.direct())
    writer.takes, sender.fail = False, True
    outlet.write(b"a")
    assert isinstance(outlet.error, RuntimeError)
    writer.takes = True
    outlet.write(b"b")
    assert writer.written == []


async def test_the_outlet_corks_where_the_server_offers_it_and_no_send_waits() -> None:
    sender, writer = Sender(), Writer()
    outlet = Outlet(sender, lambda: None, lambda: None, writer.direct())
    uncork = outlet.corked()
    assert writer.corks == ["corked"]
    uncork()
    assert writer.corks == ["corked", "uncorked"]
    writer.takes = False
    sender.open.clear()
    outlet.write(b"a")  # a send waits: what follows must queue behind it, not be gathered
    outlet.corked()()
    assert writer.corks == ["corked", "uncorked"]
    sender.open.set()
    await outlet.drained()
    Outlet(sender, lambda: None, lambda: None).corked()()  # no cork offered: nothing to do
