"""The floor of our stack: the least a uvicorn + aiohttp proxy can do per request and per chunk.

A bare ASGI app that forwards POST bodies to one upstream with a pooled aiohttp session and
relays the answer block by block: no validation, routing, taps, records or metrics. What our
gateway costs above this is ours; what this costs is the stack's.

    python bench/floor_proxy.py --upstream http://127.0.0.1:PORT --port PORT [--key KEY]

With `--key`, every request must carry `Authorization: Bearer KEY` (one constant-time
comparison; a 401 otherwise), as the gateway and LiteLLM check theirs in the benchmark.

Used by `bench/gateway_perf.py --target floor`.
"""

from __future__ import annotations

import argparse
import hmac
from typing import Any

import aiohttp
import uvicorn


async def lifespan(receive: Any, send: Any, start: Any, stop: Any) -> None:
    """Serve the ASGI lifespan: `start()` at startup, `await stop()` at shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            start()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await stop()
            await send({"type": "lifespan.shutdown.complete"})
            return


DENIED = b'{"error":{"message":"Invalid API key.","type":"authentication_error"}}'


class Guard:
    """ASGI middleware: the request's bearer token must be `key` (lifespan passes through)."""

    def __init__(self, app: Any, key: str):
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": DENIED})
                return
        await self.app(scope, receive, send)


async def read_body(receive: Any) -> bytes:
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


class Floor:
    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def stop(self) -> None:
        assert self.session is not None
        await self.session.close()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send, self.start, self.stop)
            return
        assert self.session is not None
        body = await read_body(receive)
        url = self.upstream + scope["path"]
        headers = {"content-type": "application/json"}
        method = scope["method"]
        async with self.session.request(method, url, data=body or None, headers=headers) as resp:
            await send(
                {
                    "type": "http.response.start",
                    "status": resp.status,
                    "headers": [(b"content-type", resp.content_type.encode())],
                }
            )
            async for block in resp.content.iter_any():
                await send({"type": "http.response.body", "body": block, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class WireFloor:
    """The same relay on `gateway/serving/wire.py` and `gateway/serving/outlet.py`: body blocks go
    from the upstream socket to the client's in the connection's callback.

    `late_head`: the response head waits for the upstream's first body block, as the gateway's
    does (it holds its head until the first data event, so a bad one can still fail over). An
    engine sends its head at once and its first token after the prefill, so a client that
    reads a late head handles head and first token together: this variant measures what that
    costs the client's time to first token apart from the gateway's own work."""

    def __init__(self, upstream: str, late_head: bool = False):
        from gateway.serving.wire import Origin, Wire, head_block

        self.origin = Origin.parse(upstream)
        self.head = head_block({"content-type": "application/json"})
        self.wire = Wire(5.0)
        self.late_head = late_head

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        import asyncio

        from gateway.serving.outlet import Outlet

        if scope["type"] == "lifespan":
            await lifespan(receive, send, lambda: None, self.wire.close)
            return
        body = await read_body(receive)
        reply = await self.wire.post(
            self.origin, scope["path"], self.head, body, scope["method"].encode()
        )
        first = await reply.read_some() if self.late_head else b""
        kind = reply.headers.get("content-type", "application/json").encode()
        await send(
            {
                "type": "http.response.start",
                "status": reply.status,
                "headers": [(b"content-type", kind)],
            }
        )
        done = asyncio.get_running_loop().create_future()
        outlet = Outlet(send, reply.pause, reply.resume)
        if first:
            outlet.write(first, True)

        def end() -> None:
            outlet.write(b"", False)
            done.set_result(None)

        def fail(error: BaseException) -> None:
            done.set_exception(error)

        reply.pipe(outlet.write, end, fail)
        await done
        await outlet.drained()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--wire", action="store_true", help="relay with gateway/serving/wire.py")
    ap.add_argument(
        "--late-head",
        action="store_true",
        help="with --wire: hold the response head until the upstream's first block, as the "
        "gateway does",
    )
    ap.add_argument("--key", help="require 'Authorization: Bearer KEY' on every request")
    args = ap.parse_args()
    if args.late_head and not args.wire:
        ap.error("--late-head needs --wire")
    relay: Any = WireFloor(args.upstream, args.late_head) if args.wire else Floor(args.upstream)
    uvicorn.run(
        Guard(relay, args.key) if args.key else relay,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="on",
    )


if __name__ == "__main__":
    main()
