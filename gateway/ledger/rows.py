"""The store's tables as row models: every table in the database is declared here, and the
alembic revisions in `gateway/ledger/migrations/` build exactly these (tests/gateway/ledger/
test_store.py compares them).

`requests` and `contents` hold records (`gateway.ledger.store.Store` writes them); the gateway
decision, eval, shadow and demotion tables are the state several gateways on one store share;
`keys` and `key_usage` are the admin API's keys and the budget counters
(`gateway.ledger.keys`).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

metadata = sa.MetaData()


class RequestRow(SQLModel, table=True, metadata=metadata):
    """One client request: every field of `Record.as_row()`, attempts as JSON text."""

    __tablename__ = "requests"
    __table_args__ = (
        sa.Index("ix_requests_model_time", "model", "time"),
        sa.Index("ix_requests_upstream_time", "upstream", "time"),
        sa.Index("ix_requests_shadow_of", "shadow_of"),
        # The shadow copies' times alone: a window's shadow pairs (`gateway/reports/shadow.py`).
        sa.Index(
            "ix_requests_shadow_time",
            "time",
            postgresql_where=sa.text("shadow_of IS NOT NULL"),
            sqlite_where=sa.text("shadow_of IS NOT NULL"),
        ),
        {"postgresql_partition_by": "RANGE (time)"},
    )

    time: float = Field(primary_key=True)
    request_id: str = Field(primary_key=True, max_length=128)
    door: str = Field(max_length=32)
    model: str = Field(max_length=128)
    stream: bool
    key_id: str | None = Field(default=None, max_length=128)
    lane: str = Field(max_length=16)
    upstream: str | None = Field(default=None, max_length=128)
    provider: str | None = Field(default=None, max_length=128)
    engine: str | None = Field(default=None, max_length=128)
    shape: str | None = Field(default=None, max_length=32)
    attempts: str = Field(sa_type=sa.Text)
    status: int
    error_class: str | None = Field(default=None, max_length=64)
    finish_reason: str | None = Field(default=None, max_length=32)
    truncated: bool
    reasoning_leak: bool
    max_tokens: int | None = None
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    usage_estimated: bool
    queue_s: float | None = None
    ttft_s: float | None = None
    ttfa_s: float | None = None
    e2e_s: float | None = None
    itl_mean_s: float | None = None
    itl_p99_s: float | None = None
    chunks: int
    cost_usd: float | None = None
    charged_cost_usd: float | None = None
    params_hash: str | None = Field(default=None, max_length=128)
    dropped: str | None = Field(default=None, sa_type=sa.Text)
    clamped: str | None = Field(default=None, sa_type=sa.Text)
    coerced: str | None = Field(default=None, sa_type=sa.Text)
    semantics: str | None = Field(default=None, sa_type=sa.Text)
    unsent: str | None = Field(default=None, sa_type=sa.Text)
    accepted_unequal: str | None = Field(default=None, sa_type=sa.Text)
    tool_calls: int
    sampled: bool = False
    degenerate: bool = False
    tool_call_error: str | None = Field(default=None, max_length=32)
    provider_mismatch: bool = False
    cost_drift: bool = False
    unasked_reasoning: bool = False
    trace_id: str | None = Field(default=None, max_length=32)
    shadow_of: str | None = Field(default=None, max_length=128)
    agreement: str | None = Field(default=None, max_length=32)


class ContentRow(SQLModel, table=True, metadata=metadata):
    """Prompt and response of one request; written only when `store.store_content` is on."""

    __tablename__ = "contents"
    __table_args__ = ({"postgresql_partition_by": "RANGE (time)"},)

    time: float = Field(primary_key=True)
    request_id: str = Field(primary_key=True, max_length=128)
    prompt: str | None = Field(default=None, sa_type=sa.Text)
    response: str | None = Field(default=None, sa_type=sa.Text)


class GateDecisionRow(SQLModel, table=True, metadata=metadata):
    """A quality-gate decision (`gateway.trust.gate.GateDecision` as JSON), kept so every gateway on
    the store routes by the same one."""

    __tablename__ = "gate_decisions"

    model: str = Field(primary_key=True, max_length=128)
    time: float = Field(primary_key=True)
    decision: str = Field(sa_type=sa.Text)


class EvalRoundRow(SQLModel, table=True, metadata=metadata):
    """A scheduled eval round, claimed by one gateway (`Store.claim_round`)."""

    __tablename__ = "eval_rounds"

    started: float = Field(primary_key=True)
    gateway: str = Field(max_length=128)
    finished: float | None = None
    outcome: str | None = Field(None, max_length=16)  # ok | failed
    error_class: str | None = Field(None, max_length=64)
    error: str | None = Field(None, sa_type=sa.Text)  # redacted


class TripwireVerdictRow(SQLModel, table=True, metadata=metadata):
    """One tripwire on one target before it was scored or benched (evals/tripwire.py)."""

    __tablename__ = "tripwire_verdicts"
    __table_args__ = (sa.Index("ix_tripwire_verdicts_run", "run"),)

    time: float = Field(primary_key=True)
    target: str = Field(primary_key=True, max_length=256)
    run: str = Field(max_length=128)  # the round's or the run's id
    source: str = Field(max_length=16)  # round | eval run | bench
    verdict: str = Field(max_length=16)  # ok | degenerate | wrong | error
    passed: bool
    report: str = Field(sa_type=sa.Text)  # counts and per prompt verdict and why (JSON)


class ShadowUsageRow(SQLModel, table=True, metadata=metadata):
    """What a route's shadow has used of its daily budget, across every gateway on the store."""

    __tablename__ = "shadow_usage"

    model: str = Field(primary_key=True, max_length=128)
    day: int = Field(primary_key=True)  # UTC day: epoch seconds // 86400
    requests: int = 0
    usd: float = 0.0


