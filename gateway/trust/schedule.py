"""Scheduled evaluation: every N hours the gateway runs a suite against its own targets.

The runner is the same client `plumbline eval run` uses, pointed at this gateway's own address,
so it measures what users get. Routes with the policy `cheapest_within_floor` are re-decided after
each round: every upstream of the route is evaluated on identical items (pinned with the
eval-lane-only `x-plumbline-upstream` header), the control upstream twice for the noise floor,
and `gateway.trust.gate.decide` picks the cheapest upstream not worse than the best beyond that
floor.
Its requests carry the eval lane header (routing keeps them off the prefix index) and its own
concurrency cap, so production traffic never queues behind it. Runs are written to
`[evals].runs_dir`, like manual runs; gate decisions go to the gate book (shown in /health).

Several gateways on one store (several workers, or several nodes on PostgreSQL) run one round
per interval between them, not one each: a round is claimed in the store first, and the decision
it reaches is a row every gateway routes by (`gateway.trust.gate.SharedGateBook`). Each run's
results are kept in the store as well (`eval_results`), for `plumbline eval report --from-store`.

Where `[access]` asks /v1 for a key, a round presents the eval lane's credential (`api_key`,
gateway/edge/lane.py), good only on the eval lane. How each round ended is kept (`RoundOutcome`,
gateway/trust/rounds.py): in memory for /health, and with a store in its `eval_rounds` row, so a
round that failed says why (the error's class and its masked message) in the console and
`plumbline report health`.

Every round starts with the tripwire (evals/tripwire.py) on each target, and on each upstream of a
gated route (pinned as its arms are): one that fails it (collapsed or silent answers) is not
scored that round, its verdict kept with the round (/health), in the store (`tripwire_verdicts`,
the console and `report health`) and, for a gated route, as that upstream's refused evidence.
`[evals].tripwire = false` skips it.

The eval suite is the `[evals]` extra and loads only when a round runs, never with the gateway. A
gateway configured with rounds but without the extra says so at start (`missing`, logged as an
error) and serves on without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.config.routes import shape_candidates, shape_upstreams
from gateway.config.trust import GateConfig
from gateway.extras import evals_imported, evals_missing
from gateway.ledger.rounds import keep_tripwires
from gateway.ledger.window import window_economics
from gateway.trust.gate import (
    PIN_HEADER,
    SHAPE_FAMILIES,
    GateDecision,
    gate_arms,
    observed_discordance,
)
from gateway.trust.gate_round import round_decisions, route_prices
from gateway.trust.rounds import (
    RoundHistory,
    RoundOutcome,
    failure_of,
    judge_items,
    tripwire_rows,
)
from gateway.trust.sizing import (
    family_sizes,
    planned_items,
    round_seed,
    targets_resolution,
)

# evals is the optional [evals] extra: its imports stay inside the functions that need them,
# so the gateway starts without it (tests/gateway/test_without_evals.py).
if TYPE_CHECKING:
    from evals.result import ItemResult
    from evals.runner import RunSpec
    from evals.tripwire import Target, TripwireReport
    from gateway.config import Config
    from gateway.ledger.store import Store
    from gateway.trust.gate import GateBook, SharedGateBook

log = logging.getLogger("plumbline.schedule")


def new_run_id() -> str:
    """A run's id as the runner makes one: when, and three random bytes."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(3).hex()


def _dicts(reports: dict[str, Any]) -> dict[str, Any]:
    return {label: r.to_dict() for label, r in reports.items()}


# How often a gateway with a store looks for a due round (it runs one only if no other did).
LOOK_S = 60.0
GATEWAY_ID = f"{socket.gethostname()}:{os.getpid()}"


