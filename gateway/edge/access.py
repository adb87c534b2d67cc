"""Access: who may call the gateway, which models they may use, and how much.

Keys come from `[access].keys` in the config (by sha256 only) and, when `store_keys` is on,
from the `keys` table that the admin API fills (the plaintext is shown once, at creation; only
its sha256 is stored). A presented key (`Authorization: Bearer …` or `x-api-key: …`) is hashed
and compared with `hmac.compare_digest`. Roles: `client` keys use the /v1 API, `admin` keys the
/admin routes (and /metrics), `metrics` keys only /metrics.

With no client key configured and `store_keys` off, the /v1 API is open (the embedded default).

Budgets are fixed windows counted in the `key_usage` table: a request *reserves* one request and
an estimate of its tokens with one conditional statement (`gateway.ledger.keys.reserve`), so
concurrent requests, in one process or in several gateways on one store, can never overshoot;
after the request the reservation is *settled* with the tokens the record counted. Both tables
are the ledger's (`gateway.ledger.rows`, built by its alembic revisions). Without a store the
counters live in a private in-memory SQLite database (one gateway), migrated the same way.

`gateway.edge.guard.AccessGuard` is the ASGI middleware that applies all of this before a handler
runs; `Access` is also a record sink that stamps `key_id` on the record (never the key) and
settles.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.pool import StaticPool

from gateway.config import AccessConfig, ApiKey
from gateway.errors import Forbidden, RateLimited
from gateway.ledger import keys as stored
from gateway.ledger.database import migrate
from gateway.ledger.record import Record

log = logging.getLogger(__name__)
T = TypeVar("T")

KEY_PREFIX = "pl-"


class LaneCredential(Protocol):
    """The eval lane's credential as access uses it (`gateway.edge.lane.LaneCredential`)."""

    def matches(self, digest: str) -> bool: ...

    def reveal(self) -> str: ...


CACHE_TTL_S = 5.0
CACHE_MAX = 10_000

# ---- keys -------------------------------------------------------------------------------------


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8", "surrogateescape")).hexdigest()


def new_key() -> str:
    """A fresh plaintext key: 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key in `Authorization: Bearer …` or `x-api-key: …` (ASGI raw headers)."""
    for name, value in headers:
        lname = name.lower()
        if lname == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif lname == b"x-api-key" and value.strip():
            return value.decode("latin-1").strip()
    return None


@dataclass(frozen=True, slots=True)
class Key:
    id: str
    role: str
    models: frozenset[str] | None
    requests_per_window: int | None
    tokens_per_window: int | None
    window_s: float

    @classmethod
    def from_config(cls, k: ApiKey) -> Key:
        return cls(
            k.id,
            k.role,
            frozenset(k.models) if k.models is not None else None,
            k.requests_per_window,
            k.tokens_per_window,
            k.window_s,
        )

    @property
    def budgeted(self) -> bool:
        return self.requests_per_window is not None or self.tokens_per_window is not None


@dataclass(slots=True)
class Ticket:
    """One admitted request: the key, and what it reserved in which window."""

    key: Key
    window_start: int | None = None
    reserved_tokens: int = 0
    settled: bool = False


# Who presents the eval lane's credential (gateway/edge/lane.py): no budget, every model.
LANE_KEY = Key("eval-lane", "eval", None, None, None, 60.0)

# The request's reservation: set by the guard (gateway/edge/guard.py), settled by `Access.submit`.
CURRENT_TICKET: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar(
    "plumbline_ticket", default=None
)


def reserve_estimate(body: dict[str, Any], raw_size: int, default_answer: int) -> int:
    """Tokens a request may use: ~4 bytes per prompt token plus its answer cap (times n)."""
    answer = default_answer
    for field in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            answer = value
            break
    n = body.get("n")
    copies = n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 128 else 1
    return raw_size // 4 + answer * copies


# ---- the access object ----------------------------------------------------------------------


