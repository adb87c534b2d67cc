"""The relay's HTTP client against real sockets: loopback servers that answer with exact bytes."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trustme

from gateway.errors import ReplyTimeout, WireError
from gateway.serving.reply import Reply
from gateway.serving.wire import Origin, Wire, head_block

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEAD = head_block({"Content-Type": "application/json", "Authorization": "Bearer k"})


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(head, body) of one request with a Content-Length."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


@contextlib.asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[tuple[Origin, list[int]]]:
    """A loopback server running `handler` per connection; yields its origin and the client
    ports of the connections it accepted (one per new connection)."""
    peers: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername")[1])
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client left, or the test is over
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield Origin.parse(f"http://127.0.0.1:{port}/v1"), peers
    finally:
        srv.close()


def answer(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"".join(extra)
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


async def keep_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        head, body = await read_request(reader)
        path = head.split(b" ")[1]
        writer.write(answer(b'{"path":"%s","got":%d}' % (path, len(body))))
        await writer.drain()


async def test_requests_reuse_a_kept_connection_and_carry_the_headers() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            seen.append(head)
            writer.write(answer(body))
            await writer.drain()

    async with server(handler) as (origin, peers):
        wire = Wire(5.0)
        for i in range(3):
            reply = await wire.post(origin, "/chat/completions", HEAD, b'{"n":%d}' % i)
            assert reply.status == 200 and await reply.read() == b'{"n":%d}' % i
            reply.release()
        await wire.close()
    assert len(peers) == 1  # one connection for all three
    first = seen[0].decode()
    assert first.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{origin.port}\r\n" in first
    assert "Authorization: Bearer k\r\n" in first and "Content-Length: 7\r\n" in first


async def test_a_connection_the_server_closed_is_replaced_without_losing_the_request() -> None:
    served = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await read_request(reader)
        served += 1
        # An answer, then the server drops the connection without saying so (keep-alive
        # expiry); the client still holds it as idle.
        writer.write(answer(b"{}"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()

    async with server(handler) as (origin, peers):
        wire = Wire(5.0)
        reply = await wire.post(origin, "/x", HEAD, b"{}")
        assert await reply.read() == b"{}"
        await asyncio.sleep(0.2)  # the server has closed the kept connection by now
        reply = await wire.post(origin, "/x", HEAD, b"{}")
        assert reply.status == 200 and await reply.read() == b"{}"
        await wire.close()
    assert served == 2 and len(peers) == 2


async def test_chunked_gzip_and_until_close_bodies() -> None:
    packed = gzip.compress(b'{"zipped":true}')

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        path = head.split(b" ")[1]
        if path.endswith(b"/chunked"):
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for part in (b"data: 1\n\n", b"data: 2\n\n"):
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        elif path.endswith(b"/gzip"):
            writer.write(answer(packed, b"Content-Encoding: gzip\r\n"))
        else:  # no length: the body ends when the connection does
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil-close")
            await writer.drain()
            writer.close()
        await writer.drain()

    async with server(handler) as (origin, _):
        wire = Wire(5.0)
        reply = await wire.post(origin, "/chunked", HEAD, b"")
        assert await reply.read() == b"data: 1\n\ndata: 2\n\n"
        reply = await wire.post(origin, "/gzip", HEAD, b"")
        assert await reply.read() == b'{"zipped":true}'
        reply = await wire.post(origin, "/eof", HEAD, b"")
        assert await reply.read() == b"until-close"
        await wire.close()


async def test_informational_answers_are_skipped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + answer(b"{}"))
        await writer.drain()
        await reader.read()

    async with server(handler) as (origin, _):
        wire = Wire(5.0)
        reply = await wire.post(origin, "/x", HEAD, b"")
        assert reply.status == 200 and "link" not in reply.headers
        assert await reply.read() == b"{}"
        await wire.close()


async def test_failures_are_wire_errors() -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await read_request(reader)
        if head.startswith(b"POST /v1/garbage"):
            writer.write(b"this is not HTTP\r\n\r\n")
        else:  # promises 100 bytes, sends 5, hangs up
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello")
        await writer.drain()
        writer.transport.abort()

    async with server(broken) as (origin, _):
        wire = Wire(5.0)
        with pytest.raises(WireError, match="not valid HTTP"):
            await wire.post(origin, "/garbage", HEAD, b"")
        reply = await wire.post(origin, "/short", HEAD, b"")
        with pytest.raises(WireError, match="closed the connection"):
            await reply.read()
        await wire.close()
    # nobody listens there any more
    with pytest.raises(WireError, match="cannot connect"):
        await Wire(5.0).post(origin, "/x", HEAD, b"")


async def test_pipe_hands_on_buffered_then_live_blocks_and_ends_once() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nfirs\r\n")
            await writer.drain()
            await release.wait()
            for part in (b"one", b"two"):
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async with server(handler) as (origin, peers):
        wire = Wire(5.0)
        reply = await wire.post(origin, "/stream", HEAD, b"")
        while not reply._chunks:  # the first block is buffered before anyone pipes
            await asyncio.sleep(0.01)
        got: list[bytes] = []
        ended = asyncio.get_running_loop().create_future()
        errors: list[BaseException] = []
        reply.pipe(got.append, lambda: ended.set_result(len(got)), errors.append)
        assert got == [b"firs"]
        release.set()
        assert await asyncio.wait_for(ended, 5) == 3
        assert got == [b"firs", b"one", b"two"] and not errors
        # read to its end: the connection serves the next request
        again = await wire.post(origin, "/stream", HEAD, b"")
        assert await again.read() == b"firsonetwo"
        await wire.close()
    assert len(peers) == 1


async def test_a_piped_gzip_stream_is_handed_on_decoded_and_not_after_its_end() -> None:
    """Blocks go straight to the piped callback only as they came: a compressed stream's are
    decoded first; once the reply ended, nothing more is handed on."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        packer = zlib.compressobj(wbits=31)
        for part in (b"data: one\n\n", b"data: two\n\n"):
            packed = packer.compress(part) + packer.flush(zlib.Z_SYNC_FLUSH)
            writer.write(b"%x\r\n%s\r\n" % (len(packed), packed))
            await writer.drain()
            await asyncio.sleep(0.01)
        packed = packer.flush()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(packed), packed))
        await writer.drain()

    async with server(handler) as (origin, _):
        wire = Wire(5.0)
        reply = await wire.post(origin, "/stream", HEAD, b"")
        got: list[bytes] = []
        ended = asyncio.get_running_loop().create_future()
        reply.pipe(got.append, lambda: ended.set_result(None), ended.set_exception)
        assert reply.piped is None  # decoded first
        await asyncio.wait_for(ended, 5)
        assert b"".join(got) == b"data: one\n\ndata: two\n\n"
        assert reply.piped is None
        await wire.close()


