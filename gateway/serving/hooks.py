"""What the request path hands to the checks above it, without importing them.

The taps publish what an answer says to an `AnswerSink` (trust's `Capture` is one); a `Sampler`
decides per request whether there is one (trust's `TextSampler`); a `Mirror` is shown each
request and then its answer (trust's `ShadowMirror`); routing reads the quality gate's latest
`GateChoice` for a route (trust's `GateDecision`). The app (gateway/edge/app.py) wires the real
ones in; the request path only calls these faces.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.ledger.record import Record

# The mirror's own handle on one mirrored request (trust's `Pending`), handed back to it as is.
Mirrored = Any


class AnswerSink(Protocol):
    """Takes choice 0's streamed deltas, texts or whole messages, then the answer's end."""

    keep_text: bool

    def text(self, index: int, piece: Any) -> None: ...
    def delta(self, index: int, delta: dict[str, Any]) -> None: ...
    def message(self, index: int, message: dict[str, Any]) -> None: ...
    def answered(self, body: bytes, *, failed: bool = False) -> None: ...
    def finish(self) -> None: ...


class Sampler(Protocol):
    """Decides per request whether its answer goes to a sink."""

    def start(
        self,
        record: Record,
        body: dict[str, Any],
        *,
        always: bool = False,
        prompt: bytes | None = None,
    ) -> AnswerSink | None: ...


class Mirror(Protocol):
    """Shown each request (a handle back if it mirrors it) and then the primary's answer."""

    def consider(
        self, model: str, path: str, body: dict[str, Any], record: Record
    ) -> Mirrored | None: ...
    def primary_done(self, pending: Mirrored, record: Record, capture: Any) -> None: ...


class GateChoice(Protocol):
    """The quality gate's latest decision for a route: the upstream it put first, if any."""

    @property
    def chosen(self) -> str | None: ...
