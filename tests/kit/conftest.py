from __future__ import annotations

from collections.abc import Iterator

import pytest

from plumbline_kit.fakes.upstream import FakeHandle, running_fake


@pytest.fixture
def fake() -> Iterator[FakeHandle]:
    with running_fake() as handle:
        yield handle
