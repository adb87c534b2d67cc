"""Quality-gated routing: send a route's traffic to the cheapest upstream within the noise floor.

`decide` is pure. Given each upstream's eval results on identical items, a control pair (one
upstream run twice, the same configuration) that sets the noise floor, and each upstream's price
in USD per million tokens, it picks the cheapest upstream whose score is not worse than the
best's by more than the floor, judged by a paired test on the items both scored
(`evals.stats.pair` + `against_floor`: McNemar must reject, and the gap and the discordant
imbalance must both exceed the control's). It refuses what cannot be compared: arms not at
parity (asked otherwise than the control: the params hash is made over the request's meaning,
so a provider that could not be sent top_k=20 or the thinking switch lands here, and the refusal
names field, value and upstream, `evals.parity`), item sets that differ, too few paired items,
no control. A difference the route accepts (`accept_unequal`) is carried on the arm's evidence
(`accepted`) and in the decision's reason. A refused or unproven upstream never wins on
price; with no usable evidence the best scorer keeps the traffic.

The decision carries its evidence (scores, n, intervals, discordant counts, p-values, floor,
prices, chosen, reason) and is kept so it is visible and survives restarts: by `GateBook` (a
JSON file beside the config) for a gateway without a store, by `SharedGateBook` (rows) when
there is one, so gateways sharing a store route alike. Routing puts its choice first
(`gateway/serving/routing.py`'s `gate_first`); `pinned_upstream` is the eval-lane pin the
scheduler needs to evaluate each upstream of a route separately.

Per task shape (gateway/serving/shape.py): the eval families stand for shapes (`SHAPE_FAMILIES`:
tools -> tools, long_context -> longctx, reasoning and math -> math, edit -> editformat), and
`decide_shapes` re-decides each shape on its family's items alone, among the upstreams the shape
routes to. A shape's decision is kept under `MODEL#SHAPE` (a name no route can have) and routing
prefers it to the route's own (`latest_for`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

# evals is the optional [evals] extra: its imports stay inside the functions that need them,
# so the gateway starts without it (tests/gateway/test_without_evals.py).
if TYPE_CHECKING:
    # The statistics (evals.stats, scipy) load when a decision is computed, not with the
    # gateway: routing only reads decisions already made.
    from evals.result import ItemResult
    from evals.stats import NoiseFloor, Paired
    from gateway.ledger.store import Store

from gateway.trust.evidence import ArmEvidence as ArmEvidence
from gateway.trust.evidence import (
    against_best,
    decision_resolution,
    floor_dict,
    noise_floor,
    refuse_incomparable,
)
from gateway.trust.sizing import needed_sentence

PIN_HEADER = "x-plumbline-upstream"


@dataclass(frozen=True, slots=True)
class GateDecision:
    model: str
    chosen: str | None
    reason: str
    best: str | None
    floor: dict[str, Any]
    arms: tuple[ArmEvidence, ...]
    decided_at: float = field(default_factory=time.time)
    shape: str | None = None  # decided on one shape's eval family (None: the whole suite)
    # What the round could tell apart (gateway/trust/sizing.py): "this round can tell apart a
    # 6-point gap (...)", its MDE, and the paired items and discordance it rests on.
    resolution: str = ""
    mde: float | None = None
    paired_n: int | None = None
    discordance: float | None = None

    @property
    def key(self) -> str:
        """Where the book keeps it: the route's name, or `route#shape`."""
        return self.model if self.shape is None else f"{self.model}#{self.shape}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GateDecision:
        arms = tuple(ArmEvidence(**{**a, "ci": tuple(a["ci"])}) for a in data["arms"])
        return cls(**{**data, "arms": arms})


def _price_key(price: float | None) -> float:
    return math.inf if price is None else price