class Access:
    """Keys, allow-lists and budgets; a `RecordSink` that settles budgets from records."""

    def __init__(
        self,
        config: AccessConfig,
        engine: Engine | None = None,
        clock: Callable[[], float] = time.time,
    ):
        """`clock`: the wall clock budget windows are aligned to (a fixed one in tests, so a
        window cannot turn over between two requests of one test)."""
        self.config = config
        self.clock = clock
        self._keys = [(k.sha256, Key.from_config(k)) for k in config.keys]
        self._lock = threading.Lock()  # the private in-memory engine has one connection
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="access")
        self._cache: dict[str, tuple[Key | None, float]] = {}
        self._pending: set[asyncio.Future[Any]] = set()
        self._reserved = 0
        self._own_engine = engine is None
        if engine is None:
            engine = sa.create_engine(
                "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
            )
            migrate(engine)
        self.engine = engine
        # The eval lane's credential (gateway/edge/lane.py), set by the app: its key is `eval`.
        self.lane: LaneCredential | None = None

    def attach(self, engine: Engine, *, own: bool = False) -> None:
        """Keep keys and counters in `engine` (the record store's, shared by every gateway on
        it, and migrated by it) from now on."""
        if self._own_engine and engine is not self.engine:
            self.engine.dispose()
        self.engine, self._own_engine = engine, own

    @property
    def open(self) -> bool:
        return self.config.open

    def reload(self, config: AccessConfig) -> None:
        self.config = config
        self._keys = [(k.sha256, Key.from_config(k)) for k in config.keys]
        self._cache.clear()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._own_engine:
            self.engine.dispose()

    async def _db(self, fn: Callable[[], T]) -> T:
        if self._own_engine:
            with self._lock:  # in-memory: microseconds, run inline
                return fn()
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    # -- authentication -------------------------------------------------------------------

    async def authenticate(self, plaintext: str) -> Key | None:
        digest = hash_key(plaintext)
        if self.lane is not None and self.lane.matches(digest):
            return LANE_KEY
        found: Key | None = None
        for known, key in self._keys:  # every entry is compared: no early exit on a match
            if hmac.compare_digest(known, digest):
                found = key
        if found is not None or not self.config.store_keys:
            return found
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        found = await self._db(lambda: self._lookup(digest))
        if len(self._cache) >= CACHE_MAX:
            self._cache.clear()
        self._cache[digest] = (found, now + CACHE_TTL_S)
        return found

    def _lookup(self, digest: str) -> Key | None:
        row = stored.find(self.engine, digest)
        if row is None or not hmac.compare_digest(row["sha256"], digest):
            return None
        models = json.loads(row["models"]) if row["models"] is not None else None
        return Key(
            row["id"],
            row["role"],
            frozenset(models) if models is not None else None,
            row["requests_per_window"],
            row["tokens_per_window"],
            row["window_s"],
        )

    # -- budgets ----------------------------------------------------------------------------

    async def admit(
        self, key: Key, model: str | None, body: dict[str, Any] | None, raw_size: int
    ) -> Ticket:
        """Check the allow-list and reserve budget; raises Forbidden or RateLimited."""
        allowed = key.models
        if model is not None and allowed is not None and self.config.route_of(model) not in allowed:
            raise Forbidden(f"This API key may not use the model {model!r}.", param="model")
        ticket = Ticket(key)
        if not key.budgeted:
            return ticket
        tokens = 0
        if key.tokens_per_window is not None and body is not None:
            estimate = reserve_estimate(body, raw_size, self.config.default_reserve_tokens)
            tokens = min(estimate, key.tokens_per_window)
        now = self.clock()
        window = int(now // key.window_s * key.window_s)
        ok = await self._db(lambda: self._reserve(key, window, tokens))
        if not ok:
            retry = max(1.0, math.ceil(window + key.window_s - now))
            what = f"{key.requests_per_window} requests" if key.requests_per_window else ""
            if key.tokens_per_window:
                what += (" / " if what else "") + f"{key.tokens_per_window} tokens"
            raise RateLimited(
                f"Rate limit reached for this API key: {what} per {key.window_s:g}s. "
                f"Retry in {retry:g}s.",
                retry,
            )
        ticket.window_start, ticket.reserved_tokens = window, tokens
        return ticket

    def _reserve(self, key: Key, window: int, tokens: int) -> bool:
        self._reserved += 1
        # Now and then, forget the key's past windows.
        forget = int(window - 2 * key.window_s) if self._reserved % 1000 == 0 else None
        limits = (key.requests_per_window, key.tokens_per_window)
        return stored.reserve(self.engine, key.id, window, tokens, limits, forget)

    def settle(self, ticket: Ticket, used_tokens: int) -> None:
        """Replace the reservation by what was used. Never blocks the event loop, never raises."""
        if ticket.settled:
            return
        ticket.settled = True
        if ticket.window_start is None or ticket.key.tokens_per_window is None:
            return
        delta = used_tokens - ticket.reserved_tokens
        if delta == 0:
            return
        args = (ticket.key.id, ticket.window_start, delta)
        try:
            if self._own_engine:
                with self._lock:
                    stored.settle(self.engine, *args)
            else:
                loop = asyncio.get_running_loop()
                future = loop.run_in_executor(self._pool, stored.settle, self.engine, *args)
                self._pending.add(future)
                future.add_done_callback(self._settled)
        except Exception:
            log.exception("settling the budget of key %s failed", ticket.key.id)

    def _settled(self, future: asyncio.Future[Any]) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("settling a key budget failed: %s", type(future.exception()).__name__)

    def usage(self, key_id: str, window_start: int) -> tuple[int, int]:
        """(requests, tokens) counted for a key in one window (reports, tests)."""
        with self._lock:
            return stored.counted(self.engine, key_id, window_start)

    # -- RecordSink -------------------------------------------------------------------------

    def submit(self, record: Record) -> None:
        """Stamp the record with the key's id and settle the reservation with its tokens."""
        ticket = CURRENT_TICKET.get()
        if ticket is None:
            return
        record.key_id = ticket.key.id
        self.settle(ticket, record.prompt_tokens + record.completion_tokens)

    # -- key management (admin API) -------------------------------------------------------

    async def create_key(
        self,
        key_id: str,
        *,
        role: str = "client",
        models: list[str] | None = None,
        requests_per_window: int | None = None,
        tokens_per_window: int | None = None,
        window_s: float = 60.0,
    ) -> str:
        """Store a new key; returns its plaintext (the only time it exists outside the client)."""
        plaintext = new_key()
        row = {
            "id": key_id,
            "sha256": hash_key(plaintext),
            "role": role,
            "models": json.dumps(models) if models is not None else None,
            "requests_per_window": requests_per_window,
            "tokens_per_window": tokens_per_window,
            "window_s": window_s,
            "created": self.clock(),
            "revoked": None,
        }
        await self._db(lambda: stored.insert(self.engine, row))
        return plaintext

    async def revoke_key(self, key_id: str) -> bool:
        now = self.clock()
        done = await self._db(lambda: stored.revoke(self.engine, key_id, now))
        self._cache.clear()
        return done

    async def list_keys(self) -> list[dict[str, Any]]:
        """Every key without its hash: config keys and (if enabled) store keys."""
        out = [
            {
                "id": k.id,
                "role": k.role,
                "source": "config",
                "models": sorted(k.models) if k.models is not None else None,
                "requests_per_window": k.requests_per_window,
                "tokens_per_window": k.tokens_per_window,
                "window_s": k.window_s,
            }
            for _, k in self._keys
        ]
        rows = await self._db(lambda: stored.stored(self.engine))
        for r in rows:
            out.append(
                {
                    "id": r["id"],
                    "role": r["role"],
                    "source": "store",
                    "models": json.loads(r["models"]) if r["models"] else None,
                    "requests_per_window": r["requests_per_window"],
                    "tokens_per_window": r["tokens_per_window"],
                    "window_s": r["window_s"],
                    "created": r["created"],
                    "revoked": r["revoked"],
                }
            )
        return out
