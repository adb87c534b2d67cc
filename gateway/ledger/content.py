"""A request's stored content (`[store] store_content`): what the client sent and got back, as
a `contents` row, each field capped at `content_max_bytes`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Content:
    """What the client sent and got back, for the `contents` table."""

    request_id: str
    time: float
    prompt: str | None
    response: str | None

    def as_row(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "time": self.time,
            "prompt": self.prompt,
            "response": self.response,
        }


def capped(data: bytes | str | None, max_bytes: int) -> str | None:
    """A stored content field: `data` as text (UTF-8, undecodable bytes replaced), at most
    `max_bytes` bytes of it, a longer one cut there and marked with how long it was."""
    if data is None:
        return None
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) <= max_bytes:
        return raw.decode("utf-8", "replace") if isinstance(data, bytes) else data
    kept = raw[:max_bytes].decode("utf-8", "ignore")  # a character cut in two is left out
    return f"{kept}\n[plumbline: truncated at {max_bytes} of {len(raw)} bytes]"
