"""The direct writes (gateway/edge/direct.py): a streamed block written as uvicorn's `send`
writes it, and a corked transport that writes a stream's head and first blocks as one."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.edge import direct


class Socket(asyncio.Transport):
    """A client's transport that keeps what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.writes = 0
        self.closed = False

    def write(self, data: Any) -> None:
        self.data += bytes(data)
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def _cycle(method: str = "POST") -> tuple[Any, Socket]:
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    transport = Socket()
    scope: Any = {"type": "http", "method": method, "http_version": "1.1"}
    log = logging.getLogger("test")
    cycle = RequestResponseCycle(
        scope, transport, FlowControl(transport), log, log, False, [], asyncio.Event(), False,
        True, lambda: None,
    )  # fmt: skip
    return cycle, transport


async def test_the_body_writer_writes_only_where_send_would_only_write() -> None:
    cycle, transport = _cycle()
    write = direct.body_writer(cycle, cycle.flow)
    assert not write(b"early")  # the head has not gone
    await cycle.send({"type": "http.response.start", "status": 200, "headers": []})
    head = transport.data
    assert write(b"data: a\n\n") and write(b"")
    assert transport.data == head + b"9\r\ndata: a\n\n\r\n"  # framed as `send` frames it
    cycle.flow.pause_writing()
    assert not write(b"b")  # the socket is full: `send` would wait
    cycle.flow.resume_writing()
    await cycle.send({"type": "http.response.body", "body": b"b", "more_body": True})
    assert transport.data.endswith(b"9\r\ndata: a\n\n\r\n1\r\nb\r\n")
    await cycle.send({"type": "http.response.body", "body": b"", "more_body": False})
    assert not write(b"late") and transport.data.endswith(b"0\r\n\r\n")
    cycle.disconnected = True
    assert not write(b"gone")

    sized, transport = _cycle()
    write = direct.body_writer(sized, sized.flow)
    await sized.send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    assert not write(b"ab")  # not chunked: `send` counts the length


async def test_a_corked_transport_writes_the_head_and_blocks_as_one() -> None:
    cycle, transport = _cycle()
    write, cork = direct.body_writer(cycle, cycle.flow), direct.corker(cycle)
    uncork = cork()
    inner = cork()  # a cork within a cork gathers nothing of its own
    await cycle.send({"type": "http.response.start", "status": 200, "headers": []})
    inner()
    assert transport.writes == 0  # still the outer cork's
    assert write(b"data: a\n\n")
    assert transport.writes == 0 and not transport.data
    uncork()
    assert transport.writes == 1
    assert transport.data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.data.endswith(b"transfer-encoding: chunked\r\n\r\n9\r\ndata: a\n\n\r\n")
    assert write(b"b") and transport.writes == 2  # uncorked: at once again
    uncork()  # twice: nothing more
    assert transport.writes == 2

    # An answer that closes its connection writes what it gathered before closing.
    cycle, transport = _cycle()
    cycle.keep_alive = False
    uncork = direct.corker(cycle)()
    await cycle.send({"type": "http.response.start", "status": 200, "headers": []})
    await cycle.send({"type": "http.response.body", "body": b"x", "more_body": False})
    assert transport.closed and transport.writes == 1 and transport.data.endswith(b"0\r\n\r\n")
    uncork()
    assert transport.writes == 1
