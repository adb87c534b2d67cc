"""`GET /v1/models` in the Anthropic Models API's shape, for a client that says `anthropic-version`.

Anthropic's SDKs and Claude Code send the `anthropic-version` header on every request; the same
path answers OpenAI's clients in OpenAI's shape (gateway/edge/api.py). A route is a `ModelInfo`:
`type: "model"`, its public name as `id` and `display_name`, `created_at` as an RFC 3339 time
(the epoch: the gateway knows no release date, which Anthropic's docs allow) and, when known,
its context window as `max_input_tokens`. The list is one page: `has_more` false, `first_id` and
`last_id` its ends.
"""

from __future__ import annotations

from typing import Any

VERSION_HEADER = "anthropic-version"
EPOCH = "1970-01-01T00:00:00Z"


def wants_anthropic(headers: Any) -> bool:
    """Whether a request's headers say it comes from an Anthropic client."""
    return bool(headers.get(VERSION_HEADER))


def model_info(entry: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI model entry (`api.model_entry`) as an Anthropic `ModelInfo`."""
    info: dict[str, Any] = {
        "type": "model",
        "id": entry["id"],
        "display_name": entry["id"],
        "created_at": EPOCH,
    }
    if entry.get("context_window") is not None:
        info["max_input_tokens"] = entry["context_window"]
    return info


def model_list(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The Anthropic list page of `entries` (OpenAI model entries)."""
    data = [model_info(e) for e in entries]
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }
