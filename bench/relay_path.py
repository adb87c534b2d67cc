"""The streamed path in process: a relayed chunk's Python from the upstream socket's callback to
the client's transport, without the kernel.

    python bench/relay_path.py                      # chat and completions, gateway and floor
    python bench/relay_path.py --kind completions --streams 32 --tokens 256 --rounds 5

Each stream is a real wire `Connection` (`gateway/serving/wire.py`) fed the fake upstream's
own events, one HTTP chunk per `data_received` (one event per read, as vLLM sends them), its
`Reply` piped to either the gateway's `StreamRelay` (the tap, the silence watch, the outlet) or
the bare relay of `bench/floor_proxy.py` (`Outlet.write` alone), both writing through uvicorn's
own `RequestResponseCycle.send` to a transport that keeps nothing. `--streams` streams are fed
round robin, a token of each in turn, as a decode step's tokens arrive. Prints µs per chunk
(best of `--rounds`) for each; the difference is what the gateway's relay adds per chunk in
Python. `bench/relay_profile.py gateway` measures the same over real sockets.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODEL = "bench-model"


class Transport(asyncio.Transport):
    """A socket that takes everything at once and keeps nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write(self, data: Any) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def events(kind: str, text: str, logprobs: bool, tokens: int, rid: str) -> list[bytes]:
    """The fake upstream's events for one stream (usage chunk, no [DONE]: finish writes it)."""
    from plumbline_kit.fakes.answer import stream_template, usage_event, usage_of
    from plumbline_kit.fakes.plan import make_plan

    body: dict[str, Any] = {"max_tokens": tokens}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": "x"}]
        if logprobs:
            body |= {"logprobs": True, "top_logprobs": 5}
    else:
        body["prompt"] = "x"
        if logprobs:
            body["logprobs"] = 5
    beh = {"tokens": tokens, "realistic": text == "realistic"}
    plan = make_plan("chat" if kind == "chat" else "completion", body, beh, MODEL)
    tpl = stream_template(plan, 1_700_000_000)
    out = [rid.encode().join(ev) for ev in tpl.events]
    out.append(usage_event(plan, 1_700_000_000, rid, usage_of(plan, 3, beh)))
    return [*out, b"data: [DONE]\n\n"]


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def _never() -> dict[str, Any]:
    await asyncio.Future()
    return {}


def _cycle(transport: Transport) -> Any:
    """uvicorn's per-request ASGI state (`send`) over `transport`."""
    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    scope: dict[str, Any] = {"type": "http", "method": "POST", "http_version": "1.1"}
    log = logging.getLogger("bench")
    return RequestResponseCycle(
        scope,  # type: ignore[arg-type]
        transport,
        FlowControl(transport),
        log,
        log,
        False,
        [],
        asyncio.Event(),
        False,
        True,
        lambda: None,
    )


