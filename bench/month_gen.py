"""Realistic `requests` rows generated inside the database, a day per statement (the month-scale
store bench, `bench/month_store.py`). PostgreSQL counts with `generate_series`, SQLite with a
recursive CTE; every spread (model, upstream, key, status, tokens, latencies) is a pure function
of the row number (multiplicative hashes), so both databases get the same rows.
"""

from __future__ import annotations

from gateway.config import Config
from gateway.ledger.partitions import DAY, partition_ddl
from gateway.ledger.store import Store

# (model, [(upstream, share)], door): what the generated traffic asks for and where it goes.
ROUTES = (
    ("chat-small", (("node-a1", 0.5), ("node-a2", 1.0)), "chat"),
    ("chat-large", (("node-b1", 0.7), ("api-openai", 1.0)), "chat"),
    ("coder", (("api-anthropic", 0.8), ("node-b1", 1.0)), "messages"),
    ("embed", (("node-a1", 1.0),), "embeddings"),
)
MODEL_SHARES = (0.5, 0.8, 0.95, 1.0)
NODES = {"node-a1": "box-a", "node-a2": "box-a", "node-b1": "box-b"}
APIS = ("api-openai", "api-anthropic")


def config() -> Config:
    """The gateway configuration the generated rows belong to: two nodes, two API upstreams."""
    ups = [
        {"name": n, "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "model": "m", "node": b}
        for n, b in NODES.items()
    ]
    ups += [
        {"name": n, "kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"}
        for n in APIS
    ]
    models = {m: {"upstreams": [u for u, _ in routes]} for m, routes, _ in ROUTES}
    nodes = {"box-a": {"cost_per_hour": 2.0}, "box-b": {"cost_per_hour": 4.0}}
    return Config.model_validate({"upstreams": ups, "models": models, "nodes": nodes})


def _r(k: int) -> str:
    """A pseudo-random number in [0, 1) from the row number `i` (hash number `k`)."""
    primes = (1_000_003, 999_983, 1_000_033, 999_979, 1_000_037, 999_961, 1_000_039, 999_953)
    mults = (48_271, 69_621, 16_807, 40_692, 39_373, 50_873, 45_991, 52_183)
    m = primes[k]
    return f"(((i * {mults[k]} + {k * 7919}) % {m}) * 1.0 / {m})"


def _case(r: str, pairs: list[tuple[float, str]]) -> str:
    if len(pairs) == 1:
        return pairs[0][1]
    whens = " ".join(f"WHEN {r} < {share} THEN {value}" for share, value in pairs[:-1])
    return f"CASE {whens} ELSE {pairs[-1][1]} END"


def _derived(r: list[str]) -> dict[str, str]:
    """Values several columns use, computed once a row: upstream, status, token counts."""
    ups = [
        (s, _case(r[1], [(share, f"'{u}'") for u, share in routes]))
        for s, (_, routes, _) in zip(MODEL_SHARES, ROUTES, strict=True)
    ]
    return {
        "u": _case(r[0], ups),
        "st": _case(r[2], [(0.97, "200"), (0.985, "429"), (0.995, "500"), (1.0, "400")]),
        "ct": f"(20 + CAST({r[3]} * {r[3]} * 900 AS INTEGER))",
        "pt": f"(150 + CAST({r[4]} * {r[4]} * 6000 AS INTEGER))",
    }


def _columns() -> tuple[dict[str, str], dict[str, str]]:
    """Column -> SQL expression over `i`, the row number in its day, and `t0`, `step`."""
    r = [f"r{k}" for k in range(8)]
    model = _case(r[0], [(s, f"'{m}'") for s, (m, _, _) in zip(MODEL_SHARES, ROUTES, strict=True)])
    upstream = "u"
    doors = [(s, f"'{d}'") for s, (_, _, d) in zip(MODEL_SHARES, ROUTES, strict=True)]
    status, completion, prompt = "st", "ct", "pt"
    e2e = f"(0.15 + {completion} * 0.02 * (0.6 + {r[5]}))"
    one = '\'[{"upstream":"\' || {u} || \'","status":\' || {s} || \',"outcome":"ok"}]\''
    two = (
        '\'[{"upstream":"\' || {u} || \'","status"\\:503,"outcome":"error"},'
        '{"upstream":"\' || {u} || \'","status":\' || {s} || \',"outcome":"ok"}]\''
    )
    api = f"({upstream}) IN ('api-openai', 'api-anthropic')"
    cost = f"({prompt} * 3e-6 + {completion} * 1.5e-5)"
    return _derived(r), {
        "time": f"(t0 + i * step + {r[6]} * step)",
        "request_id": "('r' || CAST(t0 AS INTEGER) || '-' || i)",
        "door": _case(r[0], doors),
        "model": model,
        "stream": f"({r[7]} < 0.7)",
        "key_id": f"('key-' || CAST({r[5]} * {r[5]} * {r[5]} * 200 AS INTEGER))",
        "lane": _case(r[7], [(0.97, "'client'"), (0.99, "'shadow'"), (1.0, "'eval'")]),
        "upstream": upstream,
        "provider": f"CASE WHEN {api} THEN 'p' ELSE NULL END",
        "engine": "'vllm'",
        "shape": "NULL",
        "attempts": _case(
            r[5],
            [
                (0.96, one.replace("{u}", upstream).replace("{s}", status)),
                (1.0, two.replace("{u}", upstream).replace("{s}", status)),
            ],
        ),
        "status": status,
        "error_class": f"CASE WHEN {status} >= 500 THEN 'upstream_error' ELSE NULL END",
        "finish_reason": f"CASE WHEN {r[3]} > 0.97 THEN 'length' ELSE 'stop' END",
        "truncated": f"({r[3]} > 0.97)",
        "reasoning_leak": f"({r[4]} > 0.999)",
        "max_tokens": f"CASE WHEN {r[6]} < 0.3 THEN 1024 ELSE NULL END",
        "prompt_tokens": prompt,
        "cached_tokens": f"CASE WHEN {r[1]} < 0.4 THEN {prompt} / 2 ELSE 0 END",
        "completion_tokens": completion,
        "reasoning_tokens": f"CASE WHEN {r[0]} > 0.8 THEN {completion} / 3 ELSE 0 END",
        "usage_estimated": f"({r[2]} > 0.995)",
        "queue_s": f"({r[6]} * 0.01)",
        "ttft_s": f"(0.05 + {r[5]} * 0.3)",
        "ttfa_s": "NULL",
        "e2e_s": e2e,
        "itl_mean_s": "0.02",
        "itl_p99_s": "0.05",
        "chunks": completion,
        "cost_usd": f"CASE WHEN {api} THEN {cost} ELSE NULL END",
        "charged_cost_usd": f"CASE WHEN {api} AND {r[2]} < 0.9 THEN {cost} ELSE NULL END",
        "params_hash": "NULL",
        "tool_calls": f"CASE WHEN {r[7]} < 0.05 THEN 1 ELSE 0 END",
        "sampled": f"({r[6]} < 0.01)",
        "degenerate": f"({r[4]} < 0.0005)",
        "provider_mismatch": "(1 = 0)",
        "cost_drift": "(1 = 0)",
        "unasked_reasoning": "(1 = 0)",
    }


def day_sql(postgres: bool) -> str:
    """One INSERT of a day's rows: parameters t0 (the day's first second), step (1 / rate), n."""
    derived, cols = _columns()
    names, exprs = ", ".join(cols), ", ".join(cols.values())
    rs = ", ".join(f"{_r(k)} AS r{k}" for k in range(8))
    ds = ", ".join(f"{e} AS {n}" for n, e in derived.items())
    if postgres:
        series = "generate_series(CAST(0 AS bigint), CAST(:n AS bigint) - 1) AS s(i), "
        params = (
            "(SELECT CAST(:t0 AS double precision) AS t0, "
            "CAST(:step AS double precision) AS step) p"
        )
        head = ""
    else:
        series = "s, "
        params = "(SELECT CAST(:t0 AS REAL) AS t0, CAST(:step AS REAL) AS step) p"
        head = "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :n) "
    return (
        f"{head}INSERT INTO requests ({names}) SELECT {exprs} FROM "
        f"(SELECT g1.*, {ds} FROM (SELECT i, t0, step, {rs} FROM {series}{params}) g1) g2"
    )


def generate_day(store: Store, day: int, rate: float) -> int:
    """Insert one UTC day of requests at `rate` a second; returns the rows inserted."""
    return generate_span(store, day, DAY, rate)


def generate_span(store: Store, t0: float, seconds: float, rate: float) -> int:
    """Insert `seconds` of requests from `t0` at `rate` a second (inside one UTC day), an hour a
    statement; returns the rows inserted."""
    import sqlalchemy as sa

    done = 0
    for start in range(int(t0), int(t0 + seconds), 3600):
        n = int(rate * min(3600, t0 + seconds - start))
        with store.engine.begin() as conn:
            if store.postgres:
                day = int(start // DAY) * DAY
                conn.execute(partition_ddl("requests", day))
                conn.execute(partition_ddl("contents", day))
            params = {"t0": float(start), "step": 1 / rate, "n": n}
            conn.execute(sa.text(day_sql(store.postgres)), params)
        done += n
    return done
