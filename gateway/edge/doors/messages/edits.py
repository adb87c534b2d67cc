"""Context editing (`context_management.edits`), applied by the gateway as Anthropic's API does
before the prompt reaches the model (https://platform.claude.com/docs/en/build-with-claude/
context-editing), since no chat upstream does it.

- ``clear_thinking_20251015`` (`keep`: ``"all"`` or ``{"type": "thinking_turns", "value": N}``,
  default 1): thinking blocks of the assistant turns before the last N that have any are dropped.
  ``keep: "all"`` (what Claude Code sends) clears nothing.
- ``clear_tool_uses_20250919`` (`trigger` input tokens, default 100 000; `keep` tool uses,
  default 3; `clear_at_least` input tokens; `exclude_tools`; `clear_tool_inputs`): once the prompt
  is over the trigger, the results of all but the last `keep` tool uses (of tools not excluded)
  are replaced by a placeholder, and with `clear_tool_inputs` their inputs too; nothing is
  cleared when that would free less than `clear_at_least`.

Token counts here are estimates, 4 bytes of the request's JSON a token (the gateway sees no
tokenizer before routing). `apply` returns the edits that changed something, as the answer's
`context_management.applied_edits` reports them, and the edit types it does not know.
"""

from __future__ import annotations

from typing import Any

import orjson

CLEARED = "[This tool result was cleared by context management to save context.]"
BYTES_PER_TOKEN = 4


def tokens(value: Any) -> int:
    """An estimate of the tokens `value` takes in a prompt."""
    return len(orjson.dumps(value)) // BYTES_PER_TOKEN


def _value(setting: Any, default: int) -> int:
    if isinstance(setting, dict) and isinstance(setting.get("value"), int):
        return int(setting["value"])
    return default


def apply(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Apply `body`'s context edits to its `messages` (in place); (applied edits, unknown)."""
    config = body.get("context_management")
    edits = config.get("edits") if isinstance(config, dict) else None
    applied: list[dict[str, Any]] = []
    unknown: list[str] = []
    for edit in edits if isinstance(edits, list) else ():
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind == "clear_thinking_20251015":
            done = clear_thinking(body["messages"], edit.get("keep", None))
        elif kind == "clear_tool_uses_20250919":
            done = clear_tool_uses(body, edit)
        else:
            unknown.append(f"context_management[{kind}]")
            continue
        if done is not None:
            applied.append(done)
    return applied, unknown


def clear_thinking(messages: list[dict[str, Any]], keep: Any) -> dict[str, Any] | None:
    if keep == "all":
        return None
    kept = _value(keep, 1)
    turns = [
        m
        for m in messages
        if m.get("role") == "assistant"
        and isinstance(m.get("content"), list)
        and any(_thinking(b) for b in m["content"])
    ]
    older = turns[: max(0, len(turns) - kept)]
    freed = 0
    for message in older:
        freed += sum(tokens(b) for b in message["content"] if _thinking(b))
        message["content"] = [b for b in message["content"] if not _thinking(b)]
    if not older:
        return None
    return {
        "type": "clear_thinking_20251015",
        "cleared_thinking_turns": len(older),
        "cleared_input_tokens": freed,
    }


def _thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")


def _tool_results(
    messages: list[dict[str, Any]],
) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every tool_result block in order, with the tool_use block it answers (if any)."""
    uses: dict[str, dict[str, Any]] = {}  # tool_use id -> its block
    results: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for message in messages:
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                uses[str(block.get("id"))] = block
            elif block.get("type") == "tool_result":
                results.append((block, uses.get(str(block.get("tool_use_id")))))
    return results


def clear_tool_uses(body: dict[str, Any], edit: dict[str, Any]) -> dict[str, Any] | None:
    trigger = _value(edit.get("trigger"), 100_000)
    prompt = tokens([body.get("system"), body["messages"], body.get("tools")])
    if prompt < trigger:
        return None
    excluded = set(edit.get("exclude_tools") or ())
    results = _tool_results(body["messages"])
    kept = _value(edit.get("keep"), 3)
    older = results[: max(0, len(results) - kept)]
    chosen = [
        (r, u)
        for r, u in older
        if r.get("content") != CLEARED and (u is None or u.get("name") not in excluded)
    ]
    freed = 0
    for result, use in chosen:
        freed += tokens(result.get("content")) - tokens(CLEARED)
        if edit.get("clear_tool_inputs") and use is not None:
            freed += tokens(use.get("input"))
    if not chosen or freed < _value(edit.get("clear_at_least"), 0):
        return None
    for result, use in chosen:
        result["content"] = CLEARED
        if edit.get("clear_tool_inputs") and use is not None:
            use["input"] = {}
    return {
        "type": "clear_tool_uses_20250919",
        "cleared_tool_uses": len(chosen),
        "cleared_input_tokens": max(0, freed),
    }
