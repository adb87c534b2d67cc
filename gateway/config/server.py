"""Config of `[server]` (the HTTP edge's limits and timeouts, retries, cool-down, health
probes, affinity) and `[store]` (the record store). Same rules as gateway/config/frozen.py
(frozen, unknown keys are errors).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.frozen import Frozen


class ServerConfig(Frozen):
    # Address the gateway listens on (127.0.0.1: this machine only; 0.0.0.0: every interface).
    host: str = "127.0.0.1"
    # TCP port of the OpenAI-compatible API, /health, /metrics and the console.
    port: int = Field(8400, ge=0, le=65535)
    # Gateway processes serving the one port (`plumbline serve`; `--workers` overrides it).
    # Above 1, what is not in the record store is each worker's own (README, "Several workers").
    workers: int = Field(1, ge=1)
    # Largest request body accepted (bytes); larger bodies get a 413 before they are read whole.
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    # Largest request head (all header names and values); larger gets a 431, counted as the
    # bytes arrive (the connection is closed once they pass it, never buffered whole).
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    # The client's connection (gateway/edge/connection.py, docs/limits.md). Seconds allowed
    # from a request's first byte to the end of its head; a slower one gets a 408 and a close.
    header_timeout_s: float = Field(10.0, gt=0, le=3600)
    # Seconds a connection may sit with no request (new, or between keep-alive requests).
    keepalive_timeout_s: float = Field(60.0, gt=0, le=3600)
    # Seconds allowed between two pieces of a request body; then a 408 and a close.
    body_timeout_s: float = Field(60.0, gt=0, le=3600)
    # Seconds a client may leave the answer unread (its socket full) before it is dropped and
    # its upstream request stopped.
    send_timeout_s: float = Field(60.0, gt=0, le=3600)
    # Client connections served at once; more are answered 503 (and closed at once past twice
    # this). Lowered at start to what the process's file descriptors allow.
    max_connections: int = Field(4096, ge=1)
    # Seconds to wait for an upstream's first byte before moving to the next candidate.
    ttft_timeout_s: float = Field(120.0, gt=0)
    # Whole-response budget for non-streamed requests (generous: the model's time is not capped).
    request_timeout_s: float = Field(3600.0, gt=0)
    # Non-streamed requests: no response headers within this -> next candidate (a hung replica
    # is left long before `request_timeout_s`). vLLM and llama.cpp send a whole answer's headers
    # only once it is complete, so this also bounds their longest whole answer.
    first_byte_timeout_s: float = Field(600.0, gt=0)
    # Longest silence tolerated between two bytes of a stream once it has started.
    idle_timeout_s: float = Field(300.0, gt=0)
    # A streamed /v1/responses answer sends `response.in_progress` after this long without an
    # event (Codex gives a stream up after 300 s without one; SSE comments do not count).
    heartbeat_s: float = Field(15.0, gt=0)
    connect_timeout_s: float = Field(5.0, gt=0)
    # Extra attempts on the same upstream (connection errors, 429, 5xx) before falling back.
    retries: int = Field(1, ge=0, le=10)
    retry_backoff_s: float = Field(0.25, ge=0)
    # The longest `Retry-After` (seconds or an HTTP date) honoured before a retry; longer waits
    # are cut to this.
    retry_after_max_s: float = Field(10.0, ge=0)
    # An upstream that fails `cooldown_after` times in a row is skipped for `cooldown_s`.
    cooldown_after: int = Field(3, ge=1)
    cooldown_s: float = Field(15.0, ge=0)
    # Seconds between health probes of every upstream (0 disables probing).
    health_interval_s: float = Field(10.0, ge=0)
    # Header that pins a conversation to one replica (explicit session affinity).
    session_header: str = "x-session-id"
    # Characters of the prompt that make up the prefix-affinity key, and how many keys to keep.
    prefix_chars: int = Field(2048, ge=64)
    prefix_index_size: int = Field(10_000, ge=16)
    # A replica with this many more requests in flight than the least-loaded one is "overloaded".
    overload_margin: int = Field(8, ge=1)
    # Requests in flight above which a replica counts as saturated (0 = no limit).
    max_inflight_per_upstream: int = Field(0, ge=0)


class StoreConfig(Frozen):
    # Keep a record of every request in the store (metrics are kept either way).
    enabled: bool = True
    # SQLAlchemy URL; relative sqlite paths are resolved against the config file's folder.
    url: str = "sqlite:///var/plumbline.db"
    retention_days: int = Field(30, ge=1)
    # The 5-minute rollups that cost, health and traffic reports read (gateway/ledger/
    # retention.py): kept this long, at least `retention_days` (None: as long). Longer keeps
    # those reports past the rows: two days of rows and a year of rollups, at the seed's rate.
    rollup_retention_days: int | None = Field(None, ge=1)
    # Keep prompts and responses (in a separate table with its own retention). Off by default.
    store_content: bool = False
    content_retention_days: int = Field(7, ge=1)
    # Responses stored by the Responses door (`store`, default true as OpenAI's) and the
    # Messages door's threads: kept this long (OpenAI keeps them 30 days), then purged.
    responses_retention_days: float = Field(30, gt=0)
    # store_content: each of a row's `prompt` and `response` kept to this many bytes (UTF-8), a
    # longer one cut and marked `[plumbline: truncated at N of M bytes]`.
    content_max_bytes: int = Field(65536, ge=1024, le=16 * 1024 * 1024)
    # The record journal's fsync (gateway/ledger/journal.py). Every finished record is copied
    # into the process's journal (a shared memory map) before its answer ends, so a killed
    # process loses none. "interval": fsynced by the record queue every flush (0.2 s), so a
    # crash of the whole machine loses at most that; "always": fsynced on the request path
    # before the answer ends.
    journal_fsync: Literal["interval", "always"] = "interval"
    # Seconds between two housekeeping runs of each gateway process (gateway/edge/housekeeping.py):
    # the gate decisions and demotions of the other gateways, the hourly rollups, the node-vs-API
    # economics; retention runs with the first of them and then once an hour whatever this is.
    housekeeping_interval_s: float = Field(60.0, gt=0, le=3600)
    # The store's upkeep (rollups, retention) in a child process of its own, from its second run
    # on (gateway/ledger/upkeep.py), so its Python never holds the serving process's GIL: in
    # housekeeping's thread a live bucket's rollup added 2.2 ms to the p99 of requests at 300/s
    # on 16 cores (1.0 ms on 2), in the child nothing. It costs the upkeep's holder two
    # processes, about 86 MB resident. Off: in housekeeping's thread (a small box short of
    # memory). An in-memory SQLite store always keeps it in the thread.
    upkeep_process: bool = True

    @model_validator(mode="after")
    def _rollups_outlive_rows(self) -> StoreConfig:
        kept = self.rollup_retention_days
        if kept is not None and kept < self.retention_days:
            raise ValueError(
                f"store.rollup_retention_days ({kept}) is shorter than retention_days "
                f"({self.retention_days}): reports read the rollups for every whole 5 minutes, "
                "so they must be kept at least as long as the rows"
            )
        return self
