"""A fast, fault-injecting fake OpenAI-compatible upstream, shaped like vLLM's OpenAI server.

Used by the gateway's tests (retries, fallback, reasoning split, truncation, usage, faults) and
by the benchmarks as "the upstream directly". It runs on aiohttp's low-level server, renders
stream chunks once per (plan, second) and substitutes only the request id, so an unpaced
256-token stream costs one write. What it answers — behaviours, plans and their rendering — is
`gateway/fakes/answer.py`; this module serves it.

Endpoints: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (stream and not),
``POST /v1/responses`` (non-stream), ``POST /v1/embeddings``, ``POST /tokenize`` (vLLM-style
``{"count", "tokens", "max_model_len"}``; with ``messages`` the ids depend on the chat
template's name), ``GET /version``, ``GET /v1/models``, ``GET /health``. ``POST /_fake/engine`` sets
the version and the chat template's name, as an engine upgrade would change them.

Text: the prompt is "tokenized" by whitespace (``/tokenize`` and ``usage.prompt_tokens`` agree).
The answer is ``tok0 tok1 ...`` (one token per stream chunk), or the words of ``text``.
Honoured: ``max_tokens``/``max_completion_tokens`` (they cap reasoning plus answer; a cut gives
``finish_reason: "length"``), ``stop``, ``n``, ``logprobs``/``top_logprobs``, ``tools`` with
``tool_choice``, ``stream_options.include_usage`` (usage only in a last chunk with empty
``choices``). ``seed`` and sampling parameters are only recorded: the output is deterministic.
Any ``model`` is accepted and echoed; ``/v1/models`` lists the configured ``models``.

Behaviour: a JSON object; the effective one for a request is the server defaults, overlaid by
``POST /_fake/default``, overlaid by the next entry of the script (``null`` removes a key).
Keys (unknown keys are rejected):

==========================  =================================================================
status, message             reply with this HTTP status and an OpenAI error envelope
retry_after                 ``Retry-After`` header on that error (seconds, or a string sent
                            as is: an HTTP date)
body                        send this raw body instead (any status; ``"not json"`` etc.)
drop_connection             close the socket without any response
hang_before_first_byte      sleep this many seconds before the response headers
hang_after_chunks, hang     after N stream chunks, sleep ``hang`` seconds (default 30), then
                            go on; 0 = headers sent, no body yet
disconnect_after_chunks     after N stream chunks, close the connection mid-stream
                            (a chunk is one SSE event; chat's first one is the role chunk)
malformed_sse               a stream contains a block that is not valid SSE framing
invalid_json                a stream event (or a non-stream body) is truncated JSON
tokens                      answer length in tokens (default 16)
text                        answer text instead of ``tok0 tok1 ...``
degenerate                  answer is ``111 222 333 444 111 ...``
realistic                   answer is ``tokens`` pieces of a realistic passage (non-ASCII,
                            quotes, backslashes, line breaks: `gateway/fakes/text.py`)
pace_tps                    per-token pacing, tokens per second (a non-stream answer waits
                            for all its tokens)
leak_think                  ``true``: content is ``<think>...</think>answer`` (no reasoning
                            parser); ``"close_only"``: only ``...</think>answer`` (Qwen3)
reasoning_field             ``"reasoning"`` | ``"reasoning_content"`` | ``"both"``: reasoning
                            in a separate field, counted in ``reasoning_tokens``
reasoning_tokens            length of the reasoning (default 8)
no_usage                    never send usage (like llama.cpp)
cached_tokens               ``usage.prompt_tokens_details.cached_tokens`` (not clamped)
cost, provider              OpenRouter-style ``usage.cost`` and top-level ``provider``
ignore_params               parameter names recorded as ignored when present
tool_call                   ``{"name", "arguments"}`` (arguments: object or raw string) or
                            ``true`` (first offered tool); also used for ``tool_choice``
                            ``"required"`` or a named function
finish_reason               report this finish reason instead
==========================  =================================================================

Control API: ``POST /_fake/script`` (JSON list, appended, consumed FIFO by generation
requests), ``POST /_fake/default`` (object), ``GET /_fake/requests`` (received bodies, headers,
effective behaviour, ignored parameters), ``POST /_fake/reset``. A default ``status`` of 500 or
more also makes ``/health`` and ``/v1/models`` fail (a "down" server).

Harness: ``running_fake(**defaults)`` yields a ``FakeHandle`` (``base_url`` plus the control
calls) for a server in a background thread, or in a subprocess with ``process=True``.
CLI: ``python -m gateway.fakes.upstream --port N [--tokens N] [--pace-tps X] [--default JSON]``.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from gateway.fakes.answer import (
    BEHAVIOUR_KEYS,
    DEFAULT_HANG,
    DONE,
    BehaviourError,
    RequestError,
    StreamTemplate,
    embedding_of,
    error_body,
    full_body,
    int_param,
    make_plan,
    overlay,
    prompt_token_ids,
    prompt_units,
    stream_template,
    usage_event,
    usage_of,
    validate_behaviour,
)

BACKLOG = 4096
RECORDED_HEADERS_SKIP = frozenset({"host", "content-length", "connection", "accept-encoding"})
Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class FakeUpstream:
    """The fake server's state (defaults, script, request log) and its HTTP handlers."""

    def __init__(
        self,
        *,
        models: list[str] | None = None,
        record: bool = True,
        record_limit: int = 10000,
        max_model_len: int = 32768,
        **defaults: Any,
    ) -> None:
        self.models = models or ["fake-model"]
        self.version, self.chat_template = "0.0.0-fake", "plain"
        self.record = record
        self.max_model_len = max_model_len
        self.base_defaults = validate_behaviour(defaults)
        self.default = dict(self.base_defaults)
        self.script: deque[dict[str, Any]] = deque()
        self.log: deque[tuple[str, str, dict, bytes, dict, list]] = deque(maxlen=record_limit)
        self.routes: dict[tuple[str, str], Handler] = {
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completion,
            ("POST", "/v1/responses"): self._responses,
            ("POST", "/v1/embeddings"): self._embeddings,
            ("POST", "/tokenize"): self._tokenize,
            ("GET", "/version"): self._version,
            ("POST", "/_fake/engine"): self._ctl_engine,
            ("GET", "/v1/models"): self._models,
            ("GET", "/health"): self._health,
            ("POST", "/_fake/script"): self._ctl_script,
            ("POST", "/_fake/default"): self._ctl_default,
            ("GET", "/_fake/requests"): self._ctl_requests,
            ("POST", "/_fake/reset"): self._ctl_reset,
        }

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """The aiohttp low-level handler: dispatch by method and path."""
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            return _json(404, error_body(404, f"no route {request.method} {request.path}"))
        try:
            return await handler(request)
        except RequestError as exc:
            return _json(exc.status, error_body(exc.status, exc.message))

    def runner(self, shutdown_timeout: float = 0.5) -> web.ServerRunner:
        server = web.Server(self.handle, handler_cancellation=True, access_log=None)
        return web.ServerRunner(server, shutdown_timeout=shutdown_timeout)

    # -- generation

    async def _begin(self, request: web.BaseRequest) -> tuple[dict[str, Any], dict[str, Any]]:
        raw = await request.read()
        beh = overlay(self.default, self.script.popleft()) if self.script else self.default
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        ignored = [p for p in beh.get("ignore_params", ()) if isinstance(body, dict) and p in body]
        if self.record:
            headers = {
                k.lower(): v
                for k, v in request.headers.items()
                if k.lower() not in RECORDED_HEADERS_SKIP
            }
            self.log.append((request.method, request.path, headers, raw, beh, ignored))
        if "hang_before_first_byte" in beh:
            await asyncio.sleep(beh["hang_before_first_byte"])
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        return body, beh

    def _fault_response(self, request: web.BaseRequest, beh: dict) -> web.StreamResponse | None:
        if beh.get("drop_connection"):
            if request.transport is not None:
                request.transport.close()
            return web.Response()
        status = beh.get("status", 200)
        if "body" in beh:
            return web.Response(
                status=status, body=beh["body"].encode(), content_type="application/json"
            )
        if status == 200:
            return None
        headers = {"Retry-After": str(beh["retry_after"])} if "retry_after" in beh else None
        msg = beh.get("message", f"fake upstream error {status}")
        return _json(status, error_body(status, msg), headers)

    async def _chat(self, request: web.BaseRequest) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def _completion(self, request: web.BaseRequest) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def _generate(self, request: web.BaseRequest, kind: str) -> web.StreamResponse:
        body, beh = await self._begin(request)
        fault = self._fault_response(request, beh)
        if fault is not None:
            return fault
        plan = make_plan(kind, body, beh, self.models[0])
        prompt_tokens = len(prompt_units(body))
        created = int(time.time())
        rid = os.urandom(16).hex()
        usage = None if beh.get("no_usage") else usage_of(plan, prompt_tokens, beh)
        if not body.get("stream"):
            if "pace_tps" in beh:  # a paced engine takes as long to answer in one piece
                await asyncio.sleep(len(plan.pieces) / beh["pace_tps"])
            out = full_body(plan, created, rid, usage, beh.get("provider"))
            if plan.faults:
                out = out[: len(out) // 2]
            return _json(200, out)
        opts = body.get("stream_options") or {}
        tail = []
        if usage is not None and isinstance(opts, dict) and opts.get("include_usage"):
            tail.append(usage_event(plan, created, rid, usage))
        tail.append(DONE)
        return await self._stream(request, stream_template(plan, created), rid, tail, beh)

    async def _stream(
        self,
        request: web.BaseRequest,
        tpl: StreamTemplate,
        rid: str,
        tail: list[bytes],
        beh: dict[str, Any],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        rid_b = rid.encode()
        hang_at, drop_at = beh.get("hang_after_chunks"), beh.get("disconnect_after_chunks")
        tps = beh.get("pace_tps")
        try:
            if tps is None and hang_at is None and drop_at is None:
                await resp.write(rid_b.join(tpl.whole) + b"".join(tail))
                await resp.write_eof()
                return resp
            events = [rid_b.join(ev) for ev in tpl.events] + tail
            positions = list(tpl.positions) + [tpl.last_position] * len(tail)
            await self._paced(request, resp, events, positions, beh)
        except ConnectionError:
            pass
        return resp

    async def _paced(
        self,
        request: web.BaseRequest,
        resp: web.StreamResponse,
        events: list[bytes],
        positions: list[int],
        beh: dict[str, Any],
    ) -> None:
        """Write events on schedule (one write per token position); faults before event N."""
        loop = asyncio.get_running_loop()
        interval = 1.0 / beh["pace_tps"] if "pace_tps" in beh else 0.0
        t0, pos, buf = loop.time(), 0, bytearray()
        for i, ev in enumerate(events):
            if i == beh.get("disconnect_after_chunks"):
                await resp.write(bytes(buf))
                if request.transport is not None:
                    request.transport.close()
                return
            if i == beh.get("hang_after_chunks"):
                await resp.write(bytes(buf))
                buf.clear()
                hang = beh.get("hang", DEFAULT_HANG)
                await asyncio.sleep(hang)
                t0 += hang
            if interval and positions[i] != pos:
                if buf:
                    await resp.write(bytes(buf))
                    buf.clear()
                pos = positions[i]
                await asyncio.sleep(max(0.0, t0 + pos * interval - loop.time()))
            buf += ev
        await resp.write(bytes(buf))
        await resp.write_eof()

    async def _responses(self, request: web.BaseRequest) -> web.StreamResponse:
        body, beh = await self._begin(request)
        fault = self._fault_response(request, beh)
        if fault is not None:
            return fault
        if body.get("stream"):
            raise RequestError(400, "the fake upstream serves /v1/responses without streaming")
        inp = body.get("input")
        msgs = [{"content": inp}] if isinstance(inp, str) else inp
        chat = {
            "messages": msgs,
            "max_tokens": body.get("max_output_tokens"),
            "model": body.get("model"),
        }
        plan = make_plan("chat", chat, beh, self.models[0])
        prompt = len(prompt_units(chat))
        text = "".join(t for ch, t in plan.pieces if ch == "c")
        done = plan.finish_reason != "length"
        out = {
            "id": f"resp_{os.urandom(16).hex()}",
            "object": "response",
            "created_at": int(time.time()),
            "model": plan.model,
            "status": "completed" if done else "incomplete",
            "incomplete_details": None if done else {"reason": "max_output_tokens"},
            "output": [
                {
                    "type": "message",
                    "id": f"msg_{os.urandom(8).hex()}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "usage": {
                "input_tokens": prompt,
                "output_tokens": plan.completion_per_choice,
                "total_tokens": prompt + plan.completion_per_choice,
                "input_tokens_details": {"cached_tokens": beh.get("cached_tokens", 0)},
                "output_tokens_details": {"reasoning_tokens": plan.reasoning_count},
            },
        }
        return _json(200, orjson.dumps(out))

    async def _embeddings(self, request: web.BaseRequest) -> web.StreamResponse:
        body, beh = await self._begin(request)
        fault = self._fault_response(request, beh)
        if fault is not None:
            return fault
        inp = body.get("input")
        if inp in (None, "", []):
            raise RequestError(400, "input is required")
        items = (
            [inp]
            if isinstance(inp, str) or (isinstance(inp, list) and inp and isinstance(inp[0], int))
            else inp
        )
        dims = int_param(body, "dimensions", 1, 8192) or 8
        data = []
        for i, item in enumerate(items):
            seed = zlib.crc32(orjson.dumps(item))
            vec: Any = embedding_of(seed, dims)
            if body.get("encoding_format") == "base64":
                vec = base64.b64encode(array.array("f", vec).tobytes()).decode()
            data.append({"index": i, "object": "embedding", "embedding": vec})
        tokens = len(prompt_units({"input": inp}))
        out = {
            "id": f"embd-{os.urandom(16).hex()}",
            "object": "list",
            "created": int(time.time()),
            "model": body.get("model") or self.models[0],
            "data": data,
            "usage": {
                "prompt_tokens": tokens,
                "total_tokens": tokens,
                "completion_tokens": 0,
                "prompt_tokens_details": None,
            },
        }
        return _json(200, orjson.dumps(out))

    # -- metadata

    async def _tokenize(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or ("prompt" not in body and "messages" not in body):
            raise RequestError(400, "tokenize needs a JSON object with prompt or messages")
        ids = prompt_token_ids(body)
        if "messages" in body and self.chat_template != "plain":
            # Another template renders the same words as other tokens (the count, which usage
            # agrees with, stays).
            shift = zlib.crc32(self.chat_template.encode())
            ids = [(i + shift) % 50000 for i in ids]
        return _json(
            200,
            orjson.dumps(
                {
                    "count": len(ids),
                    "max_model_len": self.max_model_len,
                    "tokens": ids,
                    "token_strs": None,
                }
            ),
        )

    async def _version(self, request: web.BaseRequest) -> web.StreamResponse:
        if not self.version:  # an engine (or a proxy before it) that does not say
            raise RequestError(404, "no /version here")
        return _json(200, orjson.dumps({"version": self.version}))

    async def _ctl_engine(self, request: web.BaseRequest) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.version = body.get("version", self.version)
        self.chat_template = body.get("chat_template", self.chat_template)
        said = {"version": self.version, "chat_template": self.chat_template}
        return _json(200, orjson.dumps(said))

    def _down(self) -> web.StreamResponse | None:
        status = self.default.get("status", 200)
        return _json(status, error_body(status, "fake upstream is down")) if status >= 500 else None

    async def _models(self, request: web.BaseRequest) -> web.StreamResponse:
        down = self._down()
        if down is not None:
            return down
        created = int(time.time())
        data = [
            {
                "id": m,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": m,
                "parent": None,
                "max_model_len": self.max_model_len,
            }
            for m in self.models
        ]
        return _json(200, orjson.dumps({"object": "list", "data": data}))

    async def _health(self, request: web.BaseRequest) -> web.StreamResponse:
        return self._down() or web.Response(status=200)

    # -- control API

    async def _control_body(self, request: web.BaseRequest) -> Any:
        try:
            return orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            raise RequestError(400, f"control body is not JSON: {exc}") from None

    async def _ctl_script(self, request: web.BaseRequest) -> web.StreamResponse:
        items = await self._control_body(request)
        if not isinstance(items, list):
            raise RequestError(400, "the script must be a JSON list of behaviours")
        try:
            checked = [validate_behaviour(b) for b in items]
        except BehaviourError as exc:
            raise RequestError(400, str(exc)) from None
        self.script.extend(checked)
        return _json(200, orjson.dumps({"script_pending": len(self.script)}))

    async def _ctl_default(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            beh = validate_behaviour(await self._control_body(request))
        except BehaviourError as exc:
            raise RequestError(400, str(exc)) from None
        self.default = overlay(self.base_defaults, beh)
        return _json(200, orjson.dumps({"default": self.default}))

    async def _ctl_requests(self, request: web.BaseRequest) -> web.StreamResponse:
        out = []
        for method, path, headers, raw, beh, ignored in self.log:
            try:
                body: Any = orjson.loads(raw)
            except orjson.JSONDecodeError:
                body = raw.decode("utf-8", "replace")
            out.append(
                {
                    "method": method,
                    "path": path,
                    "headers": headers,
                    "body": body,
                    "behaviour": beh,
                    "ignored_params": ignored,
                }
            )
        return _json(200, orjson.dumps({"requests": out, "script_pending": len(self.script)}))

    async def _ctl_reset(self, request: web.BaseRequest) -> web.StreamResponse:
        self.script.clear()
        self.log.clear()
        self.default = dict(self.base_defaults)
        self.version, self.chat_template = "0.0.0-fake", "plain"
        return _json(200, b"{}")


def _json(status: int, body: bytes, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


# ---------------------------------------------------------------- running it


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def _serve_until(stop: asyncio.Event, sock: socket.socket, **defaults: Any) -> None:
    runner = FakeUpstream(**defaults).runner()
    await runner.setup()
    await web.SockSite(runner, sock, backlog=BACKLOG).start()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(host: str = "127.0.0.1", port: int = 8100, **defaults: Any) -> None:
    """Run the fake on ``host:port`` until SIGINT/SIGTERM; ``defaults`` as for FakeUpstream."""
    sock = _listen(host, port)
    loop = _new_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"fake upstream listening on http://{host}:{sock.getsockname()[1]}", flush=True)
    try:
        loop.run_until_complete(_serve_until(stop, sock, **defaults))
    finally:
        loop.close()


@dataclass
class FakeHandle:
    """A running fake: its URLs and blocking calls to its control API."""

    url: str

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback
        with direct.open(req, timeout=10) as resp:
            return json.loads(resp.read())

    def script(self, *behaviours: dict[str, Any]) -> None:
        """Queue behaviours for the next generation requests, one each."""
        self._call("POST", "/_fake/script", list(behaviours))

    def set_default(self, **behaviour: Any) -> None:
        """Replace the default behaviour (over the start-up defaults)."""
        self._call("POST", "/_fake/default", behaviour)

    def set_engine(self, version: str | None = None, chat_template: str | None = None) -> None:
        """Change what ``/version`` and ``/tokenize`` say, as an engine upgrade would
        (``version=""``: ``/version`` answers 404)."""
        change = {"version": version, "chat_template": chat_template}
        self._call("POST", "/_fake/engine", {k: v for k, v in change.items() if v is not None})

    def requests(self) -> list[dict[str, Any]]:
        """Every recorded request: method, path, headers, body, behaviour, ignored_params."""
        return self._call("GET", "/_fake/requests")["requests"]

    def reset(self) -> None:
        """Clear the script and the log; restore the start-up defaults."""
        self._call("POST", "/_fake/reset", {})


@contextlib.contextmanager
def running_fake(
    *, process: bool = False, host: str = "127.0.0.1", **defaults: Any
) -> Iterator[FakeHandle]:
    """Run a fake on a free port, in a thread (default) or a subprocess; stop it on exit."""
    validate_behaviour({k: v for k, v in defaults.items() if k in BEHAVIOUR_KEYS})
    if process:
        with _fake_process(host, defaults) as url:
            yield FakeHandle(url)
        return
    sock = _listen(host, 0)
    loop = _new_loop()
    stop = asyncio.Event()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        task = loop.create_task(_serve_until(stop, sock, **defaults))
        loop.call_soon(started.set)
        loop.run_until_complete(task)

    thread = threading.Thread(target=run, name="fake-upstream", daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield FakeHandle(f"http://{host}:{sock.getsockname()[1]}")
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def _fake_process(host: str, defaults: dict[str, Any]) -> Iterator[str]:
    opts = {k: defaults.pop(k) for k in ("models", "record") if k in defaults}
    cmd = [
        sys.executable,
        "-m",
        "gateway.fakes.upstream",
        "--host",
        host,
        "--port",
        "0",
        "--default",
        json.dumps(defaults),
    ]
    cmd += [a for m in opts.get("models", []) for a in ("--model", m)]
    cmd += [] if opts.get("record", True) else ["--no-record"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "listening on " not in line:
            raise RuntimeError(f"fake upstream did not start: {line!r}")
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m gateway.fakes.upstream``: serve a fake upstream on loopback."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--tokens", type=int, help="answer length in tokens")
    ap.add_argument("--pace-tps", type=float, help="per-token pacing of streams")
    ap.add_argument("--model", action="append", help="served model name (repeatable)")
    ap.add_argument("--default", default="{}", help="default behaviour as a JSON object")
    ap.add_argument("--no-record", action="store_true", help="do not keep a request log")
    args = ap.parse_args(argv)
    try:
        defaults = validate_behaviour(json.loads(args.default))
    except (ValueError, BehaviourError) as exc:
        ap.error(f"--default: {exc}")
    if args.tokens is not None:
        defaults["tokens"] = args.tokens
    if args.pace_tps is not None:
        defaults["pace_tps"] = args.pace_tps
    serve(args.host, args.port, models=args.model, record=not args.no_record, **defaults)


if __name__ == "__main__":
    main()