class EvalScheduler:
    """Runs the scheduled rounds through the gateway at `base_url` and records the gate's
    decisions; it sees the config, the store (if any) and the gate book, nothing else."""

    def __init__(
        self,
        config: Config,
        store: Store | None,
        gate_book: GateBook | SharedGateBook,
        base_url: str,
        *,
        api_key: str = "unused",
    ):
        """`api_key`: the eval lane's credential (never logged; the run spec hides it)."""
        self.config = config
        self.store = store
        self.gate_book = gate_book
        self.base_url = base_url
        self.last_run: Path | None = None
        self.first_round = 0.0  # no round before this time (`_forever` sets it an interval on)
        self.missing: str | None = None  # why rounds cannot run (`evals_missing`), if so
        self._task: asyncio.Task[None] | None = None
        self._api_key = api_key
        self.history = RoundHistory()

    @property
    def enabled(self) -> bool:
        schedule = self.config.evals
        return schedule.every_hours > 0 and (bool(schedule.targets) or bool(self.gated_models()))

    def gated_models(self) -> list[str]:
        return [m for m, r in self.config.models.items() if r.policy == "cheapest_within_floor"]

    def start(self) -> None:
        if not self.enabled:
            return
        self.missing = evals_missing("scheduled evals")
        if self.missing is not None:
            log.error("%s; serving without them", self.missing)
            return
        self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _spec(self, targets: list[str], now: float | None = None, **kw: Any) -> RunSpec:
        """The round's run: the schedule's suite, its items drawn from the round's seed."""
        from evals.runner import RunSpec

        schedule = self.config.evals
        seed = schedule.seed
        if schedule.rotate_seed:
            now = time.time() if now is None else now
            seed = round_seed(schedule.seed, now, schedule.every_hours)
        runs_dir = Path(schedule.runs_dir)
        if not runs_dir.is_absolute():
            runs_dir = self.config.root / runs_dir
        return RunSpec(
            base_url=self.base_url,
            targets=targets,
            suite=schedule.suite,
            seed=seed,
            concurrency=schedule.concurrency,
            timeout_s=schedule.timeout_s,
            runs_dir=runs_dir,
            reasoning_gym=schedule.reasoning_gym,
            api_key=self._api_key,
            **kw,
        )

    def status(self) -> dict[str, Any]:
        """For /health: whether rounds run, when the next may, and this gateway's last rounds."""
        return {
            "enabled": self.enabled,
            "missing": self.missing,
            "every_hours": self.config.evals.every_hours,
            "first_round": self.first_round or None,
            "rounds": self.history.view(),
        }

    async def run_once(
        self, now: float | None = None, outcome: RoundOutcome | None = None
    ) -> Path | None:
        """One scheduled round: the configured targets, then every quality-gated route, each
        target through the tripwire first. The round's items come from its seed (`now`: the
        round's time, for seed rotation); how it went goes into `outcome` (a fresh one in the
        history when none is given)."""
        await evals_imported()
        from evals.tripwire import Target

        now = time.time() if now is None else now
        outcome = outcome if outcome is not None else self.history.begin()
        targets = list(self.config.evals.targets)
        run_id = new_run_id()
        reports = await self.tripwire([Target(t, t) for t in targets], outcome, run_id)
        passed = [t for t in targets if t not in reports or reports[t].passed]
        if targets and not passed:
            outcome.failed("tripwire", f"every target failed the tripwire: {', '.join(targets)}")
        if passed:
            spec = self._spec(passed, now, run_id=run_id, tripwire=_dicts(reports))
            self.last_run, results = await self._run(spec)
            said = await asyncio.to_thread(targets_resolution, results)
            log.info("scheduled eval finished: %s; %s", self.last_run, said)
            judge_items(outcome, results)
            await self._keep(results)
        for model in self.gated_models():
            await self.run_gate(model, now, outcome)
        return self.last_run

    def round_sizes(self, model: str) -> dict[str, int]:
        """Items per family for the route's next round: enough paired items for the route's
        decision and each shape's to tell the gate's `detect_gap` apart, at the discordance
        their last decisions observed (gateway/trust/sizing.py)."""
        from evals.suite import SUITES

        gate_cfg = self.config.models[model].gate or GateConfig()
        route_items = planned_items(gate_cfg, observed_discordance(self.gate_book.latest(model)))
        shape_items: dict[str, int] = {}
        for shape in shape_candidates(self.config.models, model, SHAPE_FAMILIES):
            if shape not in SHAPE_FAMILIES:
                continue
            family = SHAPE_FAMILIES[shape]  # two shapes may share one (reasoning, math)
            last = self.gate_book.latest(model, shape)
            need = planned_items(gate_cfg, observed_discordance(last))
            shape_items[family] = max(need, shape_items.get(family, 0))
        return family_sizes(dict(SUITES[self.config.evals.suite]), route_items, shape_items)

    async def run_gate(
        self, model: str, now: float | None = None, outcome: RoundOutcome | None = None
    ) -> GateDecision:
        """Evaluate each upstream of a gated route (the control twice) that passes the
        tripwire, on a round sized to decide, and re-decide the route."""
        await evals_imported()
        from evals.tripwire import Target

        route = self.config.models[model]
        control = (route.gate or GateConfig()).control or route.upstreams[0]
        everyone = [*route.upstreams, *shape_upstreams(self.config.models, model)]
        run_id = new_run_id()
        pins = [Target(f"{model}@{u}", model, {PIN_HEADER: u}) for u in dict.fromkeys(everyone)]
        reports = await self.tripwire(pins, outcome or RoundOutcome(time.time()), run_id)
        failed = {
            t.headers[PIN_HEADER]: reports[t.label].why()
            for t in pins
            if t.label in reports and not reports[t.label].passed
        }
        arms = [arm for arm in gate_arms(model, everyone, control) if arm[1] not in failed]
        sizes = await asyncio.to_thread(self.round_sizes, model)
        spec = self._spec(
            [label for label, _ in arms],
            now,
            target_models={label: model for label, _ in arms},
            target_headers={label: {PIN_HEADER: pin} for label, pin in arms},
            sizes=sizes,
            run_id=run_id,
            tripwire=_dicts(reports),
        )
        log.info(
            "gate %s: a round of %d items %s, seed %d", model, sum(sizes.values()), sizes, spec.seed
        )
        results = await self.evaluate(spec) if arms else []
        if outcome is not None:
            judge_items(outcome, results)
        await self._keep(results)
        # Read once, off the event loop: with a store the node's cost is a query of its ledger.
        prices = await asyncio.to_thread(self.prices, model)
        decision, shaped = await asyncio.to_thread(  # scipy's tests, per arm and shape
            round_decisions, model, self.config.models, control, arms, results, prices, failed
        )
        # Written to the store (or its file) in a thread: a write on the loop would wait there for
        # the store's lock, up to its busy timeout, with every request behind it.
        await asyncio.to_thread(self.gate_book.record, decision)
        log.info("gate %s: %s; %s", model, decision.reason, decision.resolution)
        for each in shaped:
            await asyncio.to_thread(self.gate_book.record, each)
            log.info("gate %s, shape %s: %s; %s", model, each.shape, each.reason, each.resolution)
        return decision

    async def tripwire(
        self, targets: list[Target], outcome: RoundOutcome, run_id: str
    ) -> dict[str, TripwireReport]:
        """The tripwire on each target through this gateway (label -> report), kept with the
        round and in the store; nothing (every target passes) with `[evals].tripwire` off."""
        from evals.runner import LANE_HEADER
        from evals.tripwire import tripwire_at

        schedule = self.config.evals
        if not schedule.tripwire or not targets:
            return {}
        reports = await tripwire_at(
            self.base_url,
            self._api_key,
            targets,
            headers=LANE_HEADER,
            timeout_s=schedule.timeout_s,
            max_tokens=schedule.tripwire_max_tokens,
            max_wrong=schedule.tripwire_max_wrong,
            max_degenerate=schedule.tripwire_max_degenerate,
            concurrency=schedule.concurrency,
        )
        for label, report in reports.items():
            outcome.tripwire[label] = {
                "target": label,
                "run": run_id,
                "source": "round",
                "time": time.time(),
                "verdict": report.verdict,
                "passed": report.passed,
                "report": {k: v for k, v in report.to_dict().items() if k != "prompts"},
            }
            if not report.passed:
                log.warning("tripwire: %s not scored this round: %s", label, report.why())
        if self.store is not None:
            rows = tripwire_rows(reports, run_id, "round", time.time())
            try:
                await asyncio.to_thread(keep_tripwires, self.store.engine, rows)
            except Exception:
                log.exception("tripwire verdicts of %s could not be kept in the store", run_id)
        return reports

    async def evaluate(self, spec: RunSpec) -> list[ItemResult]:
        """One eval run through this gateway, its results read back from the runs folder."""
        return (await self._run(spec))[1]

    async def _run(self, spec: RunSpec) -> tuple[Path, list[ItemResult]]:
        """One eval run through this gateway: its folder, and its results read back. The runner
        is made in a thread (its OpenAI client loads the TLS trust store, about 20 ms) and the
        results are read in one."""
        from evals.runner import Runner, load_run

        path = await (await asyncio.to_thread(Runner, spec)).run()
        return path, (await asyncio.to_thread(load_run, path))[1]

    def prices(self, model: str) -> dict[str, float | None]:
        """USD per million tokens per upstream (`gateway.trust.gate_round.route_prices`), with
        the store's last day of node economics when there is a store."""
        economics: dict[str, Any] = {}
        if self.store is not None:
            economics = window_economics(self.config, self.store, 86400.0)[2]
        return route_prices(self.config, model, economics)

    async def _keep(self, results: list[ItemResult]) -> None:
        """A run's results into the store too (when there is one): the runs folder is this
        gateway's disk, which on a cluster does not outlive the pod."""
        store = self.store
        if store is None or not results:
            return
        rows = [r.to_dict() for r in results]
        try:
            await asyncio.to_thread(store.write_eval_results, rows, time.time())
        except Exception:
            log.exception("eval run %s could not be kept in the store", results[0].run)

    async def _forever(self) -> None:
        """A round every `every_hours`, the first one interval after start. With a store, one
        round per interval across every gateway on it: each looks every minute (or each
        interval, if shorter) and the first to claim a due round (`Store.claim_round`) runs it."""
        interval = self.config.evals.every_hours * 3600
        look = interval if self.store is None else min(interval, LOOK_S)
        self.first_round = time.time() + interval
        while True:
            await asyncio.sleep(look)
            try:
                await self.tick(time.time())
            except Exception:  # the store failed around the round: the round said its own
                log.exception("scheduled eval could not be claimed or closed")

    async def tick(self, now: float) -> bool:
        """One look at the clock: run the round if it is due (`first_round` has come, and with
        a store no gateway started one in the last interval) and this gateway claims it. True
        when it ran."""
        if now < self.first_round:
            return False
        store = self.store
        if store is not None:
            interval = self.config.evals.every_hours * 3600
            if not await asyncio.to_thread(store.claim_round, now, interval, GATEWAY_ID):
                return False
        outcome = self.history.begin(now)
        try:
            await self.run_once(now, outcome)
        except Exception as e:
            outcome.failed(*failure_of(e, (self._api_key,)))
        if outcome.outcome == "running":
            outcome.outcome = "ok"
        outcome.finished = time.time()
        if outcome.outcome == "failed":
            log.error("scheduled eval round failed: %s: %s", outcome.error_class, outcome.error)
        if store is not None:
            error = (
                (outcome.error_class or "", outcome.error or "") if outcome.error_class else None
            )
            await asyncio.to_thread(
                store.finish_round, now, outcome.finished, outcome.outcome, error
            )
        return True