async def test_a_piped_reply_hands_blocks_straight_on_until_it_fails() -> None:
    """A plain stream's blocks go straight to the piped callback; once the reply failed (its
    connection closed), no more do."""
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b"one", b"two"):
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            await release.wait()

    async with server(handler) as (origin, _):
        wire = Wire(5.0)
        reply = await wire.post(origin, "/stream", HEAD, b"")
        got: list[bytes] = []
        errors: list[BaseException] = []
        reply.pipe(got.append, lambda: None, errors.append)
        assert reply.piped is not None
        while not got:
            await asyncio.sleep(0.01)
        reply.fail(ReplyTimeout("no data for 1s"))
        assert reply.piped is None and len(errors) == 1
        release.set()
        await asyncio.sleep(0.05)
        assert got == [b"one"]
        await wire.close()


async def test_a_failed_reply_reports_once_and_its_connection_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nfirs\r\n")
            await writer.drain()

    async with server(handler) as (origin, peers):
        wire = Wire(5.0)
        reply: Reply = await wire.post(origin, "/stream", HEAD, b"")
        errors: list[BaseException] = []
        reply.pipe(lambda b: None, lambda: errors.append(AssertionError("ended")), errors.append)
        reply.fail(ReplyTimeout("no data for 1s"))
        reply.fail(ReplyTimeout("again"))
        assert len(errors) == 1 and isinstance(errors[0], TimeoutError)
        second = await wire.post(origin, "/stream", HEAD, b"")
        second.release()  # not read to its end: closed, not kept
        third = await wire.post(origin, "/stream", HEAD, b"")
        third.close()
        await wire.close()
    assert len(peers) == 3


async def test_tls_origins_are_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """https upstreams (API providers) are spoken over TLS, and their certificate is checked
    against the system's trust store: a server the store does not trust is refused."""
    ca = trustme.CA()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(served)
    srv = await asyncio.start_server(keep_answering, "127.0.0.1", 0, ssl=served)
    origin = Origin.parse(f"https://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1")
    try:
        with pytest.raises(WireError, match="cannot connect"):
            await Wire(5.0).post(origin, "/models", HEAD, b"")
        bundle = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(bundle))
        monkeypatch.setenv("SSL_CERT_FILE", str(bundle))  # read when the context is made
        wire = Wire(5.0)
        reply = await wire.post(origin, "/chat/completions", HEAD, b"{}")
        assert reply.status == 200
        assert await reply.read() == b'{"path":"/v1/chat/completions","got":2}'
        await wire.close()
    finally:
        srv.close()


async def test_sent_runs_once_written_before_the_answer_and_a_failure_closes() -> None:
    """`sent` is what the upstream need not wait for: it runs once the request is written, while
    the server has not answered (this server answers a request only once `sent` has run for
    it). When it fails, the request's connection is closed rather than kept with an answer
    nobody reads."""
    bodies: list[bytes] = []
    calls: list[int] = []  # how many requests the server had read when `sent` ran
    more = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            _, body = await read_request(reader)
            bodies.append(body)
            mine = len(bodies)
            while len(calls) < mine:  # no answer before `sent` has run for this request
                more.clear()
                await asyncio.wait_for(more.wait(), 5)
            writer.write(answer(body))
            await writer.drain()

    def sent() -> None:
        calls.append(len(bodies))
        more.set()

    def failing() -> None:
        sent()
        raise RuntimeError("a fault in the deferred work")

    async with server(handler) as (origin, peers):
        wire = Wire(5.0)
        reply = await wire.post(origin, "/x", HEAD, b'{"n":1}', sent=sent)
        assert reply.status == 200 and await reply.read() == b'{"n":1}'
        reply.release()
        assert calls == [0]  # once, before the server had even read the request
        with pytest.raises(RuntimeError):
            await wire.post(origin, "/x", HEAD, b'{"n":2}', sent=failing)
        reply = await wire.post(origin, "/x", HEAD, b'{"n":3}', sent=sent)
        assert await reply.read() == b'{"n":3}'
        await wire.close()
    assert len(calls) == 3  # once a request, the failed one too
    assert len(peers) == 2  # the failed request's connection was not used again
