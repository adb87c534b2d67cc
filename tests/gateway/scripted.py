"""A scripted upstream: a loopback HTTP server that answers each request with bytes set by the
test, framed exactly as asked.

The fault-injecting fake (`plumbline_kit.fakes.upstream`) is a well-behaved aiohttp server: its
streams are chunked and always end with a finish reason and `[DONE]`. The probes of an upstream
that ends a stream cleanly at the HTTP level but before it finished (an exact `Content-Length`,
or HTTP/1.0 with the connection's close as the end), that sends an error or garbage as its first
event, or that holds a stream open until the test lets it go, need the bytes on the wire under
the test's control: this server writes the answers it is given and nothing else.

Each answer is a list of parts written in order; a `threading.Event` among them holds the
answer there until it is set (bounded by `HOLD_S`). An HTTP/1.0 answer closes its connection
when written; the others keep it open for the next request, as a keep-alive server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import orjson

Part = bytes | threading.Event
HOLD_S = 30.0  # the longest a held answer waits for its event


@dataclass
class Answer:
    parts: list[Part]
    close: bool = False  # close the connection once written (HTTP/1.0, `Connection: close`)


def chunk(text: str, *, finish: str | None = None, model: str = "fake-model") -> bytes:
    """One chat.completion.chunk event carrying `text` (and a finish reason, if given)."""
    event = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


def text_chunk(text: str, *, finish: str | None = None, model: str = "fake-model") -> bytes:
    """One text_completion event (`/v1/completions`)."""
    event = {
        "id": "cmpl-scripted",
        "object": "text_completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _head(status: int, headers: dict[str, str], version: str = "1.1") -> bytes:
    lines = [f"HTTP/{version} {status} X"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def sse(events: Sequence[bytes], framing: str = "content_length", status: int = 200) -> Answer:
    """A stream of `events` framed as `framing`: `content_length` (the exact length, the
    connection kept), `http10` (HTTP/1.0, the close ends it) or `chunked`."""
    body = b"".join(events)
    kind = {"content-type": "text/event-stream"}
    if framing == "content_length":
        return Answer([_head(status, {**kind, "content-length": str(len(body))}), body])
    if framing == "http10":
        return Answer([_head(status, kind, "1.0"), body], close=True)
    assert framing == "chunked", framing
    parts = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    return Answer([_head(status, {**kind, "transfer-encoding": "chunked"}), *parts, b"0\r\n\r\n"])


def held(events: Sequence[bytes], until: threading.Event, rest: Sequence[bytes]) -> Answer:
    """A chunked stream: `events`, then nothing until `until` is set, then `rest` and its end."""
    head = _head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"})
    framed = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    after = [b"%x\r\n%s\r\n" % (len(e), e) for e in rest]
    return Answer([head, *framed, until, *after, b"0\r\n\r\n"])


def error(status: int, body: bytes) -> Answer:
    """A whole error answer: `status` with `body` as JSON."""
    head = _head(status, {"content-type": "application/json", "content-length": str(len(body))})
    return Answer([head, body])


@dataclass
class ScriptedUpstream:
    """The running server: its base URL, the answers still to give, the requests it read."""

    url: str
    answers: list[Answer] = field(default_factory=list)
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def script(self, *answers: Answer) -> None:
        self.answers.extend(answers)


async def _request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return head, body


async def _serve(
    upstream: ScriptedUpstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while (request := await _request(reader)) is not None:
            upstream.requests.append(request)
            answer = upstream.answers.pop(0) if upstream.answers else error(404, b"{}")
            for part in answer.parts:
                if isinstance(part, threading.Event):
                    await asyncio.to_thread(part.wait, HOLD_S)
                    continue
                writer.write(part)
                await writer.drain()
            if answer.close:
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


@contextlib.contextmanager
def scripted_upstream() -> Iterator[ScriptedUpstream]:
    """Run a scripted upstream on a free loopback port, in a thread; stop it on exit."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, ScriptedUpstream] = {}
    stop = asyncio.Event()

    async def main() -> None:
        state = ScriptedUpstream("")
        server = await asyncio.start_server(
            lambda r, w: _serve(state, r, w), "127.0.0.1", 0, reuse_address=True
        )
        port = server.sockets[0].getsockname()[1]
        state.url = f"http://127.0.0.1:{port}"
        holder["state"] = state
        ready.set()
        async with server:
            await stop.wait()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the scripted upstream did not start")
    try:
        yield holder["state"]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
