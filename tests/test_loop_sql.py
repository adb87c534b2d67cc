"""The guard of `tests.loop_sql` itself: it finds product code's SQL on a running event loop and
leaves a test's own async code alone."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests import loop_sql

# Stands for the product's async code: compiled under a file name in gateway/.
_PRODUCT = """
import sqlalchemy as sa

async def query(engine):
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
"""


def _product() -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(_PRODUCT, str(loop_sql.ROOT / "gateway" / "_stand_in.py"), "exec"), namespace)
    return namespace["query"]


def test_the_products_sql_on_a_running_loop_is_found(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        asyncio.run(_product()(engine))
        found, loop_sql._found[:] = list(loop_sql._found), []  # this test's failure, not kept
    finally:
        engine.dispose()
    assert len(found) == 1 and "SELECT 1" in found[0] and "_stand_in.py" in found[0]


def test_sql_off_the_loop_is_not_found(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'store.db'}")

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


async def test_a_tests_own_async_code_may_read_a_store(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    finally:
        engine.dispose()
    assert loop_sql._found == []
