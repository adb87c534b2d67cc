from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.ledger.store import Store
from plumbline_kit.fakes.upstream import FakeHandle, running_fake
from tests.gateway import pg


@pytest.fixture
def fake() -> Iterator[FakeHandle]:
    with running_fake() as handle:
        yield handle


@pytest.fixture
def fake2() -> Iterator[FakeHandle]:
    with running_fake() as handle:
        yield handle


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[str]:
    """A real PostgreSQL server for the session (each test takes a fresh database)."""
    if pg.bin_dir() is None:
        pytest.skip("PostgreSQL server binaries absent: apt-get install postgresql")
    with pg.server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A record store on SQLite, then on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        s = Store("sqlite:///var/records.db", root=tmp_path)
    else:
        s = Store(pg.fresh_database(request.getfixturevalue("pg_admin")))
    yield s
    s.close()
