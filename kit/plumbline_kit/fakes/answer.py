"""The fake upstream's bodies (`plumbline_kit/fakes/upstream.py`), rendered from a plan
(`plumbline_kit/fakes/plan.py`) once as templates that only the request id is substituted into.
"""

from __future__ import annotations

import array
import base64
import os
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from plumbline_kit.fakes.plan import Plan

ID_MARK = "__FAKEID__"
_ID_MARK_B = ID_MARK.encode()
DONE = b"data: [DONE]\n\n"


def _lp(i: int) -> float:
    return -round(0.05 * (1 + i % 7), 4)


def chat_logprobs(token: str, i: int, top: int) -> dict[str, Any]:
    """One entry of ``choices[].logprobs.content`` with ``top`` alternatives."""

    def entry(t: str, lp: float) -> dict[str, Any]:
        return {"token": t, "logprob": lp, "bytes": list(t.encode())}

    alts = [entry(token if j == 0 else f"alt{j}", _lp(i) - 1.5 * j) for j in range(top)]
    return {**entry(token, _lp(i)), "top_logprobs": alts}


def completion_logprobs(
    tokens: list[str], offset: int, top: int, echo: bool = False
) -> dict[str, Any]:
    """The legacy completions ``logprobs`` object for consecutive tokens (``echo``: the first is
    the prompt's first token, which has no distribution: ``None``, as vLLM says it)."""
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    tops: list[dict[str, float] | None] = [
        {t: _lp(i), **{f"alt{j}": _lp(i) - 1.5 * j for j in range(1, top)}}
        for i, t in enumerate(tokens)
    ]
    token_logprobs: list[float | None] = [_lp(i) for i in range(len(tokens))]
    if echo and tokens:
        tops[0] = token_logprobs[0] = None
    return {
        "text_offset": offsets,
        "token_logprobs": token_logprobs,
        "tokens": tokens,
        "top_logprobs": tops if top else None,
    }


def _tool_json(plan: Plan) -> dict[str, Any]:
    assert plan.tool_call
    name, args = plan.tool_call
    return {
        "id": f"chatcmpl-tool-{ID_MARK}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def _reasoning_fields(plan: Plan, text: str | None) -> dict[str, Any]:
    if plan.reasoning_field == "both":
        return {"reasoning": text, "reasoning_content": text}
    return {plan.reasoning_field: text} if plan.reasoning_field else {}


def usage_of(plan: Plan, prompt_tokens: int, beh: dict[str, Any]) -> dict[str, Any]:
    """The ``usage`` object: prompt, completion, cached, reasoning tokens, optional cost."""
    completion = plan.completion_per_choice * plan.n
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": beh.get("cached_tokens", 0)},
        "completion_tokens_details": {"reasoning_tokens": plan.reasoning_count * plan.n},
    }
    if "cost" in beh:
        usage["cost"] = beh["cost"]
        usage["is_byok"] = False
    return usage


def _head(plan: Plan, created: int, stream: bool) -> dict[str, Any]:
    if plan.kind == "chat":
        obj = "chat.completion.chunk" if stream else "chat.completion"
        return {"id": f"chatcmpl-{ID_MARK}", "object": obj, "created": created, "model": plan.model}
    return {
        "id": f"cmpl-{ID_MARK}",
        "object": "text_completion",
        "created": created,
        "model": plan.model,
    }


@lru_cache(maxsize=512)
def body_template(plan: Plan, created: int) -> tuple[bytes, ...]:
    """The non-stream response without its closing brace, split around the id placeholder."""
    content = "".join(t for ch, t in plan.pieces if ch == "c")
    reasoning = "".join(t for ch, t in plan.pieces if ch == "r") or None
    tokens = [t for _, t in plan.pieces]
    choices = []
    for c in range(plan.n):
        choice: dict[str, Any] = {"index": c}
        if plan.kind == "chat":
            msg: dict[str, Any] = {
                "role": "assistant",
                "content": None if plan.tool_call else content,
                "refusal": None,
                "tool_calls": [_tool_json(plan)] if plan.tool_call else [],
            }
            choice["message"] = msg | _reasoning_fields(plan, reasoning)
            choice["logprobs"] = (
                None
                if plan.logprobs is None
                else {"content": [chat_logprobs(t, i, plan.logprobs) for i, t in enumerate(tokens)]}
            )
        else:
            choice["text"] = "".join(plan.echo) + content
            choice["logprobs"] = (
                None
                if plan.logprobs is None
                else completion_logprobs([*plan.echo, *tokens], 0, plan.logprobs, bool(plan.echo))
            )
        choice["finish_reason"] = plan.finish_reason
        choice["stop_reason"] = plan.stop_reason
        choices.append(choice)
    out = orjson.dumps(_head(plan, created, False) | {"choices": choices})
    return tuple(out[:-1].split(_ID_MARK_B))


def full_body(
    plan: Plan, created: int, rid: str, usage: dict | None, provider: str | None
) -> bytes:
    """The non-stream response body."""
    extra: dict[str, Any] = {"provider": provider} if provider else {}
    if usage is not None:
        extra["usage"] = usage
    tail = b"," + orjson.dumps(extra)[1:] if extra else b"}"
    return rid.encode().join(body_template(plan, created)) + tail


