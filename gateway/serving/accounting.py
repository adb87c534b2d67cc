"""Accounting: what an upstream's answer says about itself, read into the record.

Usage (or, where the upstream sent none, an estimate from the request), the finish reason, an
error the upstream reported inside a 200, and the public model name an answer is to carry.
`tap_body` and `tap_embeddings` account for a whole answer; `gateway/serving/tap.py` does the
same for a stream, event by event.
"""

from __future__ import annotations

import math
import time
from typing import Any

import orjson

from gateway.errors import MalformedStream, UpstreamStreamError
from gateway.ledger.record import Record
from gateway.serving.adapt import PER_MESSAGE, chat_size, token_ids
from gateway.serving.hooks import AnswerSink
from gateway.serving.reasoning import split_text

# UTF-8 bytes a token for the estimate: between `adapt.prompt_bounds`' two divisors.
ESTIMATE_DIVISOR = 4


def estimated_usage_chunk(
    record: Record, head: tuple[Any, Any] | None, chat: bool, model: str | None
) -> bytes:
    """The usage chunk a client that asked for one gets when the upstream sent none
    (llama.cpp): the gateway's counts, in OpenAI's shape, after a comment saying they are
    estimated (the record says so too). `head`: the stream's first id and created; `model`: the
    public name the answer carries."""
    usage: dict[str, Any] = {
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "total_tokens": record.prompt_tokens + record.completion_tokens,
    }
    if record.reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": record.reasoning_tokens}
    rid, created = head or (None, None)
    chunk: dict[str, Any] = {
        "id": rid or f"chatcmpl-{record.request_id}",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created if isinstance(created, int) else int(record.time),
        "model": model or record.model,
        "choices": [],
        "usage": usage,
    }
    return b": plumbline usage estimated\n\ndata: " + orjson.dumps(chunk) + b"\n\n"


def stream_error(obj: dict[str, Any]) -> UpstreamStreamError | None:
    """The error an event reports (an `error` object, vLLM's `"object": "error"`, or a choice
    that finished with "error"), or None. On every event of a stream: a plain loop, no
    generator, for the common none."""
    error = obj.get("error")
    if not error:
        if obj.get("object") == "error":  # vLLM's error event: the object is the error
            error = obj
        else:
            for choice in obj.get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason") == "error":
                    break
            else:
                return None
    message, status = "upstream reported an error mid-stream", 502
    if isinstance(error, dict):
        code = error.get("code")
        if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
            status = code
        if isinstance(error.get("message"), str) and error["message"]:
            message += f": {error['message']}"
    elif isinstance(error, str) and error:
        message += f": {error}"
    return UpstreamStreamError(message, status)


def swap_model(raw: bytes, old: str, new: bytes) -> bytes | None:
    """`raw` with its one `"model":"old"` made `"model":"new"` (`new` JSON-encoded), the rest
    byte for byte; None when it is not there exactly once as orjson writes it."""
    needle = b'"model":' + orjson.dumps(old)
    if raw.count(needle) != 1:
        return None
    return raw.replace(needle, b'"model":' + new, 1)