class EvalResultRow(SQLModel, table=True, metadata=metadata):
    """One scored item of a scheduled eval run (`evals.result.ItemResult` as JSON), kept in the
    store so a run outlives the gateway (a pod's disk) that ran it."""

    __tablename__ = "eval_results"

    run: str = Field(primary_key=True, max_length=128)
    target: str = Field(primary_key=True, max_length=256)
    item_digest: str = Field(primary_key=True, max_length=128)
    time: float
    result: str = Field(sa_type=sa.Text)


class DemotionRow(SQLModel, table=True, metadata=metadata):
    """An upstream one gateway's watchdog demoted, and the checks that tripped; refreshed while
    it lasts, so every gateway on the store routes around it (`Store.demotions`)."""

    __tablename__ = "demotions"

    upstream: str = Field(primary_key=True, max_length=128)
    gateway: str = Field(primary_key=True, max_length=128)
    checks: str = Field(max_length=512)  # comma-separated
    refreshed: float


class KeyRow(SQLModel, table=True, metadata=metadata):
    """An API key the admin API created: its sha256 (never the plaintext), role and budget."""

    __tablename__ = "keys"

    id: str = Field(primary_key=True, max_length=128)
    sha256: str = Field(max_length=64, unique=True)
    role: str = Field(max_length=16)
    models: str | None = Field(default=None, sa_type=sa.Text)  # JSON list, NULL = every model
    requests_per_window: int | None = None
    tokens_per_window: int | None = Field(default=None, sa_type=sa.BigInteger)
    window_s: float
    created: float
    revoked: float | None = None


class KeyUsageRow(SQLModel, table=True, metadata=metadata):
    """What a key has used of its budget in one fixed window (`gateway.ledger.keys.reserve`)."""

    __tablename__ = "key_usage"

    key_id: str = Field(primary_key=True, max_length=128)
    window_start: int = Field(
        primary_key=True, sa_type=sa.BigInteger, sa_column_kwargs={"autoincrement": False}
    )
    requests: int
    tokens: int = Field(sa_type=sa.BigInteger)


