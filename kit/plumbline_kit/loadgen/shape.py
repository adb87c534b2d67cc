"""Workload shapes: a shared prefix, unique input and output token counts, named or custom."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """A workload shape: a shared prefix (tokens), then unique input, then output tokens."""

    name: str
    input: int
    output: int
    prefix: int = 0

    def __post_init__(self) -> None:
        if self.input < 1 or self.output < 1 or self.prefix < 0:
            raise ValueError(f"shape {self.name!r}: input and output must be >= 1, prefix >= 0")


SHAPES: Mapping[str, Shape] = {
    "router": Shape("router", 1024, 128),
    "promptopt": Shape("promptopt", 512, 256, prefix=3072),
    "judge": Shape("judge", 4096, 512),
    "short": Shape("short", 256, 64),
    "rollout": Shape("rollout", 8192, 2048),
}

_CUSTOM_SHAPE = re.compile(r"^(?:(\d+)\+)?(\d+)/(\d+)$")


def parse_shape(text: str) -> Shape:
    """A named shape (``router``) or a custom one (``IN/OUT`` or ``PREFIX+IN/OUT``)."""
    text = text.strip()
    if text in SHAPES:
        return SHAPES[text]
    match = _CUSTOM_SHAPE.match(text)
    if not match:
        names = ", ".join(SHAPES)
        raise ValueError(f"unknown shape {text!r}: use one of {names}, IN/OUT or PREFIX+IN/OUT")
    prefix, inp, out = match.groups()
    return Shape(text, int(inp), int(out), int(prefix or 0))


def parse_concurrencies(text: str) -> list[int]:
    """``"1,8,64"`` → ``[1, 8, 64]``; every level must be at least 1."""
    levels = [int(part) for part in text.split(",") if part.strip()]
    if not levels or min(levels) < 1:
        raise ValueError(f"concurrency list {text!r} must hold integers >= 1")
    return levels
