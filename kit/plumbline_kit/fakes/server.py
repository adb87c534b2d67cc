"""The fake upstream's server (`plumbline_kit/fakes/upstream.py` runs it): its state (defaults,
script, request log, engine version) and its aiohttp low-level HTTP handlers.
"""

from __future__ import annotations

import asyncio
import os
import time
import zlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from plumbline_kit.fakes.answer import (
    DONE,
    StreamTemplate,
    embeddings_body,
    error_body,
    full_body,
    response_body,
    stream_template,
    usage_event,
    usage_of,
)
from plumbline_kit.fakes.behaviour import (
    DEFAULT_HANG,
    BehaviourError,
    overlay,
    validate_behaviour,
)
from plumbline_kit.fakes.plan import (
    RequestError,
    int_param,
    make_plan,
    prompt_token_ids,
    prompt_units,
)

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
        return _json(200, response_body(plan, prompt, beh.get("cached_tokens", 0)))

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
        tokens = len(prompt_units({"input": inp}))
        model = body.get("model") or self.models[0]
        base64_ = body.get("encoding_format") == "base64"
        return _json(200, embeddings_body(items, dims, base64_, model, tokens))

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