def _delta_choice(plan: Plan, c: int, i: int, ch: str, t: str, last: bool) -> dict[str, Any]:
    finish = plan.finish_reason if last else None
    if plan.kind == "completion":
        lp = None if plan.logprobs is None else completion_logprobs([t], 0, plan.logprobs)
        return {
            "index": c,
            "text": t,
            "logprobs": lp,
            "finish_reason": finish,
            "stop_reason": plan.stop_reason if last else None,
        }
    delta = _reasoning_fields(plan, t) if ch == "r" else {"content": t}
    lp = None if plan.logprobs is None else {"content": [chat_logprobs(t, i, plan.logprobs)]}
    out = {"index": c, "delta": delta, "logprobs": lp, "finish_reason": finish}
    if last:
        out["stop_reason"] = plan.stop_reason
    return out


def _choice(c: int, part: dict[str, Any], finish: str | None) -> list[dict[str, Any]]:
    return [{"index": c, **part, "logprobs": None, "finish_reason": finish}]


def _stream_choices(plan: Plan) -> list[tuple[int, list[dict[str, Any]]]]:
    """(token position, choice objects) per event, before the usage chunk."""
    choices = range(plan.n)
    events: list[tuple[int, list[dict[str, Any]]]] = []
    if plan.kind == "chat":
        role = {"delta": {"role": "assistant", "content": ""}}
        events += [(0, _choice(c, role, None)) for c in choices]
    last_i = len(plan.pieces) - 1 + (2 if plan.tool_call else 0)
    for i, (ch, t) in enumerate(plan.pieces):
        events += [(i, [_delta_choice(plan, c, i, ch, t, i == last_i)]) for c in choices]
    if plan.tool_call:
        name, args = plan.tool_call
        head = _tool_json(plan) | {"index": 0, "function": {"name": name, "arguments": ""}}
        rest = {"index": 0, "function": {"arguments": args}}
        pos = len(plan.pieces)
        events += [(pos, _choice(c, {"delta": {"tool_calls": [head]}}, None)) for c in choices]
        events += [
            (pos + 1, _choice(c, {"delta": {"tool_calls": [rest]}}, plan.finish_reason))
            for c in choices
        ]
    if last_i < 0:  # nothing generated: one closing event per choice
        empty: dict[str, Any] = {"delta": {}} if plan.kind == "chat" else {"text": ""}
        events += [(0, _choice(c, empty, plan.finish_reason)) for c in choices]
    return events


@dataclass(frozen=True)
class StreamTemplate:
    """Pre-rendered SSE events split around the id placeholder."""

    events: tuple[tuple[bytes, ...], ...]
    positions: tuple[int, ...]
    whole: tuple[bytes, ...]
    last_position: int


@lru_cache(maxsize=512)
def stream_template(plan: Plan, created: int) -> StreamTemplate:
    """Render every chunk of ``plan``'s stream once per second of ``created``."""
    head = _head(plan, created, True)
    rendered = [
        (pos, b"data: " + orjson.dumps(head | {"choices": ch}) + b"\n\n")
        for pos, ch in _stream_choices(plan)
    ]
    at = min(2, len(rendered))
    if "invalid_json" in plan.faults:
        rendered.insert(at, (rendered[at - 1][0], b'data: {"id": "' + _ID_MARK_B + b'", "cho\n\n'))
    if "malformed_sse" in plan.faults:
        bad = b'data: {"choices": [\nthis line is not an SSE field\n\n'
        rendered.insert(at, (rendered[at - 1][0], bad))
    events = tuple(tuple(ev.split(_ID_MARK_B)) for _, ev in rendered)
    whole = tuple(b"".join(ev for _, ev in rendered).split(_ID_MARK_B))
    positions = tuple(p for p, _ in rendered)
    return StreamTemplate(events, positions, whole, max(positions, default=0))


def usage_event(plan: Plan, created: int, rid: str, usage: dict) -> bytes:
    """The final stream chunk: empty choices plus usage."""
    head = _head(plan, created, True)
    head["id"] = head["id"].replace(ID_MARK, rid)
    return b"data: " + orjson.dumps(head | {"choices": [], "usage": usage}) + b"\n\n"


def error_body(status: int, message: str) -> bytes:
    """An OpenAI-style error envelope."""
    kind = {
        400: "BadRequestError",
        401: "AuthenticationError",
        404: "NotFoundError",
        429: "RateLimitError",
    }.get(status, "InternalServerError" if status >= 500 else "Error")
    return orjson.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}
    )


def embedding_of(text_id: int, dims: int) -> list[float]:
    """A deterministic unit-ish vector for one input."""
    return [round(((text_id * 31 + 7 * k) % 1000) / 1000.0 - 0.5, 6) for k in range(dims)]


# ---------------------------------------------------------------- server


def response_body(plan: Plan, prompt_tokens: int, cached_tokens: int) -> bytes:
    """A non-stream /v1/responses answer of `plan`."""
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
            "input_tokens": prompt_tokens,
            "output_tokens": plan.completion_per_choice,
            "total_tokens": prompt_tokens + plan.completion_per_choice,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens_details": {"reasoning_tokens": plan.reasoning_count},
        },
    }
    return orjson.dumps(out)


def embeddings_body(
    items: Sequence[Any], dims: int, base64_: bool, model: str, prompt_tokens: int
) -> bytes:
    """A /v1/embeddings answer: one vector per input item, seeded by the item itself."""
    data = []
    for i, item in enumerate(items):
        vec: Any = embedding_of(zlib.crc32(orjson.dumps(item)), dims)
        if base64_:
            vec = base64.b64encode(array.array("f", vec).tobytes()).decode()
        data.append({"index": i, "object": "embedding", "embedding": vec})
    out = {
        "id": f"embd-{os.urandom(16).hex()}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
        },
    }
    return orjson.dumps(out)
