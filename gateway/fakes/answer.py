"""What the fake upstream answers (`gateway/fakes/upstream.py`): behaviours and their checks, the
plan of an answer (its tokens, reasoning, tool call, finish reason and usage), and its bodies,
rendered once as templates that only the request id is substituted into.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from gateway.fakes.text import realistic_words

ID_MARK = "__FAKEID__"
_ID_MARK_B = ID_MARK.encode()
DEFAULT_TOKENS = 16
DEFAULT_REASONING_TOKENS = 8
DEFAULT_HANG = 30.0
DONE = b"data: [DONE]\n\n"

# ---------------------------------------------------------------- behaviour


class BehaviourError(ValueError):
    """A behaviour object that names an unknown key or has a value of the wrong type."""


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "status": lambda v: isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 599,
    "message": lambda v: isinstance(v, str),
    "retry_after": lambda v: _num(v) or isinstance(v, str),  # seconds, or an HTTP date
    "body": lambda v: isinstance(v, str),
    "drop_connection": lambda v: isinstance(v, bool),
    "hang_before_first_byte": _num,
    "hang_after_chunks": _count,
    "hang": _num,
    "disconnect_after_chunks": _count,
    "malformed_sse": lambda v: isinstance(v, bool),
    "invalid_json": lambda v: isinstance(v, bool),
    "tokens": _count,
    "text": lambda v: isinstance(v, str),
    "degenerate": lambda v: isinstance(v, bool),
    "realistic": lambda v: isinstance(v, bool),
    "pace_tps": lambda v: _num(v) and v > 0,
    "leak_think": lambda v: isinstance(v, bool) or v == "close_only",
    "reasoning_field": lambda v: v in ("reasoning", "reasoning_content", "both"),
    "reasoning_tokens": _count,
    "no_usage": lambda v: isinstance(v, bool),
    "cached_tokens": _count,
    "cost": _num,
    "provider": lambda v: isinstance(v, str),
    "ignore_params": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
    "tool_call": lambda v: (
        isinstance(v, bool)
        or (
            isinstance(v, dict)
            and isinstance(v.get("name"), str)
            and set(v) <= {"name", "arguments"}
        )
    ),
    "finish_reason": lambda v: isinstance(v, str),
    "harness": lambda v: (
        isinstance(v, bool)
        or (
            isinstance(v, list)
            and all(
                isinstance(c, dict)
                and isinstance(c.get("name"), str)
                and set(c) <= {"name", "arguments"}
                for c in v
            )
        )
    ),
}
BEHAVIOUR_KEYS = frozenset(_CHECKS)


def validate_behaviour(obj: Any) -> dict[str, Any]:
    """Return ``obj`` as a behaviour dict, or raise ``BehaviourError`` naming what is wrong."""
    if not isinstance(obj, dict):
        raise BehaviourError(f"a behaviour must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - BEHAVIOUR_KEYS)
    if unknown:
        raise BehaviourError(f"unknown behaviour keys {unknown}; known: {sorted(BEHAVIOUR_KEYS)}")
    for key, value in obj.items():
        if value is not None and not _CHECKS[key](value):
            raise BehaviourError(f"behaviour key {key!r} has an invalid value {value!r}")
    return dict(obj)


def overlay(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``top``; a ``None`` in ``top`` removes the key."""
    merged = {**base, **top}
    return {k: v for k, v in merged.items() if v is not None}


# ---------------------------------------------------------------- requests and plans


