"""The upstream client: the only module that talks to the network.

Requests go out on the app's `Wire` (gateway/serving/wire.py: keep-alive pools, body blocks handed
on
as they arrive). `body_for` renders the request each kind of upstream expects; `post` opens a
response and turns HTTP failures into `AttemptError`s that carry just enough to decide retry or
fallback.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway.config import Upstream
from gateway.errors import AttemptError, ConnectFailed
from gateway.serving.redaction import Redactor
from gateway.serving.reply import Reply
from gateway.serving.wire import Origin, Wire, head_block

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})


@dataclass(frozen=True, slots=True)
class Target:
    """Where an upstream's requests go and the headers they carry, rendered once."""

    origin: Origin
    head: bytes

    @classmethod
    def of(cls, upstream: Upstream) -> Target:
        return cls(Origin.parse(upstream.base_url), head_block(headers_for(upstream)))


class Targets:
    """Each upstream's `Target`, prepared once per upstream object (its key is read from the
    environment then); a reloaded config brings new objects and so new targets."""

    def __init__(self) -> None:
        self._prepared: dict[str, tuple[Upstream, Target]] = {}

    def __call__(self, upstream: Upstream) -> Target:
        cached = self._prepared.get(upstream.name)
        if cached is None or cached[0] is not upstream:
            cached = self._prepared[upstream.name] = (upstream, Target.of(upstream))
        return cached[1]


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


# A cap on thinking tokens, by vLLM's name for it (the Messages door's `thinking.budget_tokens`).
THINKING_BUDGET = "thinking_token_budget"


_UNBUDGETED: set[str] = set()  # upstreams already logged as unable to cap thinking


def _thinking_budget(upstream: Upstream, out: dict[str, Any], cap: str | None) -> None:
    """Said as `cap` (`Config.thinking_cap`): vLLM's own field, or OpenRouter's
    `reasoning.max_tokens` (a client's own `reasoning` effort or cap stands). An upstream that
    cannot be told (llama.cpp, vLLM without a reasoning parser, an API that is not OpenRouter)
    gets the request without, and the first such request is logged per upstream."""
    budget = out.pop(THINKING_BUDGET)
    if budget == -1:  # vLLM's "unlimited": no cap to say
        return
    if cap == "reasoning.max_tokens":
        reasoning = dict(out.get("reasoning") or {})
        if "max_tokens" not in reasoning and "effort" not in reasoning:
            reasoning["max_tokens"] = budget
        out["reasoning"] = reasoning
    elif cap == THINKING_BUDGET:
        out[THINKING_BUDGET] = budget
    elif upstream.name not in _UNBUDGETED:
        _UNBUDGETED.add(upstream.name)
        log.warning(
            "upstream %s (%s) cannot be told a thinking budget: thinking budgets are not "
            "enforced there (set [[upstreams]] thinking_budget if it takes one)",
            upstream.name,
            upstream.kind,
        )


def body_for(
    upstream: Upstream,
    body: dict[str, Any],
    stream: bool,
    native: bool = False,
    thinking_cap: str | None = None,
    require: bool = False,
) -> bytes:
    """The request as this upstream wants it: its model id, usage in streams, its dialect.
    A native Responses body carries its usage in `response.completed`: no stream_options.
    `thinking_cap`: how the upstream is told a thinking budget (`Config.thinking_cap`);
    `require`: OpenRouter is told `provider.require_parameters = true` (gateway/serving/dialect.py)
    unless the upstream's own config says false."""
    out = dict(body)
    if out.get(THINKING_BUDGET) is not None:
        _thinking_budget(upstream, out, thinking_cap)
    out["model"] = upstream.model
    if stream and not native:
        if upstream.stream_usage:
            options = dict(out.get("stream_options") or {})
            options["include_usage"] = True
            out["stream_options"] = options
        else:
            # It reports no usage in streams (some such servers refuse `stream_options`): the
            # gateway counts, and writes the usage chunk a client asked for
            # (gateway/serving/tap.py).
            out.pop("stream_options", None)
    routing = upstream.provider.body() if upstream.provider is not None else {}
    if require:
        routing.setdefault("require_parameters", True)
    if routing:
        out["provider"] = routing
    if upstream.kind == "llamacpp":
        _llamacpp(out)
    return orjson.dumps(out)