async def _open(
    kind: str, gateway: bool, first: bytes, pool: Any, silence: Any, args: argparse.Namespace
) -> Any:
    """One stream set up as dispatch leaves it (headers in, the first block read), then handed
    to the relay: its upstream connection and the task serving the client. With `--direct` (as
    the gateway's server offers it) body blocks are written by the edge's `body_writer`."""
    from gateway.edge.direct import body_writer, corker
    from gateway.ledger.record import Record
    from gateway.serving.call import Call
    from gateway.serving.outlet import DIRECT, Direct, Outlet
    from gateway.serving.reply import Reply
    from gateway.serving.stream_relay import StreamRelay
    from gateway.serving.tap import StreamTap
    from gateway.serving.upstream import Opened
    from gateway.serving.wire import Connection, Origin, Wire

    conn = Connection(Wire(5.0), Origin.parse("http://127.0.0.1:9"))
    conn.connection_made(Transport())
    reply = conn.reply = Reply(conn)
    conn.data_received(HEAD + chunked(first))
    block = await reply.read_some()
    transport = Transport()
    cycle = _cycle(transport)
    direct = Direct(body_writer(cycle, cycle.flow), corker(cycle)) if args.direct else None
    if not gateway:

        async def floor() -> None:
            done = asyncio.get_running_loop().create_future()
            await cycle.send({"type": "http.response.start", "status": 200, "headers": []})
            outlet = Outlet(cycle.send, reply.pause, reply.resume, direct)
            outlet.write(block, True)

            def end() -> None:
                outlet.write(b"", False)
                done.set_result(None)

            reply.pipe(outlet.write, end, done.set_exception)
            await done

        return conn, asyncio.get_running_loop().create_task(floor())
    chat = kind == "chat"
    path = "/chat/completions" if chat else "/completions"
    record = Record(request_id="r", door=kind, model=MODEL, stream=True)
    tap = StreamTap(record, client_wants_usage=True, split_think=False, chat=chat, model=MODEL)
    call = Call(kind, path, MODEL, {"model": MODEL}, True, record, client_wants_usage=True)
    scope = {} if direct is None else {DIRECT: (cycle.send, direct)}
    upstream = next(iter(pool.config.upstreams))
    opened = Opened(upstream=upstream, response=reply, first=block)
    pool.pool.begin(upstream.name)
    relay = StreamRelay(
        call,
        taps=lambda upstream, native: tap,
        headers=lambda opened: {},
        pool=pool.pool,
        silence=silence,
        done=lambda: None,
    )
    relay.bind(opened)
    return conn, asyncio.get_running_loop().create_task(relay(scope, _never, cycle.send))


class _Pool:
    def __init__(self, root: Path) -> None:
        from gateway.config import parse_config
        from gateway.serving.pool import Pool

        data = {
            "upstreams": [
                {"name": "u", "kind": "vllm", "base_url": "http://127.0.0.1:9", "model": MODEL}
            ],
            "models": {MODEL: {"upstreams": ["u"]}},
        }
        self.config = parse_config(data, root=root)
        self.pool = Pool(self.config)


async def run(kind: str, gateway: bool, args: argparse.Namespace) -> float:
    """µs of CPU per relayed chunk, the best of `args.rounds`."""
    from gateway.serving.silence import Silence

    scratch = tempfile.TemporaryDirectory(prefix="relay-path-")
    pool, silence = _Pool(Path(scratch.name)), Silence(60.0)
    streams = [
        events(kind, args.text, args.logprobs, args.tokens, f"s{i}") for i in range(args.streams)
    ]
    best = float("inf")
    for _ in range(args.rounds):
        opened = [await _open(kind, gateway, s[0], pool, silence, args) for s in streams]
        await asyncio.sleep(0)  # each relay writes its head and pipes the reply
        feeds: list[tuple[Callable[[bytes], None], list[bytes]]] = [
            (conn.data_received, [chunked(e) for e in s[1:]])
            for (conn, _), s in zip(opened, streams, strict=True)
        ]
        n = len(streams[0]) - 1
        gc.collect()
        t0 = time.process_time()
        for i in range(n):
            for feed, chunks in feeds:
                feed(chunks[i])
        elapsed = time.process_time() - t0
        for conn, _ in opened:
            conn.data_received(b"0\r\n\r\n")
        await asyncio.gather(*(task for _, task in opened))
        best = min(best, elapsed)
    scratch.cleanup()
    return 1e6 * best / ((len(streams[0]) - 1) * len(streams))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=("chat", "completions", "both"), default="both")
    ap.add_argument("--text", choices=("realistic", "plain"), default="realistic")
    ap.add_argument("--logprobs", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--direct",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="body blocks written by the edge's writer (as served), not through `send`",
    )
    args = ap.parse_args()
    kinds = ("chat", "completions") if args.kind == "both" else (args.kind,)
    for kind in kinds:
        floor = asyncio.run(run(kind, False, args))
        gw = asyncio.run(run(kind, True, args))
        print(
            f"{kind:11} text={args.text} logprobs={args.logprobs} direct={args.direct} "
            f"C{args.streams}: "
            f"floor {floor:.2f} µs/chunk, gateway {gw:.2f} µs/chunk (+{gw - floor:.2f})"
        )


if __name__ == "__main__":
    main()