class RequestError(Exception):
    """A request the fake rejects the way vLLM would: status plus message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def text_of(content: Any) -> str:
    """The text of a message ``content`` (a string or a list of typed parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def prompt_units(body: dict[str, Any]) -> Sequence[str | int]:
    """The prompt's tokens: words of ``messages``/``prompt``/``input`` text, or given token ids."""
    if "messages" in body:
        msgs = body["messages"]
        return " ".join(text_of(m.get("content")) for m in msgs if isinstance(m, dict)).split()
    prompt = body.get("prompt", body.get("input", ""))
    units: list[str | int] = []
    for item in prompt if isinstance(prompt, list) else [prompt]:
        if isinstance(item, int):
            units.append(item)
        elif isinstance(item, list):
            units.extend(t for t in item if isinstance(t, int))
        elif isinstance(item, str):
            units.extend(item.split())
    return units


def prompt_token_ids(body: dict[str, Any]) -> list[int]:
    """Token ids of a request body, as ``/tokenize`` reports them (a hash per word)."""
    return [u if isinstance(u, int) else zlib.crc32(u.encode()) % 50000 for u in prompt_units(body)]


@dataclass(frozen=True)
class Plan:
    """What one generation request produces, independent of its id and timestamp."""

    kind: str  # "chat" | "completion"
    model: str
    pieces: tuple[tuple[str, str], ...]  # (channel "r"easoning | "c"ontent, token text)
    finish_reason: str
    stop_reason: str | None
    n: int
    logprobs: int | None  # None: not asked; else the number of top alternatives
    tool_call: tuple[str, str] | None
    reasoning_field: str | None
    faults: tuple[str, ...]  # "malformed_sse", "invalid_json"
    # A completion with ``echo``: the prompt's words, returned (non-stream) before the answer with
    # logprobs at every position but the first, as vLLM returns prompt logprobs.
    echo: tuple[str, ...] = ()

    @property
    def reasoning_count(self) -> int:
        return sum(1 for ch, _ in self.pieces if ch == "r") if self.reasoning_field else 0

    @property
    def completion_per_choice(self) -> int:
        tool = max(1, len("".join(self.tool_call)) // 4) if self.tool_call else 0
        return len(self.pieces) + tool


def _words(words: list[str]) -> list[str]:
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


@lru_cache(maxsize=256)
def answer_pieces(
    text: str | None, tokens: int, degenerate: bool, realistic: bool = False
) -> tuple[tuple[str, str], ...]:
    """The answer's tokens: ``text`` words, degenerate repetition, pieces of a realistic
    passage (`gateway/fakes/text.py`), or ``tok0 tok1 ...``."""
    if realistic and text is None:
        return tuple(("c", t) for t in realistic_words(tokens))
    if text is not None:
        words = text.split()
    elif degenerate:
        words = [("111", "222", "333", "444")[i % 4] for i in range(tokens)]
    else:
        words = [f"tok{i}" for i in range(tokens)]
    return tuple(("c", t) for t in _words(words))


@lru_cache(maxsize=64)
def reasoning_words(count: int) -> tuple[str, ...]:
    """The reasoning's tokens: ``thought0 thought1 ...``."""
    return tuple(_words([f"thought{i}" for i in range(count)]))


def int_param(body: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise RequestError(400, f"{name} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def cut_at_stop(pieces: list[tuple[str, str]], stops: list[str]) -> tuple[list, str | None]:
    """Cut content pieces before the earliest stop string; return (pieces, matched stop)."""
    if not stops:
        return pieces, None
    text, starts = "", []
    for ch, t in pieces:
        starts.append(len(text))
        text += t if ch == "c" else ""
    hits = [(text.find(s), s) for s in stops if s and s in text]
    if not hits:
        return pieces, None
    at, stop = min(hits)
    kept: list[tuple[str, str]] = []
    for (ch, t), start in zip(pieces, starts, strict=True):
        if ch == "c" and start + len(t) > at:
            if start < at:
                kept.append((ch, t[: at - start]))
            break
        kept.append((ch, t))
    return kept, stop


def _tool_call(body: dict[str, Any], beh: dict[str, Any]) -> tuple[str, str] | None:
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    spec = beh.get("tool_call")
    if isinstance(spec, dict):
        args = spec.get("arguments", {})
        return spec["name"], args if isinstance(args, str) else json.dumps(args)
    wanted = spec is True or choice == "required" or isinstance(choice, dict)
    if not wanted or not tools or choice == "none":
        return None
    name = tools[0].get("function", {}).get("name", "tool")
    if isinstance(choice, dict):
        name = choice.get("function", {}).get("name", name)
    return name, "{}"


# The scripted agent session of a harness test (Codex CLI, Claude Code): the tool each harness
# offers its shell under, and the call that runs `echo plumbline-ok` with it.
HARNESS_CALLS: tuple[dict[str, Any], ...] = (
    {"name": "exec_command", "arguments": {"cmd": "echo plumbline-ok"}},
    {
        "name": "Bash",
        "arguments": {"command": "echo plumbline-ok", "description": "Print a marker"},
    },
)
HARNESS_DONE = "All done."


def harness_turn(body: dict[str, Any], calls: Any) -> dict[str, Any]:
    """The behaviour of one turn of a scripted harness session, decided by content alone (so a
    harness's retry of a request gets the same answer): after a tool result, ``All done.``; else
    a call of the first of ``calls`` (``True``: `HARNESS_CALLS`) that the request offers as a
    tool; else ``ok`` (side requests: titles, compaction)."""
    messages = body.get("messages") or []
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
        return {"text": HARNESS_DONE}
    offered = {
        t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)
    }
    for call in HARNESS_CALLS if calls is True else calls:
        if call["name"] in offered:
            return {"tool_call": {"name": call["name"], "arguments": call.get("arguments", {})}}
    return {"text": "ok"}


def make_plan(kind: str, body: dict[str, Any], beh: dict[str, Any], default_model: str) -> Plan:
    """Decide the tokens, finish reason and extras of a chat or completion request."""
    if kind == "chat" and (not isinstance(body.get("messages"), list) or not body["messages"]):
        raise RequestError(400, "messages must be a non-empty list")
    if kind == "completion" and body.get("prompt") in (None, "", []):
        raise RequestError(400, "prompt is required")
    if beh.get("harness") and kind == "chat":
        beh = {k: v for k, v in beh.items() if k != "harness"} | harness_turn(body, beh["harness"])
    cap = int_param(body, "max_completion_tokens", 1, 10**7)
    cap = cap if cap is not None else int_param(body, "max_tokens", 1, 10**7)
    n = int_param(body, "n", 1, 128) or 1
    prompts = body.get("prompt") if kind == "completion" else None
    if isinstance(prompts, list) and all(isinstance(p, str | list) for p in prompts):
        n *= len(prompts)
    if kind == "chat":
        top = int_param(body, "top_logprobs", 0, 20)
        logprobs = (top or 0) if body.get("logprobs") else None
    else:
        logprobs = int_param(body, "logprobs", 0, 20)
    leak, field = beh.get("leak_think"), beh.get("reasoning_field")
    r_words = reasoning_words(beh.get("reasoning_tokens", DEFAULT_REASONING_TOKENS))
    answer = list(
        answer_pieces(
            beh.get("text"),
            beh.get("tokens", DEFAULT_TOKENS),
            bool(beh.get("degenerate")),
            bool(beh.get("realistic")),
        )
    )
    if leak:
        think = ("" if leak == "close_only" else "<think>", *r_words, "</think>")
        answer = [("c", t) for t in think if t] + answer
        field = None
    reasoning = [("r", t) for t in r_words] if field and kind == "chat" else []
    tool = _tool_call(body, beh) if kind == "chat" else None
    stops = body.get("stop")
    stops = [stops] if isinstance(stops, str) else [s for s in stops or [] if isinstance(s, str)]
    content, stop_reason = cut_at_stop(answer, stops)
    pieces = reasoning + ([] if tool else content)
    finish = "tool_calls" if tool else "stop"
    if cap is not None and len(pieces) > cap:
        pieces, finish, tool, stop_reason = pieces[:cap], "length", None, None
    return Plan(
        kind=kind,
        model=body.get("model") or default_model,
        pieces=tuple(pieces),
        finish_reason=beh.get("finish_reason", finish),
        stop_reason=stop_reason,
        n=n,
        logprobs=logprobs,
        tool_call=tool,
        reasoning_field=field if kind == "chat" else None,
        faults=tuple(f for f in ("malformed_sse", "invalid_json") if beh.get(f)),
        echo=tuple(_words([str(u) for u in prompt_units(body)]))
        if kind == "completion" and body.get("echo")
        else (),
    )


# ---------------------------------------------------------------- rendering


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