def _llamacpp(out: dict[str, Any]) -> None:
    """llama-cpp-python's server's names (llama_cpp/server/types.py): `repeat_penalty`;
    `max_tokens` only (it ignores max_completion_tokens, which OpenAI's newer clients send);
    `response_format` types text and json_object, the latter with an optional `schema` it
    enforces with a grammar, so a json_schema format is said as that."""
    if "repetition_penalty" in out:
        out["repeat_penalty"] = out.pop("repetition_penalty")
    if "max_completion_tokens" in out:
        cap = out.pop("max_completion_tokens")
        if cap is not None:  # vLLM's rule: max_completion_tokens over max_tokens
            out["max_tokens"] = cap
    fmt = out.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        out["response_format"] = (
            {"type": "json_object", "schema": schema}
            if isinstance(schema, dict)
            else {"type": "json_object"}
        )


def _retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a `Retry-After` asks for: a number of seconds, or an HTTP date (RFC 9110)
    from `now` (epoch seconds, default the wall clock). None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT; RFC 850 and asctime ones say no zone
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _error_param(raw: bytes) -> str | None:
    """The `error.param` of an upstream's error body (the request field it names), if any."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    err = data.get("error") if isinstance(data, dict) else None
    param = err.get("param") if isinstance(err, dict) else None
    return param if isinstance(param, str) and param else None


def _error_message(raw: bytes, redactor: Redactor) -> str:
    """The message of an upstream's error body, redacted (`gateway/serving/redaction.py`)."""
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
    return redactor.text(text)


async def post(
    wire: Wire,
    upstream: Upstream,
    path: str,
    data: bytes,
    target: Target | None = None,
    sent: Callable[[], None] | None = None,
    redactor: Redactor | None = None,
) -> Reply:
    """Send one request; return the reply, its body not yet read, when its status is a
    success. The caller bounds the time (asyncio.timeout); `target` defaults to one prepared
    now, callers on the hot path pass the one prepared for the upstream. `sent`: called once
    the request is written (`Wire.post`). Failures name the upstream by its configured name;
    what the connection or the upstream said is redacted by `redactor` (the config's: every
    configured key, the upstream hosts; without one, only what the patterns find)."""
    if target is None:
        target = Target.of(upstream)
    try:
        reply = await wire.post(target.origin, path, target.head, data, sent=sent)
    except ConnectFailed as e:
        said = _redactor(upstream, redactor).text(str(e))
        raise AttemptError("connect_error", f"cannot reach {upstream.name}: {said}") from None
    except OSError as e:  # connected and sent, then closed or reset before an answer
        said = _redactor(upstream, redactor).text(str(e))
        raise AttemptError("dropped", f"{upstream.name} dropped the request: {said}") from None
    if reply.status >= 400:
        try:
            raw = await reply.read()
        except OSError:
            raw = b""
        reply.release()
        status = reply.status
        message = _error_message(raw, _redactor(upstream, redactor))
        retryable = status in RETRYABLE_STATUS or status >= 500
        raise AttemptError(
            f"http_{status}",
            f"{upstream.name} answered {status}: {message}",
            status=status,
            retryable=retryable,
            retry_after=_retry_after(reply.headers.get("retry-after")),
            client_error=not retryable and status not in (401, 402, 403, 404),
            param=_error_param(raw),
        )
    return reply


def _redactor(upstream: Upstream, given: Redactor | None) -> Redactor:
    """`given`, else one of this upstream's own key, header values and host (a caller without
    the config's)."""
    if given is not None:
        return given
    parts = urlsplit(upstream.base_url)
    secrets = [v for v in (upstream.api_key(), *upstream.headers.values()) if v]
    return Redactor.from_values(secrets, [h for h in (parts.hostname, parts.netloc) if h])


async def probe(wire: Wire, upstream: Upstream, timeout: float) -> bool:
    """Cheap health check: vLLM's /health, else the free GET /models."""
    target = Target.of(upstream)
    if upstream.kind == "vllm":
        origin, path = Origin.parse(root_url(upstream)), "/health"
    else:
        origin, path = target.origin, "/models"
    try:
        async with asyncio.timeout(timeout):
            reply = await wire.post(origin, path, target.head, b"", b"GET")
            await reply.read()
            return reply.status < 400
    except (TimeoutError, OSError):
        return False


@dataclass(slots=True)
class Opened:
    """A successful attempt: the upstream and its open response (bytes not yet relayed)."""

    upstream: Upstream
    response: Reply
    first: bytes = b""  # streams: the first block, read under the first-byte timeout
    native: bool = False  # a Responses request relayed as is (no translation)
    parsed: Any = None  # a whole answer's JSON, as validated (read once)
