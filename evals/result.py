"""One scored item of one run, as the runner records it and the report reads it.

An `ItemResult` is flat and JSON-friendly so a run can be stored as JSON Lines (one result per
line) and re-read without the builder. `item_digest` is `Item.digest()`: two arms are paired
only on identical digests. `params_hash` is the hash of the request's meaning as the answering
upstream was told it (gateway/serving/semantics.py); arms whose hashes differ are not at parity
and are never paired (see `evals.stats.pair`). `semantics` is that meaning as text, `unsent` what
of it the upstream could not be told and `accepted` what of that the route accepts
(`accept_unequal`): the refusals and the reports name fields from them (`evals.parity`). `engine`
is the serving stack that answered; two runs of one target whose engines differ are not a
noise-floor control (see `evals.report`).

`run` names the run the result belongs to, so the same target evaluated twice (the noise-floor
control) stays two arms.

`finish_reason` is only ever the upstream's own finish reason. A request that got no answer to
score keeps why in `error_class` (a short class: `connection`, `http_503`, `http_400`, `timeout`,
`scorer`) and `error` (the message); `detail` is the scorer's own account of its verdict (what
failed, what did not parse). `upstream` is the upstream that answered (`x-plumbline-upstream`),
`started` the wall-clock time the request was sent: with `latency_s` they let the report price
self-hosted (node) arms by the node-hours the run kept them busy (`evals.cost`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson

from evals.item import Outcome


@dataclass(frozen=True, slots=True)
class ItemResult:
    target: str
    item_id: str
    item_digest: str
    family: str
    outcome: Outcome
    finish_reason: str | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    latency_s: float | None = None
    cost: float | None = None
    params_hash: str = ""
    run: str = ""
    parts: dict[str, bool] = field(default_factory=dict)
    # The gateway found reasoning in the answer channel (no or the wrong reasoning parser).
    reasoning_leak: bool = False
    # The serving stack that answered (`x-plumbline-engine`: vLLM version and chat template);
    # empty where the gateway knows none (llama.cpp, API providers).
    engine: str = ""
    # The scorer's account of its verdict (e.g. which instruction failed), "" when it gave none.
    detail: str = ""
    # Why there was nothing to score (outcome `error`, or `timeout`): class and message.
    error_class: str | None = None
    error: str | None = None
    upstream: str = ""
    started: float | None = None  # epoch seconds the request was sent
    prompt_tokens: int | None = None
    # Where `cost` came from: "price" (the gateway's price table, per request) or "node-hours"
    # (a self-hosted node's hours, `evals.cost.price_nodes`); "" when there is no cost.
    cost_basis: str = ""
    # The request's meaning, what the upstream could not be told, what of that the route
    # accepts (x-plumbline-semantics / -unsent / -accepted-unequal); "" where none.
    semantics: str = ""
    unsent: str = ""
    accepted: str = ""

    @property
    def correct(self) -> bool:
        return self.outcome == "correct"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemResult:
        """Build from a dict, ignoring keys this version does not know (forward-compatible)."""
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        if kept.get("outcome") == "error" and "error" not in data and kept.get("finish_reason"):
            # Written before errors had their own field: the message sat in finish_reason.
            kept["error"] = kept.pop("finish_reason")
            kept["error_class"] = error_class_of(kept["error"])
        return cls(**kept)


def error_class_of(message: str) -> str:
    """The class of a runner error message ("HTTP 503: ..." -> "http_503", "connection: ...")."""
    head = message.split(":", 1)[0].strip().lower()
    if head.startswith("http "):
        return "http_" + head.removeprefix("http ").strip()
    return head.replace(" ", "_") or "error"


def engines(results: Iterable[ItemResult]) -> frozenset[str]:
    """The serving stacks that answered these results (those the gateway fingerprinted)."""
    return frozenset(r.engine for r in results if r.engine)


def write_results(path: Path, results: Iterable[ItemResult]) -> None:
    """Write results as JSON Lines."""
    with path.open("wb") as fh:
        for result in results:
            fh.write(orjson.dumps(result.to_dict()) + b"\n")


def read_results(path: Path) -> list[ItemResult]:
    """Read results written by `write_results` (blank lines are skipped)."""
    with path.open("rb") as fh:
        return [ItemResult.from_dict(orjson.loads(line)) for line in fh if line.strip()]
