"""The bounded prefix index behind prefix-affinity routing.

A prompt is cut into fixed-size character blocks; block i's key chains the hash of every block
before it (as vLLM's prefix cache chains token blocks), so a key stands for a whole prefix. After
a request is dispatched, its keys are remembered against the replica that got it; a later request
is sent to the replica that holds its *longest* remembered prefix. The index is an LRU capped at a
fixed number of keys — an unbounded index is how such routers run out of memory.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import orjson


def prompt_text(body: dict[str, Any]) -> bytes:
    """The bytes whose prefix matters: chat messages in order, or the completion prompt."""
    messages = body.get("messages")
    if messages is not None:
        return orjson.dumps(messages)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt.encode()
    return orjson.dumps(prompt) if prompt is not None else b""


def block_keys(text: bytes, block: int, max_blocks: int) -> list[bytes]:
    """Chained keys of each complete block (at most `max_blocks`)."""
    keys: list[bytes] = []
    h = hashlib.blake2b(digest_size=12)
    for i in range(min(len(text) // block, max_blocks)):
        h.update(text[i * block : (i + 1) * block])
        keys.append(h.copy().digest())
    return keys


class PrefixIndex:
    def __init__(self, capacity: int, block: int = 256, max_blocks: int = 64):
        self.capacity = capacity
        self.block = block
        self.max_blocks = max_blocks
        self._owners: OrderedDict[bytes, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def keys_for(self, body: dict[str, Any]) -> list[bytes]:
        return block_keys(prompt_text(body), self.block, self.max_blocks)

    def owner(self, keys: list[bytes]) -> str | None:
        """The replica holding the longest known prefix, if any."""
        for key in reversed(keys):
            name = self._owners.get(key)
            if name is not None:
                self._owners.move_to_end(key)
                return name
        return None

    def remember(self, keys: list[bytes], upstream: str) -> None:
        for key in keys:
            self._owners[key] = upstream
            self._owners.move_to_end(key)
        while len(self._owners) > self.capacity:
            self._owners.popitem(last=False)