def prompt_estimate(body: dict[str, Any]) -> int:
    """Prompt tokens guessed from the request when the upstream reported none (a broken stream,
    llama.cpp's streams): about four UTF-8 bytes a token over the text `prompt_bounds` counts
    (`adapt.chat_size`, and a completions prompt's strings, a batch's summed), and
    `adapt.PER_MESSAGE` tokens of framing a message. An estimate: the record says so
    (`usage_estimated`)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and token_ids(prompt):
        return len(prompt)  # token ids: counted exactly
    size, messages = chat_size(body)
    texts = [prompt] if isinstance(prompt, str) else prompt if isinstance(prompt, list) else []
    size += sum(len(p.encode()) for p in texts if isinstance(p, str))
    return math.ceil(size / ESTIMATE_DIVISOR) + PER_MESSAGE * messages


def apply_usage(record: Record, usage: dict[str, Any]) -> None:
    """The upstream's usage on the record. A count that is not one (a string, a list, a
    negative) counts 0, marks the usage estimated and is named in `coerced`."""
    if not isinstance(usage, dict):
        record.usage_estimated = True
        return
    details = usage.get("prompt_tokens_details")
    cdetails = usage.get("completion_tokens_details")
    details = details if isinstance(details, dict) else {}
    cdetails = cdetails if isinstance(cdetails, dict) else {}
    odd: list[str] = []
    record.prompt_tokens = _count(usage.get("prompt_tokens"), "prompt_tokens", odd)
    record.completion_tokens = _count(usage.get("completion_tokens"), "completion_tokens", odd)
    record.cached_tokens = _count(details.get("cached_tokens"), "cached_tokens", odd)
    reasoning = cdetails.get("reasoning_tokens")
    if reasoning is not None:
        record.reasoning_tokens = _count(reasoning, "reasoning_tokens", odd)
    cost = usage.get("cost")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost):
        record.charged_cost_usd = float(cost)
    record.usage_estimated = bool(odd)
    if odd:
        record.coerced = ",".join([*filter(None, [record.coerced]), *odd])


def _count(value: Any, name: str, odd: list[str]) -> int:
    if value is None:
        return 0
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    odd.append(f"usage.{name}:{type(value).__name__}")
    return 0


def note_finish(record: Record, reason: str | None) -> None:
    if not reason:
        return
    # With n > 1 any truncated choice marks the request.
    if record.finish_reason is None or reason == "length":
        record.finish_reason = reason
    if reason == "length":
        record.truncated = True


def tap_body(
    record: Record,
    raw: bytes,
    *,
    split_think: bool,
    opened_in_prompt: bool = False,
    chat: bool = True,
    capture: AnswerSink | None = None,
    parsed: Any = None,
    model: str | None = None,
) -> bytes:
    """Account for a non-streamed response and return the bytes to send to the client.
    `parsed`: `raw` already read as JSON (dispatch validated it). `model`: the public name the
    answer is to carry instead of the upstream's id."""
    try:
        obj = orjson.loads(raw) if parsed is None else parsed
    except orjson.JSONDecodeError:
        raise MalformedStream("upstream sent a body that is not JSON") from None
    if not isinstance(obj, dict) or "choices" not in obj:
        raise MalformedStream("upstream sent a body without choices")
    changed = False
    if isinstance(obj.get("provider"), str):
        record.provider = obj["provider"]
    if obj.get("usage"):
        apply_usage(record, obj["usage"])
    else:
        record.usage_estimated = True
    reasoning_chars = answer_chars = 0
    for choice in obj.get("choices") or ():
        note_finish(record, choice.get("finish_reason"))
        if not chat:
            continue
        message = choice.get("message") or {}
        changed |= _message(record, message, split_think, opened_in_prompt)
        if capture is not None:
            capture.message(choice.get("index", 0), message)
        reasoning = message.get("reasoning_content")
        reasoning_chars += len(reasoning or "")
        answer_chars += len(message.get("content") or "")
    if record.reasoning_tokens == 0 and reasoning_chars and record.completion_tokens:
        # No reasoning count from the upstream: apportion completion tokens by characters.
        share = reasoning_chars / (reasoning_chars + answer_chars)
        record.reasoning_tokens = round(record.completion_tokens * share)
        record.usage_estimated = True
    record.e2e_s = time.perf_counter() - record.t0
    record.check_invariants()
    return _renamed(obj, raw, model, changed)


def _message(record: Record, message: dict[str, Any], split: bool, opened: bool) -> bool:
    """A whole answer's message: think tags in its content split into reasoning and answer
    (all of it when `split`), its reasoning under both names, its tool calls counted. Whether
    it changed."""
    changed = False
    content = message.get("content")
    if isinstance(content, str) and (split or "<think>" in content or "</think>" in content):
        reasoning, answer, leaked = split_text(content, opened)
        if leaked or reasoning:
            record.reasoning_leak = True
            message["content"] = answer
            if reasoning:
                message["reasoning_content"] = message["reasoning"] = reasoning
            changed = True
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning and not (message.get("reasoning_content") and message.get("reasoning")):
        message["reasoning_content"] = message["reasoning"] = reasoning
        changed = True
    if message.get("tool_calls"):
        record.tool_calls = max(record.tool_calls, len(message["tool_calls"]))
    return changed


def _renamed(obj: dict[str, Any], raw: bytes, model: str | None, changed: bool) -> bytes:
    """The bytes of the answer, carrying the public `model` name instead of the upstream's id:
    `raw` when nothing changed (its name swapped in place where it can be)."""
    upstream_model = obj.get("model")
    if model is not None and isinstance(upstream_model, str) and upstream_model != model:
        swapped = None if changed else swap_model(raw, upstream_model, orjson.dumps(model))
        if swapped is not None:
            return swapped
        obj["model"] = model
        changed = True
    return orjson.dumps(obj) if changed else raw


def tap_embeddings(record: Record, raw: bytes, model: str | None = None) -> bytes:
    """Embeddings carry only prompt tokens; the body passes through, carrying the public `model`
    name (the route's, as every door answers) instead of the upstream's id."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise MalformedStream("upstream sent a body that is not JSON") from None
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if usage:
        record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    else:
        record.usage_estimated = True
    record.e2e_s = time.perf_counter() - record.t0
    return _renamed(obj, raw, model, False) if isinstance(obj, dict) else raw
