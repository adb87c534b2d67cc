"""The upstream client: the only module that talks to the network.

One pooled aiohttp session per app (httpx's default transport measured ~15x the CPU per request
here). `body_for` renders the request each kind of upstream expects; `post` opens a response and
turns HTTP failures into `AttemptError`s that carry just enough to decide retry or fallback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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


def body_for(upstream: Upstream, body: dict[str, Any], stream: bool, native: bool = False) -> bytes:
    """The request as this upstream wants it: its model id, usage in streams, its dialect.
    A native Responses body carries its usage in `response.completed`: no stream_options."""
    out = dict(body)
    out["model"] = upstream.model
    if stream and not native:
        options = dict(out.get("stream_options") or {})
        options["include_usage"] = True
        out["stream_options"] = options
    if upstream.provider is not None:
        out["provider"] = upstream.provider.body()
    # llama-cpp-python names it repeat_penalty and ignores chat_template_kwargs.
    if upstream.kind == "llamacpp" and "repetition_penalty" in out:
        out["repeat_penalty"] = out.pop("repetition_penalty")
    return orjson.dumps(out)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


_SECRETS = re.compile(
    r"(?i)\b(?:authorization|x-api-key|api[-_ ]?key)\s*[:=]\s*[\"']?"  # "api_key=xyz"
    r"(?:(?:bearer|basic)\s+)?[^\s\"',;]+"
    r"|(?i:\b(?:bearer|basic)\s+)[^\s\"',;]+"  # "Bearer xyz"
    r"|\b(?:sk|pk|rk|pl)-[A-Za-z0-9_*.\-]{6,}"  # vendor-prefixed keys, masked ones too
    r"|[A-Za-z0-9_\-+/=]{32,}"  # any long opaque token (keys, JWTs, hashes)
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def sanitise(text: str, upstream: Upstream, limit: int = 300) -> str:
    """Upstream error text as it may be shown to clients and logs: the upstream's own key and
    header values removed, anything shaped like a credential masked, control characters
    (newlines: log and header injection) flattened, length bounded."""
    for secret in (upstream.api_key(), *upstream.headers.values()):
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    text = _SECRETS.sub("[redacted]", text)
    text = _CONTROL.sub(" ", text).strip()
    return text[:limit] + ("…" if len(text) > limit else "")


def _error_message(raw: bytes, upstream: Upstream) -> str:
    text = raw[:2000].decode("utf-8", "replace")
    try:
        data = orjson.loads(raw)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            text = err["message"]
        elif isinstance(err, str):
            text = err
        elif isinstance(data, dict) and isinstance(data.get("message"), str):
            text = data["message"]
    except orjson.JSONDecodeError:
        pass
    return sanitise(text, upstream)


async def post(
    session: aiohttp.ClientSession,
    upstream: Upstream,
    path: str,
    data: bytes,
    read_timeout: float | None,
    headers: Mapping[str, str] | None = None,
) -> aiohttp.ClientResponse:
    """Send one request; return the open response when its status is a success.

    `read_timeout` None: no socket read timer (the caller bounds the time itself); aiohttp
    re-arms that timer on every read, which is not free. `headers` default to
    `headers_for(upstream)`; callers on the hot path pass them prepared once."""
    url = upstream.base_url.rstrip("/") + path
    extra: dict[str, Any] = {}
    if read_timeout is not None:
        extra["timeout"] = aiohttp.ClientTimeout(total=None, sock_read=read_timeout)
    try:
        resp = await session.post(
            url,
            data=data,
            headers=headers if headers is not None else headers_for(upstream),
            **extra,
        )
    except TimeoutError:
        # aiohttp's read timeout is also a ClientConnectionError: catch it first. A server that
        # says nothing for this long is not retried; dispatch moves to the next candidate.
        raise AttemptError(
            "ttft_timeout",
            f"{upstream.name} sent no first byte within {read_timeout or 0:g}s",
            retryable=False,
        ) from None
    except (aiohttp.ClientConnectionError, OSError) as e:
        raise AttemptError(
            "connect_error", f"cannot reach {upstream.name}: {type(e).__name__}"
        ) from None
    if resp.status >= 400:
        try:
            raw = await resp.content.read(64 * 1024)
        except (TimeoutError, aiohttp.ClientError):
            raw = b""
        resp.release()
        status = resp.status
        message = _error_message(raw, upstream)
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
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False


@dataclass(slots=True)
class Opened:
    """A successful attempt: the upstream and its open response (bytes not yet relayed)."""

    upstream: Upstream
    response: aiohttp.ClientResponse
    first: bytes = b""  # streams: the first block, read under the first-byte timeout
    native: bool = False  # a Responses request relayed as is (no translation)
