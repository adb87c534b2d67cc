"""Retry: another attempt on the *same* upstream, under one tenacity policy.

An attempt is retried when its error says it may be (connection errors, 429 and 5xx; never a
first-byte timeout, which moves on to the next candidate at once). The wait is the upstream's
Retry-After (seconds or an HTTP date) up to `server.retry_after_max_s`, else exponential backoff
from `server.retry_backoff_s` with jitter. Fallback, the next candidate, is dispatch's.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from gateway.config.server import ServerConfig
from gateway.errors import AttemptError

T = TypeVar("T")


def retryable(error: BaseException) -> bool:
    return isinstance(error, AttemptError) and error.retryable and error.outcome != "ttft_timeout"


def retry_delay(
    server: ServerConfig, rand: random.Random, error: BaseException | None, failed_attempts: int
) -> float:
    """Seconds before the next attempt: Retry-After when the upstream said so (capped), else
    exponential backoff with jitter."""
    if isinstance(error, AttemptError) and error.retry_after is not None:
        return min(error.retry_after, server.retry_after_max_s)
    base = server.retry_backoff_s
    return min(base * 2 ** (failed_attempts - 1), base * 16) + rand.uniform(0, base)


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    retries: int,
    sleep: Callable[[float], Awaitable[None]],
    delay: Callable[[BaseException | None, int], float],
) -> T:
    """`attempt`, then up to `retries` more while its error is retryable, `delay` apart. The
    first runs bare (most succeed, and tenacity's machinery is not free); the retries run under
    one tenacity policy."""
    try:
        return await attempt()
    except AttemptError as e:
        if not retries or not retryable(e):
            raise
        await sleep(delay(e, 1))
    retrying = AsyncRetrying(
        sleep=sleep,
        stop=stop_after_attempt(retries),
        wait=lambda state: delay(
            state.outcome.exception() if state.outcome else None, state.attempt_number + 1
        ),
        retry=retry_if_exception(retryable),
        reraise=True,
    )
    async for each in retrying:
        with each:
            return await attempt()
    raise AssertionError("unreachable: tenacity reraises the last error")
