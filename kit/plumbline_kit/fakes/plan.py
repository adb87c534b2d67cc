"""The plan of a fake answer (`plumbline_kit/fakes/upstream.py`): from a request and its behaviour,
the answer's tokens, reasoning, tool call, finish reason and the prompt's "tokens" (whitespace
pieces, as ``/tokenize`` and ``usage.prompt_tokens`` agree).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from plumbline_kit.fakes.text import realistic_words

DEFAULT_TOKENS = 16
DEFAULT_REASONING_TOKENS = 8


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
    passage (`plumbline_kit/fakes/text.py`), or ``tok0 tok1 ...``."""
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
