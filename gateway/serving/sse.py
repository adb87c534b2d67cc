"""Server-sent events in a byte stream: whole events cut from what arrived, and an event's data."""

from __future__ import annotations


def cut_events(held: bytes, block: bytes) -> tuple[bytes, bytes]:
    """(the whole SSE events in `held + block`, line ends made `\n`, ending with the blank line
    after the last; what is left of a partial event, to hold until the next block)."""
    data = held + block
    if b"\r" in data:  # one byte is looked for with memchr; two are not
        data = data.replace(b"\r\n", b"\n")
    cut = data.rfind(b"\n\n")
    if cut < 0:
        return b"", data
    return data[: cut + 2], data[cut + 2 :]


def data_of(event: bytes) -> bytes | None:
    """The payload of an event's (last) `data:` line; None when it has none."""
    if b"\n" not in event:  # the common event: one line
        return event[5:].strip() if event.startswith(b"data:") else None
    payload = None
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
    return payload
