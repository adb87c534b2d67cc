"""A scheduled round's outcome: how it ended, and why, in words safe to show anywhere.

A round that raises (the gateway refused its key, an upstream is down for the whole round, the
suite cannot be built) is `failed`, with the error's class (`http_401`, `connection`, or the
exception's type) and its message, masked of anything shaped like a credential and of the eval
lane's own key. A round whose every scored item failed is failed too, with the first item's
class and message: a round that measured nothing is not "ok". These go to the store
(`eval_rounds`), to /health (this gateway's rounds) and from there to the console and `plumbline
report health` (`gateway/ledger/rounds.py`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gateway.serving.redaction import mask
from gateway.trust.evidence import ArmEvidence

if TYPE_CHECKING:
    from evals.result import ItemResult
    from gateway.trust.gate import GateDecision

HISTORY = 10  # rounds this gateway remembers for /health


@dataclass(slots=True)
class RoundOutcome:
    started: float
    finished: float | None = None
    outcome: str = "running"  # running | ok | failed
    error_class: str | None = None
    error: str | None = None
    # Per target label: its tripwire verdict, whether it passed, and why not (evals/tripwire.py).
    tripwire: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Per target label: items scored, and of them failed (error or timeout).
    items: dict[str, dict[str, int]] = field(default_factory=dict)

    def failed(self, error_class: str, message: str) -> None:
        self.outcome, self.error_class, self.error = "failed", error_class, message

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def failure_of(error: BaseException, secrets: Sequence[str] = ()) -> tuple[str, str]:
    """(class, message) of what ended a round, the message masked (`mask`) of `secrets` and of
    anything shaped like a key."""
    import openai  # the eval suite's client: loaded with the round, never with the gateway

    if isinstance(error, openai.APIStatusError):
        body = error.body
        said = body.get("message") if isinstance(body, dict) else None
        kind, text = f"http_{error.status_code}", str(said or error.message)
    elif isinstance(error, openai.APIConnectionError):
        kind, text = "connection", str(error)
    else:
        kind, text = type(error).__name__, str(error) or type(error).__name__
    return kind[:64], mask(text, secrets, limit=500)


def silent_targets(results: Sequence[ItemResult]) -> dict[str, dict[str, int]]:
    """Per target: items and failed items (no answer scored: `error` or `timeout`)."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        counts = out.setdefault(r.target, {"items": 0, "failed": 0})
        counts["items"] += 1
        counts["failed"] += r.outcome in ("error", "timeout")
    return out


def judge_items(outcome: RoundOutcome, results: Sequence[ItemResult]) -> None:
    """Count a run's items into the round; a round none of whose items was answered failed,
    with the first failed item's class and message (already masked by the runner)."""
    for target, counts in silent_targets(results).items():
        mine = outcome.items.setdefault(target, {"items": 0, "failed": 0})
        mine["items"] += counts["items"]
        mine["failed"] += counts["failed"]
    answered = [r for r in results if r.outcome not in ("error", "timeout")]
    if results and not answered and outcome.outcome != "failed":
        first = results[0]
        outcome.failed(first.error_class or "error", mask(first.error or "", (), limit=500))


class RoundHistory:
    """The rounds this gateway ran, newest last (bounded)."""

    def __init__(self) -> None:
        self.rounds: deque[RoundOutcome] = deque(maxlen=HISTORY)

    def begin(self, now: float | None = None) -> RoundOutcome:
        outcome = RoundOutcome(time.time() if now is None else now)
        self.rounds.append(outcome)
        return outcome

    @property
    def last(self) -> RoundOutcome | None:
        return self.rounds[-1] if self.rounds else None

    def view(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in reversed(self.rounds)]


def tripwire_rows(
    reports: dict[str, Any], run: str, source: str, now: float
) -> list[dict[str, Any]]:
    """`gateway.ledger.rounds.keep_tripwires` rows of `reports` (label -> TripwireReport)."""
    return [
        {
            "time": now,
            "target": label,
            "run": run,
            "source": source,
            "verdict": r.verdict,
            "passed": r.passed,
            "report": r.to_dict(),
        }
        for label, r in reports.items()
    ]


def refused_by_tripwire(decision: GateDecision, failed: dict[str, str]) -> GateDecision:
    """`decision` with an evidence row for each upstream the tripwire kept out of the round
    (upstream -> why): not eligible, never scored. With nothing scored at all, the reason
    says so."""
    if not failed:
        return decision
    arms = decision.arms + tuple(
        ArmEvidence(up, 0, 0, 0.0, (0.0, 0.0), None, why=f"refused: failed the tripwire: {why}")
        for up, why in failed.items()
    )
    reason = decision.reason
    if not decision.arms:
        reason = f"no eval results: {', '.join(sorted(failed))} failed the tripwire"
    return replace(decision, arms=arms, reason=reason)
