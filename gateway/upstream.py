"""The upstream client: the only module that talks to the network.

One pooled aiohttp session per app (httpx's default transport measured ~15x the CPU per request
here). `body_for` renders the request each kind of upstream expects; `post` opens a response and
turns HTTP failures into `AttemptError`s that carry just enough to decide retry or fallback.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from gateway.config import Upstream

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})


class AttemptError(Exception):
    """One attempt failed before anything reached the client."""

    def __init__(
        self,
        outcome: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = True,
        retry_after: float | None = None,
        client_error: bool = False,
    ):
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        # A 4xx that is the request's fault: return it to the client instead of falling back.
        self.client_error = client_error


def new_session(connect_timeout: float) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        json_serialize=lambda o: orjson.dumps(o).decode(),
        auto_decompress=True,
        skip_auto_headers=("User-Agent",),
    )


def root_url(upstream: Upstream) -> str:
    """The server root (where vLLM serves /health), i.e. base_url without a trailing /v1."""
    base = upstream.base_url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def headers_for(upstream: Upstream) -> dict[str, str]:
    headers = {"Content-Type": "application/json", **upstream.headers}
    key = upstream.api_key()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def body_for(upstream: Upstream, body: dict[str, Any], stream: bool) -> bytes:
    """The request as this upstream wants it: its model id, usage in streams, its dialect."""
    out = dict(body)
    out["model"] = upstream.model
    if stream:
        options = dict(out.get("stream_options") or {})
        options["include_usage"] = True
        out["stream_options"] = options
    if upstream.provider is not None:
        out["provider"] = upstream.provider.body()
    if upstream.kind == "llamacpp":
        # llama-cpp-python names it repeat_penalty and ignores chat_template_kwargs.
        if "repetition_penalty" in out:
            out["repeat_penalty"] = out.pop("repetition_penalty")
    return orjson.dumps(out)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _error_message(raw: bytes) -> str:
    try:
        data = orjson.loads(raw)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:500]
        if isinstance(err, str):
            return err[:500]
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return data["message"][:500]
    except orjson.JSONDecodeError:
        pass
    return raw[:200].decode("utf-8", "replace")


async def post(
    session: aiohttp.ClientSession,
    upstream: Upstream,
    path: str,
    data: bytes,
    read_timeout: float,
) -> aiohttp.ClientResponse:
    """Send one request; return the open response when its status is a success."""
    url = upstream.base_url.rstrip("/") + path
    timeout = aiohttp.ClientTimeout(total=None, sock_read=read_timeout)
    try:
        resp = await session.post(url, data=data, headers=headers_for(upstream), timeout=timeout)
    except (aiohttp.ClientConnectionError, OSError) as e:
        raise AttemptError("connect_error", f"cannot reach {upstream.name}: {type(e).__name__}") from None
    except asyncio.TimeoutError:
        raise AttemptError("timeout", f"{upstream.name} did not answer in time") from None
    if resp.status >= 400:
        try:
            raw = await resp.content.read(64 * 1024)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            raw = b""
        resp.release()
        status = resp.status
        message = _error_message(raw)
        retryable = status in RETRYABLE_STATUS or status >= 500
        raise AttemptError(
            f"http_{status}",
            f"{upstream.name} answered {status}: {message}",
            status=status,
            retryable=retryable,
            retry_after=_retry_after(resp.headers.get("Retry-After")),
            client_error=not retryable and status not in (401, 402, 403, 404),
        )
    return resp


async def probe(session: aiohttp.ClientSession, upstream: Upstream, timeout: float) -> bool:
    """Cheap health check: vLLM's /health, else the free GET /models."""
    if upstream.kind == "vllm":
        url = root_url(upstream) + "/health"
    else:
        url = upstream.base_url.rstrip("/") + "/models"
    try:
        async with session.get(
            url, headers=headers_for(upstream), timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            await resp.read()
            return resp.status < 400
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
        return False


@dataclass(slots=True)
class Opened:
    """A successful attempt: the upstream and its open response (bytes not yet relayed)."""

    upstream: Upstream
    response: aiohttp.ClientResponse
    first: bytes = b""  # streams: the first block, read under the first-byte timeout
