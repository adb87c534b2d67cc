"""The record: one per client request, the single source of truth.

The relay's taps fill it in while bytes flow; when the request ends it is handed to the
record sinks (store queue, metrics, watchdogs). Store rows, Prometheus series, cost and
reports are all derived from these fields, so they cannot disagree.

Clocks are `time.perf_counter()` readings; the derived latencies are in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from time import perf_counter
from time import time as wall_clock
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gateway.telemetry import Trace

# Which traffic a record is: a client's request, the gateway's own eval rounds, or a shadow copy
# of a client's request. Every request, token and cost series and view keeps them apart; the
# views show the client lane unless asked for another.
CLIENT = "client"
LANES = (CLIENT, "eval", "shadow")


@dataclass(slots=True)
class Attempt:
    """One HTTP call to an upstream and how it ended."""

    upstream: str
    # ok | connect_error (no connection) | dropped (connected, closed before an answer) |
    # ttft_timeout (no first byte) | timeout (a whole answer's body unfinished) | http_<status> |
    # stream_error (the connection failed while the answer was read) | malformed |
    # upstream_error (a 200 that is an error) | cancelled
    outcome: str
    status: int | None = None
    elapsed_s: float = 0.0


@dataclass(slots=True)
class Record:
    request_id: str
    door: str  # chat | completions | responses | messages | embeddings
    model: str
    stream: bool
    time: float = field(default_factory=wall_clock)  # wall clock at accept (epoch seconds)
    key_id: str | None = None
    lane: str = "client"  # client | eval | shadow (`LANES`)
    upstream: str | None = None
    provider: str | None = None
    engine: str | None = None  # the serving stack behind the upstream (gateway/serving/engine.py)
    # The request's task shape (gateway/serving/shape.py); None where it never reached routing.
    shape: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    status: int = 0
    error_class: str | None = None
    finish_reason: str | None = None
    truncated: bool = False
    reasoning_leak: bool = False
    max_tokens: int | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    usage_estimated: bool = False
    # Latency clocks (seconds). None when the event never happened (e.g. no answer token).
    queue_s: float | None = None  # accept -> first upstream dispatch
    ttft_s: float | None = None  # accept -> first token (reasoning or answer) to the client
    ttfa_s: float | None = None  # accept -> first answer token (after reasoning)
    e2e_s: float | None = None  # accept -> last byte
    itl_mean_s: float | None = None
    itl_p99_s: float | None = None
    chunks: int = 0
    cost_usd: float | None = None  # computed from the price table
    charged_cost_usd: float | None = None  # what the provider said it charged (usage.cost)
    params_hash: str | None = None
    dropped: str | None = None  # fields the door dropped and marked, comma-joined (doors/policy)
    clamped: str | None = None  # caps cut to the upstream's window: max_tokens=32000->7000
    # Values that could not be recorded as given, comma-joined `field:what` (`max_tokens:list`):
    # stored as NULL or cut to fit instead (gateway/ledger/columns.py).
    coerced: str | None = None
    # The request's meaning (gateway/serving/semantics.py; eval and shadow lanes only), what of it
    # the upstream could not be told and what of that the route accepts
    # (gateway/serving/dialect.py): readable text.
    semantics: str | None = None
    unsent: str | None = None  # "api-b cannot be sent top_k=20 (kind openai)", "; "-joined
    accepted_unequal: str | None = None
    tool_calls: int = 0
    # Trust flags (gateway/trust/watchdog.py, gateway/trust/shadow.py).
    sampled: bool = False  # the answer text was captured and checked for degeneration
    degenerate: bool = False  # the sampled answer tripped gateway.serving.degeneration
    tool_call_error: str | None = None  # invalid_json | unknown_tool | schema (first problem)
    provider_mismatch: bool = False  # answered by a provider other than the pinned one
    cost_drift: bool = False  # charged cost differs from the computed one beyond the threshold
    # Reasoning came back although the request asked for none (`thinking_off`).
    unasked_reasoning: bool = False
    shadow_of: str | None = None  # lane "shadow": the primary request's id
    agreement: str | None = (
        None  # lane "shadow": agreement with the primary (gateway/trust/shadow.py)
    )
    # The request's OpenTelemetry trace id (32 hex digits; gateway/telemetry.py), beside its
    # request id; None with tracing off.
    trace_id: str | None = None
    # Monotonic accept time, not stored.
    t0: float = field(default_factory=perf_counter, repr=False)
    # The request asked not to think (gateway/trust/watchdog.py: asked_not_to_think); not stored.
    thinking_off: bool = field(default=False, repr=False)
    # The prompt's tokens by the upstream's tokenizer, where dispatch counted them near the
    # window (gateway/serving/tokenizer.py); not stored (the upstream's usage is).
    prompt_counted: int | None = field(default=None, repr=False)
    # The request's trace (gateway/telemetry.py `Trace`) while it is served; not stored.
    trace: Trace | None = field(default=None, repr=False, compare=False)

    def as_row(self) -> dict[str, Any]:
        """Every stored field (not `t0`); attempts as plain dicts. Built by hand: `asdict`'s
        recursive deep copy cost more than the rest of recording a request."""
        row = {name: getattr(self, name) for name in _ROW_FIELDS}
        row["attempts"] = [
            {
                "upstream": a.upstream,
                "outcome": a.outcome,
                "status": a.status,
                "elapsed_s": a.elapsed_s,
            }
            for a in self.attempts
        ]
        return row

    def check_invariants(self) -> None:
        """Token counts that cannot be true are clamped and flagged rather than stored."""
        if self.cached_tokens > self.prompt_tokens:
            self.cached_tokens = self.prompt_tokens
            self.usage_estimated = True
        if self.reasoning_tokens > self.completion_tokens:
            self.reasoning_tokens = self.completion_tokens
            self.usage_estimated = True


_UNSTORED = ("t0", "thinking_off", "prompt_counted", "trace")
_ROW_FIELDS = tuple(f.name for f in fields(Record) if f.name not in _UNSTORED)


class RecordSink(Protocol):
    """Anything that takes finished records (store queue, metrics, watchdogs). Must not block."""

    def submit(self, record: Record) -> None: ...
