"""The guard of `tests.loop_sql` itself: it finds product code's SQL on a running event loop and
leaves a test's own async code alone."""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from tests import loop_sql

# Stands for the product's async code: compiled under a file name outside tests/.
_PRODUCT = """
import sqlalchemy as sa

async def query(engine):
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
"""


def _product() -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(_PRODUCT, "<product>", "exec"), namespace)
    return namespace["query"]


def test_the_products_sql_on_a_running_loop_is_found() -> None:
    engine = sa.create_engine("sqlite://")
    try:
        asyncio.run(_product()(engine))
        found, loop_sql._found[:] = list(loop_sql._found), []  # this test's failure, not kept
    finally:
        engine.dispose()
    assert len(found) == 1 and "SELECT 1" in found[0] and "<product>" in found[0]


def test_sql_off_the_loop_is_not_found() -> None:
    engine = sa.create_engine("sqlite://")

    def read() -> None:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    async def main() -> None:
        await asyncio.to_thread(read)

    try:
        asyncio.run(main())
        read()
    finally:
        engine.dispose()
    assert loop_sql._found == []


async def test_a_tests_own_async_code_may_read_a_store() -> None:
    engine = sa.create_engine("sqlite://")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    finally:
        engine.dispose()
    assert loop_sql._found == []