def decide(
    model: str,
    results: Mapping[str, Sequence[ItemResult]],
    control: Sequence[Paired] | NoiseFloor | None,
    prices: Mapping[str, float | None],
    *,
    alpha: float = 0.05,
    min_items: int = 30,
    now: float | None = None,
    detect_gap: float = 0.05,
    power: float = 0.8,
) -> GateDecision:
    """The cheapest upstream not worse than the best beyond the noise floor, with its evidence.
    A cheaper upstream counts as within the floor only when its comparison could have told a
    `detect_gap` apart (with `power`): absence of evidence from too small a round is not
    parity."""
    from evals.stats import summarise

    now = time.time() if now is None else now
    floor = noise_floor(control)
    summaries = {u: summarise(rs) for u, rs in results.items() if rs}
    if not summaries:
        return GateDecision(model, None, "no eval results", None, {}, (), now)
    refused = refuse_incomparable(results, summaries, floor, prices)
    if not summaries:
        return GateDecision(
            model, None, "every arm refused", None, floor_dict(floor), tuple(refused), now
        )
    # Best = highest accuracy over all items (timeouts and errors stay in the denominator);
    # ties go to the cheaper.
    best = max(summaries, key=lambda u: (summaries[u].accuracy, -_price_key(prices.get(u))))
    arms = _weighed(results, summaries, best, floor, prices, alpha, min_items, (detect_gap, power))
    arms += refused
    ranked = sorted(
        (a for a in arms if a.eligible), key=lambda a: (_price_key(a.price_per_m), -a.accuracy)
    )
    chosen = ranked[0]
    reason = _reason(chosen, best, prices, arms)
    decision = GateDecision(
        model, chosen.upstream, reason, best, floor_dict(floor), tuple(arms), now
    )
    return _with_resolution(decision, alpha, power, detect_gap)


def _weighed(
    results: Mapping[str, Sequence[ItemResult]],
    summaries: Mapping[str, Any],
    best: str,
    floor: NoiseFloor | None,
    prices: Mapping[str, float | None],
    alpha: float,
    min_items: int,
    sizing: tuple[float, float],
) -> list[ArmEvidence]:
    """Each summarised arm's evidence: the best as it is, every other against the best."""
    from evals.parity import accepted_text

    arms: list[ArmEvidence] = []
    for up, s in summaries.items():
        base: dict[str, Any] = dict(
            upstream=up,
            n=s.n,
            correct=s.correct,
            accuracy=s.accuracy,
            ci=s.ci,
            price_per_m=prices.get(up),
            accepted=accepted_text(results[up]),
        )
        if up == best:
            arms.append(ArmEvidence(**base, eligible=True, why="best score"))
            continue
        judged = against_best(results[best], results[up], best, up, floor, alpha, min_items, sizing)
        arms.append(ArmEvidence(**base, **judged))
    return arms


def _reason(
    chosen: ArmEvidence, best: str, prices: Mapping[str, float | None], arms: list[ArmEvidence]
) -> str:
    """Why `chosen`: the best scorer, or the cheapest within its floor, and what was accepted."""
    if chosen.upstream == best:
        reason = f"{best} is the best scorer and no cheaper upstream is proven within the floor"
    else:
        reason = (
            f"{chosen.upstream} (${chosen.price_per_m}/M) is the cheapest within the noise "
            f"floor of {best} (${prices.get(best)}/M): {chosen.why}"
        )
    shown = {a.accepted for a in arms if a.eligible and a.accepted}
    if shown:
        reason += f" ({'; '.join(sorted(shown))})"
    return reason


def _with_resolution(
    decision: GateDecision, alpha: float, power: float, detect_gap: float
) -> GateDecision:
    """The decision with what its round could tell apart, and what `detect_gap` needs."""
    from evals.power import items_needed

    res = decision_resolution(decision.arms, decision.floor, alpha, power)
    if res is None:
        return replace(decision, resolution="this round made no paired comparison")
    needed = items_needed(max(res.discordance, detect_gap), detect_gap, alpha, power)
    text = f"{res.sentence()}; {needed_sentence(detect_gap, needed, res.n)}"
    return replace(
        decision, resolution=text, mde=res.mde, paired_n=res.n, discordance=res.discordance
    )


SHAPE_FAMILIES = {
    "tools": "tools",
    "long_context": "longctx",
    "reasoning": "math",
    "math": "math",
    "edit": "editformat",
}


def decide_shapes(
    model: str,
    candidates: Mapping[str, Sequence[str]],
    results: Mapping[str, Sequence[ItemResult]],
    control: tuple[str, Sequence[ItemResult], Sequence[ItemResult]],
    prices: Mapping[str, float | None],
    *,
    alpha: float = 0.05,
    min_items: int = 30,
    now: float | None = None,
    detect_gap: float = 0.05,
    power: float = 0.8,
) -> list[GateDecision]:
    """One decision per shape an eval family measures: `decide` on that family's items of the
    upstreams the shape routes to (`candidates`), the floor from the control upstream's two runs
    (`control`: name, run 1, run 2) of the same family."""
    from evals.stats import PairingError

    out: list[GateDecision] = []
    name, *runs = control
    for shape, ups in candidates.items():
        if (family := SHAPE_FAMILIES.get(shape)) is None:
            continue
        own = {u: [r for r in results.get(u, ()) if r.family == family] for u in ups}
        floor: list[Paired] | None = None
        with contextlib.suppress(PairingError):
            floor = [control_pair(name, *([r for r in c if r.family == family] for c in runs))]
        prices_of = {u: prices.get(u) for u in ups}
        d = decide(
            model,
            own,
            floor,
            prices_of,
            alpha=alpha,
            min_items=min_items,
            now=now,
            detect_gap=detect_gap,
            power=power,
        )
        out.append(replace(d, shape=shape))
    return out


