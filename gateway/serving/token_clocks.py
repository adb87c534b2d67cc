"""A stream tap's clocks and counts: the first-token and first-answer times, the inter-token
gaps, and the tokens counted when the upstream reports no usage (`StreamTap`'s, in
gateway/serving/tap.py, which sets the state this reads)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.ledger.percentile import percentile
from gateway.ledger.record import Record


class TokenClocks:
    record: Record
    _prompt_tokens: Callable[[], int] | None
    _last_token_at: float | None
    _gaps: list[float]
    _saw_usage: bool
    _reasoning_events: int
    _token_events: int

    def _token(self, now: float, reasoning: Any, answered: bool) -> None:
        """A token event arrived at `now`: the first-token clocks and the inter-token gaps."""
        record = self.record
        self._token_events += 1
        if reasoning:
            self._reasoning_events += 1
        if record.ttft_s is None:
            record.ttft_s = now - record.t0
        if answered and record.ttfa_s is None:
            record.ttfa_s = now - record.t0
        if self._last_token_at is not None:
            self._gaps.append(now - self._last_token_at)
        self._last_token_at = now

    def _close_clocks(self) -> None:
        record = self.record
        record.e2e_s = time.perf_counter() - record.t0
        if self._gaps:
            record.itl_mean_s = sum(self._gaps) / len(self._gaps)
            record.itl_p99_s = percentile(self._gaps, 0.99)
        if not self._saw_usage:
            # The upstream sent no usage (llama.cpp never does, a broken stream may not have):
            # count what streamed, and estimate the prompt from the request.
            record.completion_tokens = self._token_events
            record.reasoning_tokens = self._reasoning_events
            if record.prompt_tokens == 0 and self._prompt_tokens is not None:
                record.prompt_tokens = self._prompt_tokens()
            record.usage_estimated = True
        elif record.reasoning_tokens == 0 and self._reasoning_events:
            # vLLM reports no reasoning_tokens in usage: one streamed delta is one token.
            record.reasoning_tokens = self._reasoning_events
        record.check_invariants()