class QuarantineRow(SQLModel, table=True, metadata=metadata):
    """A row the store refused (a value it cannot bind or hold), kept aside as JSON with the
    database's reason, so it never holds back another (`gateway.ledger.quarantine`)."""

    __tablename__ = "quarantine"

    kind: str = Field(primary_key=True, max_length=16)  # the table it was for: requests | contents
    time: float = Field(primary_key=True)
    request_id: str = Field(primary_key=True, max_length=128)
    row: str = Field(sa_type=sa.Text)
    reason: str = Field(sa_type=sa.Text)
    quarantined: float


class StoredResponseRow(SQLModel, table=True, metadata=metadata):
    """A response the Responses door stored (`store`), or a Messages-door thread's state, under
    the key that made it ('' with no keys configured); `gateway.ledger.responses_store`."""

    __tablename__ = "stored_responses"
    __table_args__ = (sa.Index("ix_stored_responses_created", "created"),)

    id: str = Field(primary_key=True, max_length=128)  # resp_… | msg_…
    key_id: str = Field(max_length=128)
    door: str = Field(max_length=16)  # responses | messages
    created: float
    body: str = Field(sa_type=sa.Text)  # JSON: the response object, or the thread's state


class StoredItemRow(SQLModel, table=True, metadata=metadata):
    """One input or output item of a stored response, in order, findable by its item id
    (`item_reference`, `GET /v1/responses/{id}/input_items`)."""

    __tablename__ = "stored_items"
    __table_args__ = (sa.Index("ix_stored_items_item_id", "item_id"),)

    response_id: str = Field(primary_key=True, max_length=128)
    position: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    item_id: str = Field(max_length=128)
    source: str = Field(max_length=8)  # input | output
    item: str = Field(sa_type=sa.Text)  # JSON


class RejectionRow(SQLModel, table=True, metadata=metadata):
    """A request refused before it had a record (`gateway.ledger.rejection.Rejection`): why,
    with what status, at which door, by which key id, for which model as asked. Never a key,
    a secret or a body."""

    __tablename__ = "rejections"
    __table_args__ = (sa.Index("ix_rejections_reason_time", "reason", "time"),)

    time: float = Field(primary_key=True)
    request_id: str = Field(primary_key=True, max_length=128)
    client_request_id: str | None = Field(default=None, max_length=128)
    door: str = Field(max_length=32)
    reason: str = Field(max_length=32)
    status: int
    key_id: str | None = Field(default=None, max_length=128)
    model: str | None = Field(default=None, max_length=128)
    lane: str = Field(max_length=16)


REQUESTS: sa.Table = RequestRow.__table__  # type: ignore[attr-defined]
CONTENTS: sa.Table = ContentRow.__table__  # type: ignore[attr-defined]
DECISIONS: sa.Table = GateDecisionRow.__table__  # type: ignore[attr-defined]
ROUNDS: sa.Table = EvalRoundRow.__table__  # type: ignore[attr-defined]
TRIPWIRES: sa.Table = TripwireVerdictRow.__table__  # type: ignore[attr-defined]
SHADOW_USAGE: sa.Table = ShadowUsageRow.__table__  # type: ignore[attr-defined]
EVAL_RESULTS: sa.Table = EvalResultRow.__table__  # type: ignore[attr-defined]
DEMOTIONS: sa.Table = DemotionRow.__table__  # type: ignore[attr-defined]
KEYS: sa.Table = KeyRow.__table__  # type: ignore[attr-defined]
KEY_USAGE: sa.Table = KeyUsageRow.__table__  # type: ignore[attr-defined]
QUARANTINE: sa.Table = QuarantineRow.__table__  # type: ignore[attr-defined]
STORED_RESPONSES: sa.Table = StoredResponseRow.__table__  # type: ignore[attr-defined]
STORED_ITEMS: sa.Table = StoredItemRow.__table__  # type: ignore[attr-defined]


REJECTIONS: sa.Table = RejectionRow.__table__  # type: ignore[attr-defined]


# Who does a piece of the store's shared work, and until when (`gateway.ledger.lease`).
LEASES = sa.Table(
    "leases",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("holder", sa.String(128), nullable=False),
    sa.Column("until", sa.Float, nullable=False),
)