def pinned_upstream(
    headers: Mapping[str, str], lane: str, route_upstreams: Sequence[str]
) -> str | None:
    """The upstream an eval-lane request pins with `x-plumbline-upstream` (None otherwise).
    Production traffic can never pin; a pin outside the route is ignored."""
    name = headers.get(PIN_HEADER)
    if lane != "eval" or not name or name not in route_upstreams:
        return None
    return name


def control_pair(control: str, first: Sequence[ItemResult], second: Sequence[ItemResult]) -> Paired:
    """The control upstream's two runs, paired: refused (`PairingError`) when a different
    serving stack answered them (a restart onto another vLLM or chat template mid-run), since
    that difference is not noise."""
    from evals.result import engines
    from evals.stats import PairingError, pair

    a, b = engines(first), engines(second)
    if a != b:
        raise PairingError(f"served by different engines: {sorted(a)} / {sorted(b)}")
    return pair(first, second, f"{control} run 1", f"{control} run 2")


def gate_arms(model: str, upstreams: Sequence[str], control: str) -> list[tuple[str, str]]:
    """(arm label, pinned upstream) the scheduler runs: each upstream once, the control twice."""
    arms = [(f"{model}@{u}", u) for u in upstreams]
    return [*arms, (f"{model}@{control}#control", control)]


class _Book:
    """What routing and /health's `gate` key read: the latest decision per model, and a bounded
    history. Where they are kept is the subclass's: `_read` and `record`."""

    history: int

    def _read(self) -> dict[str, Any]:
        raise NotImplementedError

    def record(self, decision: GateDecision) -> None:
        raise NotImplementedError

    def latest(self, model: str, shape: str | None = None) -> GateDecision | None:
        key = model if shape is None else f"{model}#{shape}"
        entry = self._read()["latest"].get(key)
        return None if entry is None else GateDecision.from_dict(entry)

    def latest_for(self, model: str, shape: str | None) -> GateDecision | None:
        """What routing follows for a request of `shape`: the shape's own decision, else the
        route's."""
        own = self.latest(model, shape) if shape is not None else None
        return own if own is not None and own.chosen is not None else self.latest(model)

    def view(self) -> dict[str, Any]:
        """For /health's `gate` key: the latest decision of every gated model."""
        latest: dict[str, Any] = self._read()["latest"]
        return latest


class GateBook(_Book):
    """The book in one JSON file (a gateway without a store)."""

    def __init__(self, path: Path, history: int = 50):
        self.path = path
        self.history = history
        self._cache: tuple[float, dict[str, Any]] | None = None

    def _read(self) -> dict[str, Any]:
        """The file's content, re-read only when its mtime changed (routing calls this per
        request; another worker may have recorded a decision)."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return {"latest": {}, "history": []}
        if self._cache is None or self._cache[0] != mtime:
            self._cache = (mtime, json.loads(self.path.read_text(encoding="utf-8")))
        return self._cache[1]

    def record(self, decision: GateDecision) -> None:
        data = json.loads(json.dumps(self._read()))  # a copy: the cache stays as it was read
        data["latest"][decision.key] = decision.to_dict()
        data["history"] = [*data["history"], decision.to_dict()][-self.history :]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        os.replace(tmp, self.path)  # readers never see half a file


class SharedGateBook(_Book):
    """The gate book of gateways sharing a store: decisions are rows (`gate_decisions`), so every
    gateway routes by the same latest one. Routing reads the copy in memory, which `refresh`
    reloads (at start, then with the app's housekeeping each minute) and `record` updates."""

    def __init__(self, store: Store, history: int = 50):
        self.store = store
        self.history = history
        self._data: dict[str, Any] = {"latest": {}, "history": []}

    def _read(self) -> dict[str, Any]:
        return self._data

    def refresh(self) -> None:
        latest, history = self.store.decisions(self.history)
        self._data = {"latest": latest, "history": history}

    def record(self, decision: GateDecision) -> None:
        entry = json.loads(json.dumps(decision.to_dict()))  # as the other gateways read it
        self.store.record_decision(decision.key, decision.decided_at, entry)
        history = [*self._data["history"], entry][-self.history :]
        self._data = {"latest": {**self._data["latest"], decision.key: entry}, "history": history}


def observed_discordance(previous: GateDecision | None) -> float | None:
    return None if previous is None else previous.discordance
