"""Eval rounds and tripwire verdicts in the store: how each scheduled round ended, and what the
tripwire found on each target before it was scored (a round), evaluated (`plumbline eval run`)
or benched (`plumbline bench`).

Written by the scheduler (`gateway/trust/schedule.py`, through `Store.finish_round` and
`keep_tripwires`) and by the eval and bench commands; read by the console's quality panel,
`plumbline report health` and the eval report. Every gateway on one store sees every round.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gateway.ledger.database import writing
from gateway.ledger.rows import ROUNDS, TRIPWIRES


def keep_tripwires(engine: Engine, rows: Iterable[Mapping[str, Any]]) -> None:
    """Store tripwire verdicts: each a mapping with `time`, `target`, `run`, `source`,
    `verdict`, `passed` and `report` (a JSON-able dict: counts, per prompt verdict and why)."""
    values = [
        {
            "time": r["time"],
            "target": r["target"],
            "run": r["run"],
            "source": r["source"],
            "verdict": r["verdict"],
            "passed": bool(r["passed"]),
            "report": json.dumps(r["report"]),
        }
        for r in rows
    ]
    if values:
        with writing(engine) as conn:
            conn.execute(TRIPWIRES.insert(), values)


def _verdict(row: Any) -> dict[str, Any]:
    return {
        "time": row.time,
        "target": row.target,
        "run": row.run,
        "source": row.source,
        "verdict": row.verdict,
        "passed": bool(row.passed),
        "report": json.loads(row.report),
    }


def latest_tripwires(engine: Engine) -> dict[str, dict[str, Any]]:
    """The newest tripwire verdict per target."""
    t = TRIPWIRES
    newest = sa.select(t.c.target, sa.func.max(t.c.time).label("time")).group_by(t.c.target)
    sub = newest.subquery()
    query = sa.select(t).join(sub, sa.and_(t.c.target == sub.c.target, t.c.time == sub.c.time))
    with engine.connect() as conn:
        return {row.target: _verdict(row) for row in conn.execute(query)}


def tripwires_of(engine: Engine, runs: Sequence[str]) -> list[dict[str, Any]]:
    """The verdicts kept for these runs (or rounds), oldest first."""
    t = TRIPWIRES
    query = sa.select(t).where(t.c.run.in_(list(runs))).order_by(t.c.time, t.c.target)
    with engine.connect() as conn:
        return [_verdict(row) for row in conn.execute(query)]


def latest_rounds(engine: Engine, limit: int = 5) -> list[dict[str, Any]]:
    """The newest scheduled rounds, newest first: when, which gateway, how they ended (a
    round still running, or whose gateway died in it, has no `finished`)."""
    t = ROUNDS
    query = sa.select(t).order_by(t.c.started.desc()).limit(limit)
    with engine.connect() as conn:
        return [
            {
                "started": row.started,
                "gateway": row.gateway,
                "finished": row.finished,
                "outcome": row.outcome or ("running" if row.finished is None else "ok"),
                "error_class": row.error_class,
                "error": row.error,
            }
            for row in conn.execute(query)
        ]


def _when(t: float | None) -> str:
    return "–" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def rounds_text(rounds: Sequence[Mapping[str, Any]], tripwires: Mapping[str, Any]) -> str:
    """The rounds and tripwire verdicts as lines under `plumbline report health`'s table."""
    lines = []
    if not rounds:
        lines.append("scheduled eval rounds: none has run")
    for r in rounds:
        how = r["outcome"]
        if how == "failed":
            how += f" ({r['error_class']}: {r['error']})"
        lines.append(f"eval round {_when(r['started'])} on {r['gateway']}: {how}")
    for target, t in sorted(tripwires.items()):
        report = t["report"]
        why = "" if t["passed"] else f": {report.get('why', '')}"
        passed = "passed" if t["passed"] else "FAILED, not scored"
        line = f"tripwire {target} ({t['source']} {t['run']}): {t['verdict']}, {passed}{why}"
        lines.append(line)
    return "\n".join(lines) + "\n"
