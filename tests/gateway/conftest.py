from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.fake_upstream import FakeHandle, running_fake


@pytest.fixture
def fake() -> Iterator[FakeHandle]:
    with running_fake() as handle:
        yield handle


@pytest.fixture
def fake2() -> Iterator[FakeHandle]:
    with running_fake() as handle:
        yield handle


@pytest.fixture(autouse=True)
def fast_retry_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Zero the retry backoff so tests never sleep through it."""
    import gateway.dispatch

    monkeypatch.setattr(gateway.dispatch, "MAX_RETRY_AFTER_S", 0.0)
